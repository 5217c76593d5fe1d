"""`torch.cond` in a trace: the branch this run's predicate takes, as eager runs it.

A trace is one run of the program (executor/guards.py): a Python `if` on a tensor's value
is recorded as the branch taken, with a guard that traces again when the value flips.
`torch.cond(pred, true_fn, false_fn, operands)` is the same choice written as a call (for
`torch.export`, which keeps both branches); in eager it computes the branch `pred` picks.
So while a trace runs, `torch.cond` called in the tracing thread is that: `bool(pred)` (a
tensor's value: recorded, and guarded under jit), then the branch, whose ops are recorded
as any others. (Eager's `torch.cond` compiles a call of its operator for a tensor predicate;
under a trace's modes that compile would trace the recorder itself.) Eager's cond never
returns an operand itself: a branch returning one as it is gets a copy, as eager's. Its
check that both branches return alike (it traces the other with fake tensors) is not made:
a program eager refuses for that runs here. `from torch import cond`, bound before the
trace, is torch's own.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch

from thunderviz.capture.class_patches import class_patched

__all__ = ["choosing_branches"]

_ORIGINAL = torch.cond
_SIGNATURE = inspect.signature(_ORIGINAL)
_tracing: ContextVar[bool] = ContextVar("thunderviz_cond_as_branch", default=False)


@contextlib.contextmanager
def choosing_branches() -> Iterator[None]:
    """While the body runs, `torch.cond` called in this thread runs the branch its predicate
    picks (module docstring); other threads' calls run torch's."""
    with class_patched(torch, "cond", _cond):
        token = _tracing.set(True)
        try:
            yield
        finally:
            _tracing.reset(token)


def _cond(*args: Any, **kwargs: Any) -> Any:
    if not _tracing.get():
        return _ORIGINAL(*args, **kwargs)
    call = _SIGNATURE.bind(*args, **kwargs)
    call.apply_defaults()
    pred, true_fn, false_fn, operands = call.args
    out = (true_fn if bool(pred) else false_fn)(*operands)
    given = {id(t) for t in operands if isinstance(t, torch.Tensor)}
    if isinstance(out, torch.Tensor):
        return out.clone() if id(out) in given else out
    return type(out)(o.clone() if id(o) in given else o for o in out)
