"""thunderviz: a visual debugger for autodiff in Jupyter.

The public API lives here; nothing else needs importing.
"""

from thunderviz.capture import CaptureError, trace
from thunderviz.core import BoundSymbol, NumberProxy, Proxy, TensorProxy, Trace, TraceTag

__version__ = "0.1.0"

__all__ = [
    "BoundSymbol",
    "CaptureError",
    "NumberProxy",
    "Proxy",
    "TensorProxy",
    "Trace",
    "TraceTag",
    "trace",
]
