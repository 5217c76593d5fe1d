"""Class (and module) attributes of torch's that capture replaces while traces run.

A trace needs torch's own code to do something else for the thread that traces
(`Function.apply` recorded, `TransformerEncoder.forward` padding as eager's nested path):
the class attribute is replaced while any trace needs it, and the replacement asks, per
thread, whether it is being traced. Traces run in several threads at once and inside one
another, so the attribute is replaced when the first of them starts and put back when the
last ends (counted per attribute, under a lock).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["class_patched"]

_lock = threading.Lock()
# (class or module, attribute name) -> [its own value, how many traces use the replacement]
_patches: dict[tuple[Any, str], list[Any]] = {}


@contextlib.contextmanager
def class_patched(cls: Any, name: str, value: Any) -> Iterator[None]:
    """While the body runs, `cls.<name>` is `value` (for every thread: `value` tells the
    tracing one apart); the class's own is back when the last body using it ends."""
    key = (cls, name)
    with _lock:
        if key not in _patches:
            _patches[key] = [cls.__dict__[name], 0]
            setattr(cls, name, value)
        _patches[key][1] += 1
    try:
        yield
    finally:
        with _lock:
            _patches[key][1] -= 1
            if _patches[key][1] == 0:
                setattr(cls, name, _patches.pop(key)[0])
