"""Full backward hooks of submodules (`register_full_backward_hook`,
`register_full_backward_pre_hook`) in a traced program, as eager runs them.

Eager sets them up in `nn.Module.__call__` (torch's `utils/hooks.BackwardHook`): an identity
autograd Function on the module's input tensors and one on its output tensors, with hooks on
their graph nodes. The output node's hook runs the pre-hooks on `grad_output` and keeps it;
the input node's hook, once the module's backward has made `grad_input`, runs the hooks on
both and may replace `grad_input`. Capture cannot do that: its tensors have no graph nodes.

So while capture traces, torch is not given such a module's backward hooks (their dicts are
emptied and refilled, keeping their handles valid), and two forward hooks of ours, run after
the user's own as torch's setup is, record the same pair of identity Functions: `ModuleGradOutput`
on the module's output tensors, `ModuleGradInput` on its input tensors. Their backwards do what
torch's node hooks do, in the backward trace, on every run of it (the hooks' Python side
effects included), and the debugger's backward trace shows them where they run. Between the
two, one run of a backward trace is one Python call, so the `grad_output` a call site keeps
is this run's (per thread). What torch wraps, this wraps: positional tensor arguments, and a
tensor or a tuple's tensors returned (a module returning a dict never fires its hook, in eager
either), and only where one of them requires grad under grad mode.

A module's `register_backward_hook` (the non-full form torch deprecated) and the global
backward hooks stay torch's, which capture cannot run: `jit` refuses them
(executor/hooks.py).
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["ModuleGradInput", "ModuleGradOutput", "backward_hooks_traced"]


def _has_backward_hooks(module: torch.nn.Module) -> bool:
    return bool(module._backward_hooks or module._backward_pre_hooks)


class _Site:
    """One call of a hooked module in the trace: its hooks, where its tensors were among its
    arguments and outputs, and the `grad_output` the running backward kept for it."""

    def __init__(self, module: torch.nn.Module, hooks: list[Any], pre_hooks: list[Any]) -> None:
        self.module = module
        self.hooks, self.pre_hooks = hooks, pre_hooks
        self.n_inputs = 0
        self.input_index: list[int] | None = None  # None: no input needed a gradient
        self.n_outputs = 0
        self.output_index: list[int] | None = None
        self.input_needs: list[bool] = []  # per input / output tensor, when traced
        self.output_needs: list[bool] = []
        self._kept = threading.local()

    def __repr__(self) -> str:
        return f"<backward hooks of {type(self.module).__name__}>"

    @property
    def grad_outputs(self) -> tuple[Any, ...] | None:
        return getattr(self._kept, "grad_outputs", None)

    @grad_outputs.setter
    def grad_outputs(self, value: tuple[Any, ...] | None) -> None:
        self._kept.grad_outputs = value

    def packed(self, index: list[int], values: Any, size: int) -> tuple[Any, ...]:
        """The values at their places among `size` (None at the non-tensors')."""
        out: list[Any] = [None] * size
        for i, value in zip(index, values, strict=True):
            out[i] = value
        return tuple(out)

    def on_grad_outputs(self, grads: tuple[Any, ...]) -> tuple[Any, ...]:
        """What torch's output-node hook does: the pre-hooks, then keep `grad_output` (or,
        where no input needed a gradient, call the hooks now, with None for `grad_input`)."""
        assert self.output_index is not None
        grad_outputs = _in_turn(
            self.pre_hooks,
            self.packed(self.output_index, grads, self.n_outputs),
            lambda hook, values: hook(self.module, values),
            "pre hook returned an invalid number of grad_output",
        )
        self.grad_outputs = grad_outputs
        if self.input_index is None:
            warnings.warn(
                "Full backward hook is firing when gradients are computed with respect to "
                "module outputs since no inputs require gradients.",
                stacklevel=2,
            )
            grad_inputs = (None,) * self.n_inputs
            for hook in self.hooks:
                got = hook(self.module, grad_inputs, grad_outputs)
                if got is not None and not all(g is None for g in got):
                    raise RuntimeError(
                        "Backward hook for Modules where no input requires gradient should "
                        "always return None or None for all gradients."
                    )
            self.grad_outputs = None
        return tuple(grad_outputs[i] for i in self.output_index)

    def on_grad_inputs(self, grads: tuple[Any, ...]) -> tuple[Any, ...]:
        """What torch's input-node hook does: the hooks on (`grad_input`, `grad_output`)."""
        grad_outputs = self.grad_outputs
        if grad_outputs is None:  # reached without passing the outputs (double backward)
            return grads
        assert self.input_index is not None
        grad_inputs = _in_turn(
            self.hooks,
            self.packed(self.input_index, grads, self.n_inputs),
            lambda hook, values: hook(self.module, values, grad_outputs),
            "hook returned an invalid number of grad_input",
        )
        self.grad_outputs = None
        return tuple(grad_inputs[i] for i in self.input_index)


def _in_turn(hooks: list[Any], values: tuple[Any, ...], call: Any, wrong: str) -> tuple[Any, ...]:
    """Each hook in turn on what the one before returned (None: unchanged), as torch runs
    them; a replacement of another length raises torch's error."""
    for hook in hooks:
        got = call(hook, values)
        if got is None:
            continue
        if len(got) != len(values):
            raise RuntimeError(f"Backward {wrong}, got {len(got)}, but expected {len(values)}")
        values = got
    return values


def _identity(ctx: Any, site: _Site, needs: list[bool], tensors: Any) -> tuple[Any, ...]:
    """torch's `BackwardHookFunction`: the tensors as they are, those that need no gradient
    marked so (their needs as capture saw them, kept on the site: a run's tensors are the
    trace's, which need none)."""
    ctx.site = site
    ctx.like = [(t.shape, t.dtype, t.device) for t in tensors]
    ctx.set_materialize_grads(False)  # (what came as None is told apart from zeros)
    out = tuple(t.view_as(t) for t in tensors)
    ctx.mark_non_differentiable(*(o for o, need in zip(out, needs, strict=True) if not need))
    return out


def _zeros(like: tuple[Any, ...]) -> torch.Tensor:
    shape, dtype, device = like
    return torch.zeros(shape, dtype=dtype, device=device)


class ModuleGradOutput(torch.autograd.Function):
    """The identity on a hooked module's output tensors; its backward is the pre-hooks'.
    An output the loss does not reach shows its hooks None, and hands no gradient on, as in
    eager (`passes_absence`: the grad rule keeps it absent; the zeros returned there are
    never read)."""

    passes_absence = True

    @staticmethod
    def forward(ctx: Any, site: _Site, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _identity(ctx, site, site.output_needs, tensors)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        got = ctx.site.on_grad_outputs(grads)
        return (None, *(_zeros(like) if g is None else g for g, like in zip(got, ctx.like)))


class ModuleGradInput(torch.autograd.Function):
    """The identity on a hooked module's input tensors; its backward is the hooks'. Eager's
    hooks see zeros for an input that needs no gradient or got none from the module."""

    @staticmethod
    def forward(ctx: Any, site: _Site, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return _identity(ctx, site, site.input_needs, tensors)

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> tuple[Any, ...]:
        shown = tuple(_zeros(like) if g is None else g for g, like in zip(grads, ctx.like))
        got = ctx.site.on_grad_inputs(shown)
        return (None, *(g if need else None for g, need in zip(got, ctx.site.input_needs)))


def _through(
    function: Any, site: _Site, values: tuple[Any, ...], needs: list[bool]
) -> tuple[tuple[Any, ...], Any]:
    """`values` with its tensors read through `function` (as torch's `_apply_on_tensors`), and
    their places; (values, None) where none needs a gradient or grad mode is off. `needs` is
    filled with whether each tensor needs a gradient."""
    index = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    tensors = [values[i] for i in index]
    needs[:] = [t.requires_grad for t in tensors]
    if not (torch.is_grad_enabled() and any(needs)):
        return values, None
    made = function.apply(site, *tensors)
    out = list(values)
    for i, t in zip(index, made, strict=True):
        out[i] = t
    return tuple(out), index


@contextlib.contextmanager
def backward_hooks_traced(root: torch.nn.Module | None, with_root: bool = True) -> Iterator[None]:
    """While capture traces `root` (with its own hooks, or only its forward): its modules'
    full backward hooks recorded as the identity Functions above, instead of torch's setup
    (see the module docstring). A module with a non-full hook is left to torch."""
    modules = [] if root is None else list(root.modules())[0 if with_root else 1 :]
    hooked = [
        m for m in modules if _has_backward_hooks(m) and m._is_full_backward_hook is not False
    ]
    if not hooked:
        yield
        return
    held: list[tuple[Any, dict[Any, Any]]] = []
    handles = []
    try:
        for module in hooked:
            full, _ = module._get_backward_hooks()
            pre_hooks = module._get_backward_pre_hooks()
            for table in (module._backward_hooks, module._backward_pre_hooks):
                held.append((table, dict(table)))
                table.clear()
            handles += _install(module, full, pre_hooks)
        yield
    finally:
        for handle in handles:
            handle.remove()
        for table, items in held:
            table.clear()
            table.update(items)


def _install(module: torch.nn.Module, hooks: list[Any], pre_hooks: list[Any]) -> list[Any]:
    """Forward hooks of the module's own, run after the user's (as torch sets its backward
    hooks up after the forward pre-hooks, and its outputs' after the forward hooks)."""
    calls: list[_Site] = []  # one per call in progress (a module may call itself)

    def before(mod: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        site = _Site(mod, hooks, pre_hooks)
        calls.append(site)
        new, site.input_index = _through(ModuleGradInput, site, args, site.input_needs)
        site.n_inputs = len(args)
        return new

    def after(mod: torch.nn.Module, args: Any, out: Any) -> Any:
        site = calls.pop()
        single = not isinstance(out, tuple)
        values = (out,) if single else out
        new, site.output_index = _through(ModuleGradOutput, site, values, site.output_needs)
        site.n_outputs = len(values)
        if site.output_index is None:
            return None
        return new[0] if single else (new if type(out) is tuple else type(out)(*new))

    return [module.register_forward_pre_hook(before), module.register_forward_hook(after)]
