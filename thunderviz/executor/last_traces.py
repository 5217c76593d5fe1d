"""Asking a jitted function for the traces of its last call (`thunderviz.last_traces`,
`thunderviz.last_backward_traces`), as Thunder's users do."""

from __future__ import annotations

from typing import Any

from thunderviz.core.trace import Trace
from thunderviz.executor.bridge import CompiledEntry
from thunderviz.executor.jit import JittedFunction

__all__ = ["last_traces", "last_backward_traces"]


def _entry(jitted: Any) -> CompiledEntry:
    if not isinstance(jitted, JittedFunction):
        raise TypeError(f"expected the result of thunderviz.jit, got {type(jitted).__name__}")
    if jitted.last is None:
        raise ValueError(
            "this jitted function has not been called yet: call it once, then ask for its traces"
        )
    return jitted.last


def last_traces(jitted: JittedFunction) -> list[Trace]:
    """The forward traces of the last call, in the order they were made (as in Thunder)."""
    entry = _entry(jitted)
    if entry.result is None:
        return [entry.forward]
    return [entry.forward, entry.executed[0]]  # the augmented forward as it runs (guards in)


def last_backward_traces(jitted: JittedFunction) -> list[Trace]:
    """The backward traces of the last call (empty when nothing needed a gradient)."""
    entry = _entry(jitted)
    return [] if entry.result is None else [entry.result.backward]
