"""The stack of traces under construction.

While a grad rule or a transform builds a new trace, calling a `Symbol` records a bound
symbol into the innermost builder on this stack instead of running on tensors. This module
holds only the stack, one per thread (it imports nothing of thunderviz), so `symbol.py` can
consult it and `builder.py` can push onto it without an import cycle.
"""

from __future__ import annotations

import threading
from typing import Any

# One stack per thread: two threads differentiating at once each build their own traces.
_local = threading.local()


def _builders() -> list[Any]:
    stack = getattr(_local, "builders", None)
    if stack is None:
        stack = _local.builders = []
    return stack


def current_builder() -> Any | None:
    stack = _builders()
    return stack[-1] if stack else None


def push_builder(builder: Any) -> None:
    _builders().append(builder)


def pop_builder(builder: Any) -> None:
    stack = _builders()
    if not stack or stack[-1] is not builder:
        raise RuntimeError("trace builders must be exited in the order they were entered")
    stack.pop()
