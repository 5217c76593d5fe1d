"""`t.register_hook(fn)` inside a traced program.

In eager, the hook sees the gradient of `t` (summed over all its uses) and may replace it, in
the backward. Capture records the call as a custom autograd Function, `TensorHook`, applied to
`t`: the identity forward, a backward that hands the gradient to the hook (to each hook
registered on `t`, in order, as eager runs them). The program's later reads of `t` read the
Function's output, so every use's gradient reaches the hook, which runs in the backward of
every jitted call, as eager's does (its Python side effects included), and the debugger's
backward trace shows it where it runs.

A hook registered after the tensor was already used is refused: those earlier uses' gradients
would not pass through it, and eager's hook sees them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from thunderviz.capture.errors import CaptureError
from thunderviz.capture.function_apply import read_through, traced_tensors_held
from thunderviz.capture.source import user_source
from thunderviz.core.locations import where
from thunderviz.core.proxies import proxies_in

__all__ = ["TensorHook", "record_tensor_hook"]


class _Hook:
    """The user's hook, and whether its handle removed it."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor | None]) -> None:
        self.fn = fn
        self.removed = False


class _Hooks:
    """The hooks registered on one tensor, run one after another in the order they were
    registered, each on what the one before returned, as eager runs them."""

    def __init__(self) -> None:
        self.hooks: list[_Hook] = []

    def run(self, grad: torch.Tensor) -> torch.Tensor:
        for hook in self.hooks:
            if not hook.removed:
                new = hook.fn(grad)
                grad = grad if new is None else new
        return grad


class _Handle:
    """What `register_hook` returns: `remove()` before the backward stops the hook, as in
    eager (the removal is part of the traced program, so every run of the trace has it)."""

    def __init__(self, hook: _Hook) -> None:
        self._hook = hook

    def remove(self) -> None:
        self._hook.removed = True

    def __enter__(self) -> _Handle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.remove()


class TensorHook(torch.autograd.Function):
    """The identity; its backward is the hook's: the gradient it returns, or the one it got."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, hooks: _Hooks) -> torch.Tensor:
        ctx.hooks = hooks
        return x.view_as(x)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        (grad,) = grad_outputs
        return ctx.hooks.run(grad), None

    @staticmethod
    def rejoined(ctx: Any, run_args: tuple[Any, ...], out: torch.Tensor) -> torch.Tensor:
        """In a recompute that keeps autograd's graph (capture/function_graph.py): the hook
        goes on the tensor itself, as eager's is, so every gradient that reaches it in a
        later backward passes the hook, those through the reads of it the op that made it
        saved for its own backward too (tanh's backward reads its output); the output is
        the tensor, viewed."""
        x = run_args[0]
        x.register_hook(ctx.hooks.run)
        return x.view_as(x)


def record_tensor_hook(recorder: Any, tensor: torch.Tensor, fn: Any) -> _Handle:
    """`tensor.register_hook(fn)` while `recorder` traces: the program reads `tensor` through
    a `TensorHook` from here on."""
    proxy = recorder.proxy_of(tensor)
    _refuse_held_values(recorder, fn)
    hook = _Hook(fn)
    hooks = recorder.tensor_hooks.get(proxy.name)
    if hooks is not None:  # read through a TensorHook already: one more hook of it, run after
        hooks.hooks.append(hook)
        return _Handle(hook)
    used = any(
        p.name == proxy.name
        for frame in recorder._frames
        for b in frame.bsyms
        for p in proxies_in((b.args, b.kwargs), [])
    )
    if used:
        source = user_source(skip=2)
        raise CaptureError(
            f"Tensor.register_hook at {where(source, recorder.module_path)} is registered "
            f"on {proxy.name} after the program already used it: eager's hook sees the "
            "gradient of those earlier uses too, which a trace cannot route through it. "
            "Register the hook right where the tensor is made, before its first use.",
            op="torch.Tensor.register_hook",
            source=source,
            module_path=recorder.module_path,
        )
    hooks = _Hooks()
    hooks.hooks.append(hook)
    read_through(recorder, tensor, TensorHook, hooks)
    recorder.tensor_hooks[recorder.proxy_of(tensor).name] = hooks
    return _Handle(hook)


def _refuse_held_values(recorder: Any, fn: Any) -> None:
    """A hook holding a tensor of the traced call (`lambda g: g * h`, `g * self.w`, `g *
    scale` for an argument: in a closure, a default or a partial) would read, in every later
    run of the trace, that tensor as the traced call had it: the hook object is the traced
    call's. Refused, where eager's hook reads each call's (a tensor from outside the
    program, captured as a constant, is the same tensor in every run, and is not)."""
    held = [recorder.proxy_of(t).name for t in traced_tensors_held(recorder, (fn,))]
    if held:
        source = user_source(skip=3)
        raise CaptureError(
            f"Tensor.register_hook at {where(source, recorder.module_path)}: the hook holds "
            f"a tensor of this call ({', '.join(held)} in the trace), and every "
            "later run of the trace would hand it the traced call's value. Take the tensor "
            "as an argument of a torch.autograd.Function whose backward does what the hook "
            "does (its arguments are each call's), or register the hook outside the traced "
            "call.",
            op="torch.Tensor.register_hook",
            source=source,
            module_path=recorder.module_path,
        )
