"""`.grad` of a tensor from outside the traced program, read or set inside it.

Capture runs the program on copies of the tensors it is given, whose `.grad` is None. A
program that read a parameter's gradient inside the traced call (`clip_grad_norm_`,
`if p.grad is not None:`, an optimizer's `zero_grad` or `step`) saw None where eager sees the
user's gradient, and the trace held that run: no clipping, the other branch, silently;
`p.grad = None` set the copy's, and the user's gradient stayed. Both are refused here,
naming the line and the way out, for the tensors the program did not make (its inputs,
the parameters and buffers of its modules, tensors it reads from outside). A tensor the
program makes has no gradient but what the program gives it, so its `.grad` is left alone.

Taking them as a trace's values instead would need `.grad` as inputs of the trace, a guard
on which of them are None (a training loop's second call has gradients its first had not),
and their writes as effects after each run; the reads inside a program are rare enough
next to the gradients taken outside it that this refusal stands for now.
"""

from __future__ import annotations

from typing import Any

import torch

from thunderviz.capture.errors import CaptureError
from thunderviz.capture.source import user_source
from thunderviz.core.locations import where

__all__ = ["GRAD", "refuse_outside_grad"]

GRAD = torch._C.TensorBase.__dict__["grad"]
_ACCESS = {"__get__": "reads", "__set__": "sets", "__delete__": "deletes"}


def refuse_outside_grad(recorder: Any, func: Any, tensor: Any) -> None:
    """Raise if `func` (`.grad`'s getter, setter or deleter) touches the `.grad` of a tensor
    the program did not make; return if it did."""
    proxy = recorder._proxies.get(id(tensor))
    if proxy is not None and proxy.name not in recorder.input_names:
        return  # made by the program: its copy's `.grad` is the program's own
    what = (
        f"{proxy.name}, a tensor the traced program was given"
        if proxy is not None
        else "a tensor the traced program reads from outside"
    )
    access = _ACCESS.get(getattr(func, "__name__", ""), "touches")
    source = user_source(skip=3)
    raise CaptureError(
        f"Tensor.grad at {where(source, recorder.module_path)} {access} the gradient of "
        f"{what}: a trace runs the program on copies whose .grad is None, so it would hold "
        "that answer (no clipping, the other branch) and keep no write to the user's .grad. "
        "Read, clip or clear gradients outside the "
        "traced call (`clip_grad_norm_`, `optimizer.zero_grad()` and `optimizer.step()` "
        "around it), or pass the gradient in as an argument.",
        op="torch.Tensor.grad",
        source=source,
        module_path=recorder.module_path,
    )
