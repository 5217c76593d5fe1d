"""A backward with `create_graph=True` through a jitted call: a gradient penalty, a
physics-informed network's du/dx, a Hessian-vector product.

The gradients must then carry a graph of their own. The forward ran without autograd (its
intermediates have no history), so running the backward trace with autograd on would give
a graph that stops at every saved intermediate: the second derivative through them would be
missing, silently. Instead the call is recomputed with autograd recording: the augmented
forward again from the call's inputs, with the random state it drew from, without its
write-backs (the first run made them), and on copies of the values it wrote into, taken
before it did; then the backward trace on what it saved. The gradients are those of the
same traces, bit for bit, and their graph runs through thunderviz's own forward and backward
ops, which torch then differentiates. The cost, on every call of an entry that writes into
its inputs (BatchNorm's statistics): a copy of those inputs, kept until the backward.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import islice
from typing import Any

import torch
from torch._decomp import decomposition_table
from torch.utils import _pytree as pytree

from thunderviz.core.proxies import Proxy
from thunderviz.core.rng import RngState
from thunderviz.core.symbol import BoundSymbol, BsymTag, Symbol
from thunderviz.core.trace import Trace, without_no_grad
from thunderviz.executor.guards import GUARD_NAMES
from thunderviz.executor.output_hooks import OUTPUT_HOOK_NAMES
from thunderviz.prims.aliasing import mutated_arg_indices

__all__ = ["differentiable_backward", "inputs_written"]


# Kernels that update arguments their schema does not mark as written: the running
# statistics of `native_batch_norm` (in training; in eval it only reads them, and a copy
# read is the same value).
_UNANNOTATED = {torch.ops.aten.native_batch_norm.default: (3, 4)}


def inputs_written(augmented: Trace) -> tuple[int, ...]:
    """Positions of the augmented forward's inputs that it writes into: a write-back
    (`copy_` into a buffer) or a kernel that updates an argument in place (BatchNorm's
    running statistics). The forward snapshots them, so the recomputation reads and writes
    copies of the values the first run read."""
    written: set[str] = set()
    for top in augmented.bound_symbols:
        _add_written(top, written)
    return tuple(i for i, p in enumerate(augmented.flat_args) if p.name in written)


def _add_written(bsym: BoundSymbol, written: set[str]) -> None:
    """Add the names of the arguments `bsym`, or anything nested in it, writes into. Only
    subsymbols whose outline writes are visited (a decomposition is not built for nothing)."""
    if BsymTag.MUTATION_EPILOGUE in bsym.tags:
        written.add(bsym.args[0].name)
    else:
        for i in _written_positions(bsym):
            arg = bsym.args[i] if i < len(bsym.args) else None
            if isinstance(arg, Proxy):
                written.add(arg.name)
    if any(map(_writes, islice(bsym.walk_outline(), 1, None))):
        for sub in bsym.subsymbols:
            _add_written(sub, written)


def _written_positions(bsym: BoundSymbol) -> tuple[int, ...]:
    op = bsym.sym.fn  # mutated_arg_indices is cached per op
    if not isinstance(op, torch._ops.OpOverload):
        return ()
    return mutated_arg_indices(op) or _UNANNOTATED.get(op, ())


def _writes(bsym: BoundSymbol) -> bool:
    return BsymTag.MUTATION_EPILOGUE in bsym.tags or bool(_written_positions(bsym))


def _recompute(entry: Any) -> Any:
    """The augmented forward as it runs (guards in), without its write-backs, compiled once."""
    if entry.recompute is None:
        augmented = entry.executed[0]
        kept = [b for b in augmented.bound_symbols if BsymTag.MUTATION_EPILOGUE not in b.tags]
        trace = augmented.from_trace(bound_symbols=kept)
        entry.recompute = without_no_grad(trace.python_callable(GUARD_NAMES, free_dead=True))
    return entry.recompute


# Backward kernels torch gives no derivative of its own. Eager's formulas switch to a
# twice-differentiable composite when the graph is kept (`GradMode::is_enabled() ?
# infinitely_differentiable_silu_backward(...) : silu_backward(...)`); the backward that
# keeps a graph runs torch's decompositions of them in their place: the same math, in ops
# autograd can differentiate.
_ONCE_DIFFERENTIABLE = (
    torch.ops.aten.silu_backward.default,
    torch.ops.aten.mish_backward.default,
    torch.ops.aten.native_group_norm_backward.default,
)


def _twice_differentiable(entry: Any) -> Any:
    """The backward trace, compiled once, with `_ONCE_DIFFERENTIABLE` kernels decomposed."""
    if entry.backward_twice is None:
        backward = entry.executed[-1]
        names: dict[str, Any] = {}
        swapped = [_swap(b, names) for b in backward.bound_symbols]
        trace = backward.from_trace(bound_symbols=swapped)
        entry.backward_twice = without_no_grad(
            trace.python_callable(
                (*GUARD_NAMES, *OUTPUT_HOOK_NAMES, *names.items()), free_dead=True
            )
        )
    return entry.backward_twice


def _swap(bsym: BoundSymbol, names: dict[str, Any]) -> BoundSymbol:
    op = bsym.sym.fn
    if op not in _ONCE_DIFFERENTIABLE:
        return bsym
    name = f"twice_differentiable_{op.__name__.replace('.', '_')}"
    names[name] = decomposition_table[op]
    return replace(bsym, sym=Symbol(name=name, id=f"thunderviz.{name}", fn=names[name]))


def differentiable_backward(ctx: Any, entry: Any, cotangents: Any) -> Any:
    # `entry`: a bridge.CompiledEntry (bridge calls this; typed loosely to import no cycle)
    """The backward trace's gradients for `cotangents`, with autograd's graph."""
    inputs = list(ctx.inputs)
    for i, value in zip(entry.inputs_written, getattr(ctx, "inputs_before", ()), strict=True):
        # the value the first run read; its writes land here. A parameter it writes under
        # no_grad (weight clipping) is still the leaf eager differentiates as to
        given = inputs[i]
        needs = isinstance(given, torch.Tensor) and given.requires_grad
        inputs[i] = _ValueBefore.apply(given, value) if needs else value.clone()
    run = _recompute(entry)
    drawn: RngState | None = getattr(ctx, "rng", None)  # set when the forward draws
    now = RngState(entry.generators) if drawn is not None else None
    try:
        if drawn is not None:
            drawn.restore()  # the draws the forward made (a dropout mask)
        with torch.enable_grad():
            out, saved = entry.call(run, inputs)
            if entry.hook_positions:  # hooks the user put on outputs (output_hooks.py)
                ctx.taps.follow(pytree.tree_leaves(out))
            return _twice_differentiable(entry)(saved, cotangents)
    finally:
        if now is not None:
            now.restore()


class _ValueBefore(torch.autograd.Function):
    """A copy of `before`, the value an input held before the call wrote into it, whose
    gradient goes to the input itself, as eager's goes to a tensor updated behind
    autograd's back."""

    @staticmethod
    def forward(ctx: Any, given: torch.Tensor, before: torch.Tensor) -> torch.Tensor:
        return before.clone()

    @staticmethod
    def backward(ctx: Any, *grad_outputs: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad_outputs[0], None
