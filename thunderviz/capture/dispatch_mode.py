"""The base of thunderviz's TorchDispatchModes: the recorder's, and the one that collects a
stamped block's values while it runs eagerly (`stamped_values.py`).

torch wraps a mode's `__torch_dispatch__` in the decorator that keeps dynamo out of it. That
decorator switches dynamo's frame evaluation off and on around every ATen op, some 20
microseconds each, nearly half of recording a cheap op. torch's own hook,
`_should_skip_dynamo`, leaves it unwrapped, and this class keeps dynamo out itself, only
where dynamo is running (a `torch.compile`d submodule inside the traced program), at the
cost of one getter call per op.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch._compile import _disable_dynamo
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _disable_current_modes,
    _get_current_dispatch_mode,
)

__all__ = ["DynamoSafeDispatchMode", "recording", "unrecorded"]


class DynamoSafeDispatchMode(TorchDispatchMode):
    """A TorchDispatchMode whose ATen calls go to `on_dispatch(func, args, kwargs)`."""

    # whether the ops it sees are a program's being recorded (the recorder's mode)
    records_program = False

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def on_dispatch(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if _eval_frame_callback() is not None:
            # under torch.compile: dynamo would otherwise try to compile our frames
            return _outside_dynamo(self.on_dispatch, func, args, kwargs or {})
        return self.on_dispatch(func, args, kwargs or {})


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


# torch's own decorator (dynamo is imported on its first call, made only under torch.compile)
_outside_dynamo = _disable_dynamo(_call, recursive=True)
# dynamo's current frame callback, None when nothing is being compiled or run compiled; where
# a torch build lacks the getter, every op goes the safe way
_eval_frame_callback: Callable[[], Any] = getattr(
    getattr(getattr(torch._C, "_dynamo", None), "eval_frame", None),
    "get_eval_frame_callback",
    lambda: True,
)


def recording() -> bool:
    """Whether the ops run now are recorded as a program's (a backward traced inside the
    program runs a user's Function's forward so, `autodiff/inner_grad.py`)."""
    return getattr(_get_current_dispatch_mode(), "records_program", False)


@contextlib.contextmanager
def unrecorded() -> Iterator[None]:
    """torch with no mode on: what runs inside is the tracer's own work (an alias, a copy
    kept, a fake tensor), never the program's. Both kinds of mode are off, whichever are on
    the stacks now: a Function's apply can be reached with the recorder's torch-function
    mode already popped (from a custom op's autograd kernel, under a torch function)."""
    with _disable_current_modes(), torch._C.DisableTorchFunction():
        yield
