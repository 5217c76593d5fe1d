"""Tensors the forward assigns to module attributes (`self.last_attention = att.detach()`).

Debugging and research code keeps intermediates this way. Capture notes each such write as
(module path, attribute, the proxy of the value) in `trace.meta["attribute_writes"]`, so a
runner of the trace can make the assignment too (`jit` does, after every call), and puts the
attribute back as it was: tracing leaves the user's module untouched (a fake trace would
otherwise leave FakeTensors on it).
"""

from __future__ import annotations

from typing import Any

import torch

from thunderviz.core.plain import SCALARS
from thunderviz.core.proxies import Proxy

__all__ = ["AttributeWrites"]

_ABSENT = object()
_PLAIN = SCALARS


def _plain(value: Any) -> bool:
    return type(value) in _PLAIN or (type(value) is tuple and all(_plain(v) for v in value))


class AttributeWrites:
    """The attributes of a module tree before a trace, and the tensor writes after it."""

    def __init__(self, module: torch.nn.Module | None) -> None:
        named = module.named_modules() if module is not None else []
        self._before = [(path, m, dict(m.__dict__)) for path, m in named]
        self._written: list[tuple[torch.nn.Module, str, Any]] = []

    def collect(self, recorder: Any) -> list[tuple[str, str, Proxy]]:
        """(path, attribute, proxy) for each tensor the forward assigned to an attribute. A
        value the recording never saw is a tensor from outside the program: a constant.
        (Block stamping records for real any block that sets an attribute, so no value
        made inside the program goes unseen.)"""
        found: list[tuple[str, str, Proxy]] = []
        for path, m, before in self._before:
            for name, value in m.__dict__.items():
                if not isinstance(value, torch.Tensor) or before.get(name, _ABSENT) is value:
                    continue
                self._written.append((m, name, before.get(name, _ABSENT)))
                found.append((path, name, recorder.proxy_of(value)))
        return found

    def collect_values(self) -> list[tuple[str, str, Any]]:
        """(path, attribute, value) for each plain value (a number, a string, a tuple of
        them) the forward assigned to an attribute: a queue's write pointer
        (`self.ptr = (self.ptr + n) % size`), a step count. What the forward computed it from
        is in the trace's key and snapshot, so a run of the trace assigns the same value."""
        found: list[tuple[str, str, Any]] = []
        for path, m, before in self._before:
            for name, value in m.__dict__.items():
                old = before.get(name, _ABSENT)
                if _plain(value) and not (type(old) is type(value) and old == value):
                    self._written.append((m, name, old))
                    found.append((path, name, value))
        return found

    def restore(self) -> None:
        """The written attributes as they were before the trace."""
        for m, name, old in self._written:
            if old is _ABSENT:
                m.__dict__.pop(name, None)
            else:
                m.__dict__[name] = old
        self._written.clear()
