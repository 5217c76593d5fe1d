"""The independent reference: the same program's gradients from torch.autograd.

Nothing here uses thunderviz's traces or grad rules: the function or module runs eagerly on
copies of its inputs and parameters, and `torch.autograd.grad` differentiates it. The user's
tensors, parameters (and their `.grad`), buffers and random number generators are left as
they were.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import torch
from torch.nn.utils.stateless import _reparametrize_module
from torch.utils import _pytree as pytree

from thunderviz.core.dataclass_nodes import opened
from thunderviz.core.inputs import input_values
from thunderviz.core.module_state import own_tensors_kept
from thunderviz.core.rng import generators_of, preserved_rng
from thunderviz.core.trace import Trace

__all__ = ["autograd_grads", "trace_arg_values", "GradComparison", "compare_grad"]


def trace_arg_values(
    forward: Trace, fn: Any, args: Sequence[Any], kwargs: dict[str, Any] | None = None
) -> list[Any]:
    """The values of `forward`'s arguments (`forward.flat_args`) for `fn(*args, **kwargs)`."""
    return input_values(forward.inputs, fn, args, kwargs)


def _copy(x: Any) -> Any:
    if not isinstance(x, torch.Tensor):
        return x
    c = x.detach().clone()
    if x.requires_grad and (c.is_floating_point() or c.is_complex()):
        c.requires_grad_(True)
    return c


def autograd_grads(
    forward: Trace,
    fn: Any,
    args: Sequence[Any] = (),
    kwargs: dict[str, Any] | None = None,
    *,
    cotangents: Sequence[torch.Tensor] | None = None,
) -> dict[str, torch.Tensor | None]:
    """d(output)/d(each argument of `forward`, the trace of `fn(*args, **kwargs)`) by
    torch.autograd, keyed by the argument's name.

    Arguments that require grad are differentiated: float inputs passed with
    `requires_grad=True`, and the parameters that require grad. `cotangents`: one per output
    tensor that requires grad, or one per place in the output such a tensor is returned at
    (autograd sums a tensor's); by default ones for scalar outputs. None where autograd
    finds no path.
    """
    kwargs = kwargs or {}
    module = fn if isinstance(fn, torch.nn.Module) else None
    run_args = [pytree.tree_map(_copy, opened(a)) for a in args]
    run_kwargs = {k: pytree.tree_map(_copy, opened(v)) for k, v in kwargs.items()}
    state: dict[str, torch.Tensor] = {}
    if module is not None:
        state.update({n: _copy(p) for n, p in module.named_parameters()})
        state.update({n: b.detach().clone() for n, b in module.named_buffers()})
    values = input_values(forward.inputs, state, run_args, run_kwargs)
    keys = [p.name for p in forward.flat_args]

    # The user's RNG is left as it was (the run draws from it as eager would, then it is
    # restored), and buffers the program updates in place are the copies in `state`. The
    # copies stay in the module through the backward too: a reentrant checkpoint runs its
    # part of the forward again there.
    with (
        preserved_rng(generators_of(forward.constants)),
        torch.enable_grad(),
        _on_copies(module, state),
    ):
        out = fn(*run_args, **run_kwargs)
        # every place a tensor that requires grad is returned at; `return y, y` is two
        places = [
            o
            for o in pytree.tree_leaves(opened(out))  # (a dataclass's fields too)
            if isinstance(o, torch.Tensor) and o.requires_grad
        ]
        outs = list({id(o): o for o in places}.values())  # each tensor once
        wrt = [
            (i, v) for i, v in enumerate(values) if isinstance(v, torch.Tensor) and v.requires_grad
        ]
        result: dict[str, torch.Tensor | None] = dict.fromkeys(keys)
        if not outs or not wrt:
            return result
        if cotangents is None:
            if any(o.numel() != 1 for o in outs):
                raise ValueError("the program has non-scalar outputs: pass cotangents")
            cts = [torch.ones_like(o) for o in outs]
        else:
            cts = list(cotangents)
            if len(cts) == len(places):  # one per place: autograd sums a repeated tensor's
                outs = places
            elif len(cts) != len(outs):
                raise ValueError(
                    f"{len(cts)} cotangents for {len(outs)} output tensors that require grad "
                    f"({len(places)} places in the output)"
                )
        grads = _differentiated(outs, [v for _, v in wrt], cts, forward.constants)
    for (i, _), g in zip(wrt, grads, strict=True):
        result[keys[i]] = g
    return result


