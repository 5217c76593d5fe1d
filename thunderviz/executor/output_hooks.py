"""What runs at the hook points of a jitted call's backward (autodiff/output_hooks.py): the
hooks the user registered on that output after the call, and its `retain_grad()`, on the
output's whole gradient, as eager runs them.

torch keeps a non-leaf tensor's hooks in the dict `tensor._backward_hooks`, which
`register_hook` makes on the first hook and hands to the tensor's autograd node, whose
backward runs it on the gradient the node gets: for a jitted call's output, the gradient
from outside the call only. For an output with a hook point the call makes that dict itself
(`OutputTaps`) and does not hand it to the node: `register_hook` adds to it, autograd never
runs it, and the hook point does, on the whole gradient, in order, each hook's result
replacing the gradient as in eager.

`retain_grad()` is autograd's own (C++) and cannot be kept from the node: on a backward that
gives the output a gradient from outside, autograd sets `.grad` from that part first. The
hook point then sets `.grad` to eager's value: the whole gradient after the hooks. On the
first backward through the call that is exact; on a later one (`retain_graph=True`) the
gradient kept before is what autograd left less the outside part it added, which may differ
from eager's in the last bits.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from typing import Any

import torch

__all__ = ["OUTPUT_HOOK_NAMES", "OutputTaps", "run_hook_point"]


class OutputTaps:
    """One call's outputs with hook points: their hook dicts, and the outputs themselves
    (weakly: a hook registered on an output the user dropped still runs, as in eager, since
    the dict is kept here; `.grad` is only kept for an output still alive)."""

    __slots__ = ("_hooks", "_outputs", "_outside", "_backwards")

    def __init__(self, flat_out: tuple[Any, ...], positions: tuple[int, ...]) -> None:
        self._hooks: dict[int, OrderedDict[int, Any]] = {}
        self._outputs: dict[int, weakref.ref[torch.Tensor]] = {}
        for k in positions:
            t = flat_out[k]
            if isinstance(t, torch.Tensor) and t._backward_hooks is None:
                hooks: OrderedDict[int, Any] = OrderedDict()
                t._backward_hooks = hooks  # not handed to the node: see the module docstring
                self._hooks[k] = hooks
                self._outputs[k] = weakref.ref(t)
        self._outside: tuple[Any, ...] = ()
        self._backwards = 0  # backwards through this call so far

    def begin(self, grad_outputs: tuple[Any, ...]) -> None:
        """A backward through the call starts, with these gradients from outside."""
        self._outside = grad_outputs
        self._backwards += 1

    def run(self, k: int, grad: torch.Tensor) -> torch.Tensor:
        hooks = self._hooks.get(k)
        if hooks is None:
            return grad
        for hook in tuple(hooks.values()):
            new = hook(grad)
            if new is not None:
                grad = _checked(new, grad, hook)
        t = self._outputs[k]()
        if t is not None and t.retains_grad:
            t.grad = self._kept(t, self._outside[k], grad)
        return grad

    def follow(self, recomputed: list[Any]) -> None:
        """A backward with `create_graph=True` recomputed the call (executor/double_backward.py):
        a later backward through that graph reaches the recomputed outputs, not the user's, so
        each gets the user's hooks, and then what `retain_grad()` would add to the user's
        output, as eager's second backward runs them on the output itself."""
        for k, hooks in self._hooks.items():
            again = recomputed[k]
            if not isinstance(again, torch.Tensor) or not again.requires_grad:
                continue
            for hook in tuple(hooks.values()):
                again.register_hook(hook)
            t = self._outputs[k]()
            if t is not None and t.retains_grad:
                again.register_hook(functools.partial(_add_to_grad, weakref.ref(t)))

    def _kept(self, t: torch.Tensor, outside: Any, grad: torch.Tensor) -> torch.Tensor:
        """`t.grad` as eager leaves it: what it held before this backward, plus `grad`."""
        before = t.grad
        if outside is not None:  # autograd added the outside part to what was kept before
            before = None if self._backwards == 1 else before - outside
        if before is None:
            return grad.clone(memory_format=torch.contiguous_format)
        return before + grad


def _add_to_grad(output: weakref.ref[torch.Tensor], grad: torch.Tensor) -> None:
    t = output()
    if t is not None:
        t.grad = (
            grad.clone(memory_format=torch.contiguous_format) if t.grad is None else (t.grad + grad)
        )


def _checked(new: Any, grad: torch.Tensor, hook: Any) -> torch.Tensor:
    """A hook's result, refused as eager refuses it (a value of another kind or shape)."""
    name = getattr(hook, "__name__", repr(hook))
    if not isinstance(new, torch.Tensor):
        raise TypeError(f"expected a tensor or None from hook {name}, but got {type(new)}")
    if new.shape != grad.shape or new.dtype != grad.dtype or new.device != grad.device:
        raise RuntimeError(
            f"hook '{name}' has changed the type of value: expected "
            f"{grad.dtype} {tuple(grad.shape)} on {grad.device}, got "
            f"{new.dtype} {tuple(new.shape)} on {new.device}"
        )
    return new


class _Running(threading.local):
    """The taps of the backwards running on this thread, innermost last (a hook may run
    another jitted call's backward)."""

    def __init__(self) -> None:
        self.stack: list[OutputTaps] = []


_running = _Running()


def running_stack() -> list[OutputTaps]:
    return _running.stack


def run_hook_point(k: int, grad: torch.Tensor) -> torch.Tensor:
    """`thunderviz_output_hooks(k, grad)` in a backward: the running call's taps."""
    return running_stack()[-1].run(k, grad)


# What a compiled backward with hook points binds the point's printed name to
OUTPUT_HOOK_NAMES = (("thunderviz_output_hooks", run_hook_point),)
