"""The data model: proxies, symbols, bound symbols, traces and the DAG over them.

`core` imports nothing else of thunderviz: every other layer builds on it.
"""

from thunderviz.core.builder import TraceBuilder
from thunderviz.core.inputs import InputKind, TraceInput
from thunderviz.core.proxies import NameGenerator, NumberProxy, Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol, BsymTag, SourceLocation, Symbol, SymbolKind
from thunderviz.core.trace import Provenance, Trace, TraceTag, timed_provenance

__all__ = [
    "BoundSymbol",
    "BsymTag",
    "InputKind",
    "NameGenerator",
    "NumberProxy",
    "Provenance",
    "Proxy",
    "SourceLocation",
    "Symbol",
    "SymbolKind",
    "TensorProxy",
    "Trace",
    "TraceInput",
    "TraceBuilder",
    "TraceTag",
    "timed_provenance",
]