@contextlib.contextmanager
def _on_copies(module: torch.nn.Module | None, state: dict[str, torch.Tensor]) -> Iterator[None]:
    """`module` holding `state` (its parameters and buffers, copied) instead of its own."""
    if module is None:
        yield
        return
    # (core/module_state.py: a block at two paths)
    with (
        own_tensors_kept(module),
        _reparametrize_module(module, state, tie_weights=True, strict=False),
    ):
        yield


def _differentiated(
    outs: list[torch.Tensor],
    leaves: list[torch.Tensor],
    cotangents: list[torch.Tensor],
    captured: dict[str, Any],
) -> tuple[torch.Tensor | None, ...]:
    """torch.autograd's gradients of `outs` as to `leaves` (fresh copies, leaves of the
    graph). A program with a reentrant checkpoint refuses `autograd.grad`; there the
    gradients are `backward()`'s, which accumulates into every leaf it reaches: the tensors
    the program captured (`captured`, the user's) keep the `.grad` they had."""
    try:  # (the graph is kept for backward(), should a reentrant checkpoint refuse midway)
        return torch.autograd.grad(outs, leaves, cotangents, allow_unused=True, retain_graph=True)
    except RuntimeError as e:
        if "use_reentrant=True" not in str(e):
            raise
    users = [t for t in captured.values() if isinstance(t, torch.Tensor) and t.requires_grad]
    kept = [(t, t.grad, None if t.grad is None else t.grad.clone()) for t in users]
    try:
        torch.autograd.backward(outs, cotangents)
        return tuple(leaf.grad for leaf in leaves)
    finally:
        for t, grad, value in kept:
            if grad is not None and value is not None:
                grad.copy_(value)  # (accumulated into in place)
            t.grad = grad


class GradComparison(NamedTuple):
    name: str
    max_abs_diff: float
    allclose: bool


# Tolerances per dtype for comparing with autograd (torch.testing's defaults).
_TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}


def compare_grad(
    name: str, ours: Any, ref: Any, rtol: float | None = None, atol: float | None = None
) -> GradComparison:
    """One gradient against autograd's; None and all zeros count as the same "no gradient".
    Sparse gradients (`Embedding(sparse=True)`) are compared by their dense values."""
    ours, ref = (
        x.to_dense() if isinstance(x, torch.Tensor) and x.layout != torch.strided else x
        for x in (ours, ref)
    )

    def nothing(x: Any) -> bool:
        return x is None or (
            isinstance(x, torch.Tensor) and x.numel() > 0 and not torch.any(x != 0)
        )

    if ours is None or ref is None:
        if nothing(ours) and nothing(ref):
            return GradComparison(name, 0.0, True)
        other = ours if ours is not None else ref
        assert other is not None  # both None is "nothing" on both sides, above
        return GradComparison(name, float(other.detach().abs().max()), False)
    ours_d = ours.detach().to("cpu", torch.float64)
    ref_d = ref.detach().to("cpu", torch.float64)
    if ours_d.shape != ref_d.shape:
        return GradComparison(name, math.inf, False)
    diff = (ours_d - ref_d).abs()
    max_diff = float(diff.max()) if diff.numel() else 0.0
    r, a = _TOLERANCES.get(ref.dtype, (1.3e-6, 1e-5))
    close = bool(
        torch.allclose(
            ours_d,
            ref_d,
            rtol=r if rtol is None else rtol,
            atol=a if atol is None else atol,
            equal_nan=True,
        )
    )
    return GradComparison(name, max_diff, close)
