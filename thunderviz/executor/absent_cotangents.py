"""Outputs of a call that the loss does not use, and outputs it returns more than once.

Autograd hands a Function `None` for an output that got no gradient (we ask for that with
`ctx.set_materialize_grads(False)`). The backward trace takes one cotangent per output, so it
gets zeros there — but an input that only such outputs depend on must get `None`, as eager
PyTorch gives `None` to a parameter that took no part in the loss (a Hugging Face model's
pooler when the loss reads the sequence output). The difference is not cosmetic: an optimizer
skips a `None` gradient and moves a zero one (AdamW's weight decay, momentum).

A program that returns one tensor twice (`return y, y`) returns the same object twice, and
autograd hands that tensor's whole gradient to the last of its places, `None` to the others;
the backward trace takes one cotangent per distinct output, at its first place. Read there
alone, the gradient was lost: its inputs got `None`, silently.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import BoundSymbol
from thunderviz.core.trace import Trace

__all__ = ["inputs_each_output_reads", "fill_absent", "gather_repeated", "repeated_outputs"]


def inputs_each_output_reads(forward: Trace, differentiable: list[int]) -> list[frozenset[int]]:
    """For each output at the `differentiable` positions of `forward`'s flat output, the
    positions in `forward.flat_args` of the inputs it is computed from. Data flow is a
    superset of gradient flow, so an input outside an output's set surely gets no gradient
    through it."""
    reads: dict[str, frozenset[int]] = {
        p.name: frozenset((i,)) for i, p in enumerate(forward.flat_args) if p is not None
    }
    _follow(forward.bound_symbols, reads)
    flat_out = pytree.tree_leaves(forward.output)
    return [reads.get(flat_out[i].name, frozenset()) for i in differentiable]


def _follow(bsyms: list[BoundSymbol], reads: dict[str, frozenset[int]]) -> None:
    """Add what each value `bsyms` make is computed from. A functionalized call (`buf[i] =
    v`) makes its values in its subsymbols, which are the code: followed there (its own
    outputs, none for a `__setitem__`, would lose `v` flowing into `buf`'s new value, and a
    model that fills a buffer so, as Longformer's attention does, got no gradient)."""
    for bsym in bsyms:
        if bsym.executes_subsymbols:
            _follow(bsym.subsymbols, reads)
            continue
        if _position_wise(bsym):  # output i is input i (a module's backward-hook point)
            ins = [p for p in bsym.flat_proxy_args if isinstance(p, TensorProxy)]
            for i, o in zip(ins, bsym.flat_proxy_outs, strict=False):
                reads[o.name] = reads.get(o.name, frozenset()) | reads.get(i.name, frozenset())
            continue
        sources = frozenset().union(*(reads.get(p.name, frozenset()) for p in bsym.flat_proxy_args))
        for p in bsym.flat_proxy_outs:
            reads[p.name] = reads.get(p.name, frozenset()) | sources


def _position_wise(bsym: BoundSymbol) -> bool:
    """A call of an autograd.Function that is the identity position by position and hands
    no gradient on where none came (`passes_absence`: capture/module_backward_hooks.py)."""
    call = getattr(bsym.args[0], "value", None) if bsym.args else None
    return bool(getattr(getattr(call, "cls", None), "passes_absence", False))


def fill_absent(
    forward: Trace,
    differentiable: list[int],
    cotangents: tuple[Any, ...],
    reads: list[frozenset[int]],
) -> tuple[tuple[Any, ...], set[int]]:
    """Zeros for the outputs that got no gradient, and the input positions that only those
    outputs read (their gradient is None, not zeros)."""
    flat_out = pytree.tree_leaves(forward.output)  # what `differentiable` indexes
    filled = []
    reached: set[int] = set()
    for k, (position, ct) in enumerate(zip(differentiable, cotangents, strict=True)):
        if ct is None:
            p = flat_out[position]
            assert isinstance(p, TensorProxy)
            ct = torch.zeros(p.shape, dtype=p.dtype, device=p.device)
        else:
            reached |= reads[k]
        filled.append(ct)
    unreached = set(range(len(forward.flat_args))) - reached
    return tuple(filled), unreached


def repeated_outputs(forward: Trace, differentiable: list[int]) -> dict[int, tuple[int, ...]]:
    """For each output at the `differentiable` positions of `forward`'s flat output that the
    program returns more than once: all the positions it is returned at."""
    flat_out = pytree.tree_leaves(forward.output)
    places: dict[str, list[int]] = {}
    for i, p in enumerate(flat_out):
        if isinstance(p, TensorProxy):
            places.setdefault(p.name, []).append(i)
    return {
        i: tuple(places[flat_out[i].name])
        for i in differentiable
        if len(places[flat_out[i].name]) > 1
    }


def gather_repeated(grad_outputs: tuple[Any, ...], repeated: dict[int, tuple[int, ...]]) -> tuple:
    """`grad_outputs` with each repeated output's gradient at its first place: the sum of what
    autograd handed to any of its places (one of them, in practice), None if none got one."""
    gathered = list(grad_outputs)
    for first, places in repeated.items():
        got = [grad_outputs[i] for i in places if grad_outputs[i] is not None]
        gathered[first] = functools.reduce(operator.add, got) if got else None
    return tuple(gathered)
