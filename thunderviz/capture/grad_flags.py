"""`x.requires_grad` read inside a torch function's own Python body.

The tensors capture runs on never require grad (autograd records nothing while a trace
runs); the recorder answers the program's own `x.requires_grad` reads from the proxies
(`Recorder._read_property`). But inside the body of a torch function the program called,
the recorder's mode is off the stack, and the body reads the tensors' own flags: always
False. Where a body branches on them it takes another path than eager's:
`F.linear_cross_entropy` (torch 2.13) decides there whether its chunked kernel computes
the input's and the weight's gradients, and the trace got none.

So while a torch function whose code reads `requires_grad` runs, a mode answers those reads
as the recorder does, in its body and in the torch functions it calls; every other call runs
as it is. Only such functions get the mode: it costs a Python call per torch call inside.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import BsymTag

__all__ = ["REQUIRES_GRAD", "REQUIRES_GRAD_SETTERS", "answering_grad_flags", "made_a_leaf"]

REQUIRES_GRAD = torch._C.TensorBase.__dict__["requires_grad"]
# Runs a torch function's body past the torch-function hop that led to a mode's handler
# (torch 2.13 and later; before, a body cannot be run with the mode on: its reads stay the
# tensors' own, and `answering_grad_flags` does nothing)
_SKIP_ONE_HOP = getattr(torch._C, "_skip_one_hop_torch_function", None)


def answering_grad_flags(recorder: Any, func: Callable[..., Any]) -> Any:
    """A context in which `func`'s body reads `requires_grad` as the program would."""
    code = getattr(func, "__code__", None)
    if _SKIP_ONE_HOP is None or code is None or "requires_grad" not in code.co_names:
        return contextlib.nullcontext()
    return _GradFlags(recorder)


def flag_of(recorder: Any, t: Any) -> bool | None:
    """What the program would read as `t.requires_grad`, if the recorder knows `t`."""
    proxy = recorder._proxies.get(id(t))
    return proxy.requires_grad if isinstance(proxy, TensorProxy) else None


class _GradFlags(TorchFunctionMode):
    def __init__(self, recorder: Any) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        if getattr(func, "__self__", None) is REQUIRES_GRAD and args:
            flag = flag_of(self.recorder, args[0])
            if flag is not None:
                return flag
        if getattr(func, "__code__", None) is None:  # C++ (an op, a method): reads no flag
            return func(*args, **(kwargs or {}))
        skip_one_hop = _SKIP_ONE_HOP
        assert skip_one_hop is not None  # (the mode is only made where torch has it)
        with self:  # on again for a Python body: the call skips the hop that led here
            return skip_one_hop(func, types, args, kwargs or {})


REQUIRES_GRAD_SETTERS = (torch.Tensor.requires_grad_, REQUIRES_GRAD.__set__)


def made_a_leaf(recorder: Any, t: torch.Tensor, flag: bool) -> torch.Tensor:
    """`t.requires_grad_()` (or `t.requires_grad = True`) in the program: from here on the
    program reads `t` as a new leaf that requires grad, which a `torch.autograd.grad` inside
    it can differentiate as to (`mix.requires_grad_()` in a WGAN-GP penalty). The trace
    names it anew (an `alias` recorded without gradient: as in eager, nothing flows back
    through it, for `t` required none). Turning a flag off, or on where it is on, changes
    nothing the trace holds. Where `t` is one of the program's inputs, the trace says so
    (`inputs_made_leaves`), and `jit` does to the user's tensor what eager does."""
    proxy = recorder.proxy_of(t)
    if not flag or not isinstance(proxy, TensorProxy) or proxy.requires_grad:
        return t
    if not (t.dtype.is_floating_point or t.dtype.is_complex):
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    leaf = recorder._new_proxy(t, requires_grad=True)  # (the one maker of a value's proxy)
    bsym = recorder._bsym(torch.ops.aten.alias.default, (proxy,), {}, leaf)
    bsym.tags.add(BsymTag.NO_GRAD)
    bsym.header = "requires_grad_(): a new leaf of autograd's graph"
    recorder.made_leaves.append(proxy.name)
    recorder._append(bsym)
    return t
