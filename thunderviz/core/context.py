"""The stack of traces under construction.

While a grad rule or a transform builds a new trace, calling a `Symbol` records a bound
symbol into the innermost builder on this stack instead of running on tensors. This module
holds only the stack (it imports nothing), so `symbol.py` can consult it and `builder.py`
can push onto it without an import cycle.
"""

from __future__ import annotations

from typing import Any

_builders: list[Any] = []


def current_builder() -> Any | None:
    return _builders[-1] if _builders else None


def push_builder(builder: Any) -> None:
    _builders.append(builder)


def pop_builder(builder: Any) -> None:
    if not _builders or _builders[-1] is not builder:
        raise RuntimeError("trace builders must be exited in the order they were entered")
    _builders.pop()
