"""The grad rule of a user's `torch.autograd.Function` call: the user's own backward.

The forward trace holds `t5 = ScaleGrad.apply(t4, 0.5)` (see capture/custom_function.py).
Differentiated, it becomes

    augmented forward:  (t5, ctx0) = ScaleGrad.forward_with_ctx((True, False), t4, 0.5)
    backward:           (t9,) = ScaleGrad.backward(ctx0, ct_t5)

so the values are the user's forward's (bit for bit eager's) and the gradients are whatever
the user's backward returns, wrong ones included: it is never replaced by differentiating the
forward. As in eager, a call none of whose arguments needs a gradient has no backward (a
reentrant checkpoint's parameters then get none), and only top-level tensor arguments are
inputs (`needs_input_grad`).
"""

from __future__ import annotations

from typing import Any

from torch.utils import _pytree as pytree

from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import get_grad, output_has_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.capture.custom_function import (
    APPLY_ID,
    AutogradFunctionCall,
    ObjectProxy,
    apply_symbol,
    backward_symbol,
    forward_symbol,
    has_backward,
)
from thunderviz.core.context import building
from thunderviz.core.locations import where
from thunderviz.core.proxies import Proxy, TensorProxy

RULES = RuleSet("custom_function", supports_complex=True)  # the user's backward


def _fresh_like(p: Any) -> Any:
    """A new proxy with `p`'s metadata, named in the trace being built."""
    if isinstance(p, TensorProxy):
        return TensorProxy(building().names.fresh(), p.shape, p.dtype, p.device)
    return p


def _like(protos: Any, extra: Any = ()) -> Any:
    def meta(args: Any, kwargs: Any) -> Any:
        out = pytree.tree_map(_fresh_like, protos)
        if extra:
            return (out, *extra()), None
        return out, None

    return meta


@RULES.grad(APPLY_ID)
def _autograd_function(
    call: ObjectProxy,
    *args: Any,
    reads: tuple[Any, ...] = (),
    held: tuple[Any, ...] = (),
    **kwargs: Any,
) -> Any:
    fn: AutogradFunctionCall = call.value
    needs = tuple(requires_grad(a) for a in args)
    given = {**({"reads": reads} if reads else {}), **({"held": held} if held else {})}
    if not any(needs):  # eager's apply records no backward when no input needs a gradient
        return apply_symbol(_like(fn.outputs))(call, *args, **given, **kwargs)
    if not has_backward(fn.cls):
        at = building().origin
        raise AutodiffError(
            f"thunderviz cannot differentiate {fn.cls.__qualname__}.apply at "
            f"{where(fn.source or at.source, fn.module_path or at.module_path)}: the "
            "autograd.Function defines no backward (or vjp), so reverse-mode autodiff, eager's "
            "included, has no gradient for it. Give it a backward staticmethod, or call it "
            "under torch.no_grad() / on detached tensors if it needs no gradient."
        )

    def ctx_proxy() -> tuple[Proxy]:
        return (Proxy(building().names.fresh("ctx")),)

    held_needs = tuple(requires_grad(h) for h in held)
    if held:
        kwargs = {**kwargs, "held": held, **({"held_needs": held_needs} if any(held_needs) else {})}
    out, ctx = forward_symbol(_like(fn.outputs, ctx_proxy))(call, needs, *args, **kwargs)
    # the forward's ops, as traced, beneath the call in the augmented forward too (for viewing;
    # they name the call's outputs as the forward trace does, which the sweep gives it)
    building().bound_symbols[-1].subsymbols = list(fn.traced_ops)
    outs = out if isinstance(out, tuple) else (out,)
    # None where no cotangent flows: the user's ctx decides, as in eager, whether its
    # backward sees zeros there (materialize_grads, the default) or None. A tensor the forward
    # returns twice (`return y, y`) is one output to autograd, at its last place: the others
    # get none, as in eager (each had the whole gradient, which the backward then doubled)
    traced = fn.outputs if isinstance(fn.outputs, (tuple, list)) else (fn.outputs,)
    last = {p.name: i for i, p in enumerate(traced) if isinstance(p, TensorProxy)}
    repeated = {i for i, p in enumerate(traced) if isinstance(p, TensorProxy) and last[p.name] != i}
    cotangents = [
        get_grad(o, none_if_absent=True)
        if isinstance(o, TensorProxy) and i not in repeated
        else None
        for i, o in enumerate(outs)
    ]
    inputs = [a for a, need in zip(args, needs, strict=True) if need]
    leaves = tuple(r for r in reads if requires_grad(r))
    # what it reads that is not differentiated here (a tensor the program captured, the
    # user's, which may require grad): a reentrant backward would accumulate into its .grad
    kept = tuple(r for r in reads if not requires_grad(r))
    accumulated = {
        **({"accumulated": leaves} if leaves else {}),
        **({"kept": kept} if kept else {}),
    }
    targets = (*inputs, *leaves, *(h for h, need in zip(held, held_needs, strict=True) if need))
    grads = backward_symbol(_like(targets))(call, ctx, *cotangents, **accumulated)
    # an identity that hands no gradient on where none came (a module's backward-hook
    # point, capture/module_backward_hooks.py): what it returns there is no gradient
    reached = set(targets)
    if getattr(fn.cls, "passes_absence", False):
        tensors_in = [a for a in args if isinstance(a, TensorProxy)]  # the i-th comes out i-th
        reached = {x for i, x in enumerate(tensors_in) if output_has_grad(i)}
    for x, g in zip(targets, grads, strict=True):
        if x in reached:
            put_grad(x, g)
    return out
