"""Module attributes the forward sets to tensors (`self.last_attention = att.detach()`).

`jit` runs the traced program, not the forward's Python: such an assignment happens once,
while the program is traced, and the attribute then keeps that call's tensor on every later
call, where eager updates it each time. Until the trace can carry such writes, `jit` says so
when it traces a forward that makes them, naming the attributes, instead of leaving a stale
tensor where a user looks for the current one.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["warning_of_tensor_attributes"]


@contextlib.contextmanager
def warning_of_tensor_attributes(
    submodules: list[torch.nn.Module], paths: list[str], name: str
) -> Iterator[None]:
    """Warn (after the block: a trace) when the block set a module attribute to a tensor."""
    before: list[dict[str, Any]] = [dict(m.__dict__) for m in submodules]
    yield
    written = [
        f"{path}.{key}" if path else key
        for m, path, old in zip(submodules, paths, before, strict=True)
        for key, value in m.__dict__.items()
        if isinstance(value, torch.Tensor) and old.get(key) is not value
    ]
    if written:
        warnings.warn(
            f"thunderviz.jit({name}): the forward sets {', '.join(written)} to a tensor. jit "
            "runs the traced program, not the forward's Python, so that attribute holds the "
            "tensor of the call that was traced and is not updated by later calls (eager "
            "updates it each time). Return the tensor from the forward instead, or read it "
            "with thunderviz's viewer (every intermediate of a trace is there).",
            stacklevel=6,  # the user's call of the jitted function
        )
