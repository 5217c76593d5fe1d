"""What a program may not do inside a traced call to the tensors it was given (its inputs,
the parameters and buffers of its modules, tensors it reads from outside): read or set their
`.grad`, set their `.data`, turn their `requires_grad` off, register a hook that outlives
the call on them (a gradient hook on a parameter, a post-accumulate hook on any).

Capture runs the program on copies of those tensors. A copy's `.grad` is None, so a program
that read a parameter's gradient (`clip_grad_norm_`, `if p.grad is not None:`, an
optimizer's `zero_grad` or `step`) saw None where eager sees the user's gradient, and the
trace held that run: no clipping, the other branch, silently. A write to a copy's `.grad`,
`.data` or `requires_grad` stayed on the copy: the user's gradient was not cleared, the
parameter not replaced (the next call computed with the old one), not frozen. Each is
refused here, naming the line and the way out. A tensor the program makes is its own: its
`.grad` and `.data` are left to it.

Taking them as a trace's values instead would need `.grad` as inputs of the trace, a guard
on which of them are None (a training loop's second call has gradients its first had not),
and the writes as effects after each run; inside a traced call these are rare next to the
same steps taken around it, so the refusal stands for now. (A copy's `_version` counts none
of the user's writes before the call either; it is left as it reads, for torch reads it in
its own code, DDP's forward among them.)
"""

from __future__ import annotations

from typing import Any

import torch

from thunderviz.capture.errors import CaptureError
from thunderviz.capture.source import user_source
from thunderviz.core.locations import where

__all__ = ["looks_at", "refuse_given_state", "refused"]

_BASE = torch._C.TensorBase.__dict__
GRAD, DATA, REQUIRES_GRAD = _BASE["grad"], _BASE["data"], _BASE["requires_grad"]
_ACCESS = {"__get__": "reads", "__set__": "sets", "__delete__": "deletes"}
# why a trace cannot hold it, and the way out
_REASONS = {
    "grad": (
        "a trace runs the program on copies of such tensors, whose .grad is None, so it would "
        "hold that answer (no clipping, the other branch) and keep no write to the user's",
        "Read, clip or clear gradients outside the traced call (`clip_grad_norm_`, "
        "`optimizer.zero_grad()` and `optimizer.step()` around it), or pass the gradient in "
        "as an argument",
    ),
    "data": (
        "a trace runs the program on copies of such tensors and keeps no such write: the "
        "user's tensor would stay as it was, and the next call compute with it",
        "Update it in place instead (`with torch.no_grad(): p.copy_(new)`, which the trace "
        "carries to the user's tensor), or replace it outside the traced call",
    ),
    "requires_grad": (
        "a trace runs the program on copies of such tensors and keeps no such write: the "
        "user's tensor would still require grad",
        "Freeze it outside the traced call, before it",
    ),
    "register_hook": (
        "in eager the hook stays on the user's tensor after the call (one more on every "
        "call, each seeing every later backward), where a trace's hook lives in its call",
        "Register it once, outside the traced call",
    ),
    "register_post_accumulate_grad_hook": (
        "in eager the hook stays on the user's tensor after the call, where a trace runs "
        "on a copy and keeps no hook on it",
        "Register it once, outside the traced call",
    ),
}


_HOOKS = (torch.Tensor.register_hook, torch.Tensor.register_post_accumulate_grad_hook)


def looks_at(func: Any) -> bool:
    """Whether `refuse_given_state` has anything to say about a call of `func` (by identity:
    an `in` would compare a tensor bound to `func` with `==`)."""
    owner = getattr(func, "__self__", None)
    return (
        owner is GRAD
        or owner is DATA
        or owner is REQUIRES_GRAD
        or func is _REQUIRES_GRAD_
        or func in _HOOKS
    )


_REQUIRES_GRAD_ = torch.Tensor.requires_grad_


def refuse_given_state(recorder: Any, func: Any, args: tuple[Any, ...], kwargs: Any) -> None:
    """Raise where `func` (one `looks_at`) does to a tensor the program was given what the
    module docstring says; return otherwise."""
    tensor, *rest = args
    proxy = recorder._proxies.get(id(tensor))
    descriptor = getattr(func, "__self__", None)
    access = _ACCESS.get(getattr(func, "__name__", ""), "sets")
    if descriptor is GRAD:
        attribute = "grad"
    elif descriptor is DATA and access != "reads":
        attribute = "data"
    elif func in _HOOKS:
        hook_on_state = proxy is not None and proxy.name in recorder.state_names
        if func is _HOOKS[0] and not hook_on_state:
            return  # on a value or an argument: the trace's own hook (capture/tensor_hooks.py)
        attribute = func.__name__
    elif descriptor is REQUIRES_GRAD or func is _REQUIRES_GRAD_:
        flag = rest[0] if rest else kwargs.get("requires_grad", True)
        if access == "reads" or flag:
            return  # (reads: grad_flags.py; turning a flag on: grad_flags.made_a_leaf)
        attribute = "requires_grad"
    else:
        return
    if proxy is not None and not (
        proxy.name in recorder.input_names or proxy.name in recorder.constants
    ):
        return  # made by the program: its own
    if attribute == "requires_grad" and not (
        getattr(proxy, "requires_grad", False) or tensor.requires_grad
    ):
        return  # off where it is off (the proxy's flag, or an outside tensor's own): no change
    what = (
        f"{proxy.name}, a tensor the traced program was given"
        if proxy is not None
        else "a tensor the traced program reads from outside"
    )
    why, way_out = _REASONS[attribute]
    doing = "registers a hook on" if func in _HOOKS else f"{access} the {attribute} of"
    raise refused(recorder, attribute, f"{doing} {what}: {why}. {way_out}.")


def refused(recorder: Any, name: str, says: str) -> CaptureError:
    """The refusal of `Tensor.<name>` at the user's line: "Tensor.<name> at <line> <says>"."""
    source = user_source(skip=3)
    return CaptureError(
        f"Tensor.{name} at {where(source, recorder.module_path)} {says}",
        op=f"torch.Tensor.{name}",
        source=source,
        module_path=recorder.module_path,
    )
