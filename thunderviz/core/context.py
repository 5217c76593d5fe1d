"""The stack of traces under construction.

While a grad rule or a transform builds a new trace, calling a `Symbol` records a bound
symbol into the innermost builder on this stack instead of running on tensors. This module
holds only the stack (it imports nothing of thunderviz), so `symbol.py` can consult it and
`builder.py` can push onto it without an import cycle.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

# A context variable, so each thread (and each asyncio task) builds its own traces: two
# threads differentiating at once never record into each other's builder. The stack is a
# tuple, replaced on each push and pop, so no context ever sees another's change.
_builders: ContextVar[tuple[Any, ...]] = ContextVar("thunderviz_builders", default=())


def current_builder() -> Any | None:
    stack = _builders.get()
    return stack[-1] if stack else None


def building() -> Any:
    """The builder in use, for code that only runs while a trace is built (grad rules)."""
    builder = current_builder()
    if builder is None:
        raise RuntimeError("no trace is being built here")
    return builder


def push_builder(builder: Any) -> None:
    _builders.set((*_builders.get(), builder))


def pop_builder(builder: Any) -> None:
    stack = _builders.get()
    if not stack or stack[-1] is not builder:
        raise RuntimeError("trace builders must be exited in the order they were entered")
    _builders.set(stack[:-1])
