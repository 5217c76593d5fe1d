"""Grad rules for gather, scatter and indexing, and for the writes into a tensor that
functionalized mutation and setitem become (`select_scatter`, `slice_scatter`, ...).

A gather's gradient scatters the cotangent into zeros (`index_put(..., accumulate=True)`
adds repeated indices up); a scatter's gathers it back.
"""

from __future__ import annotations

import torch

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import backward_kernel, register, with_arguments, zeros_shaped
from thunderviz.core.proxies import TensorProxy
from thunderviz.prims import aten
from thunderviz.prims.call_args import op_args

RULES = RuleSet("indexing", supports_complex=True)  # linear maps: no conjugates


# --- gather / scatter / index --------------------------------------------------------------


def _pad_to(x, shape):
    """Zero-pad `x` at the end of each dim up to `shape` (scatter reads only the first
    index.shape elements of src; the rest of src gets a zero gradient)."""
    if tuple(x.shape) == tuple(shape):
        return x
    pad: list[int] = []
    for have, want in zip(reversed(x.shape), reversed(shape), strict=True):
        pad += [0, want - have]
    return aten.constant_pad_nd.default(x, pad, 0)


@RULES.grad(aten.gather.default)
def gather(a, dim, index, **kwargs):
    out = aten.gather.default(a, dim, index, **kwargs)
    g = get_grad(out)
    put_grad(a, aten.scatter_add.default(zeros_shaped(g, a.shape), dim, index, g))
    return out


@RULES.grad(aten.scatter.src)
def scatter_src(a, dim, index, src):
    out = aten.scatter.src(a, dim, index, src)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.scatter.value(g, dim, index, 0))
    if requires_grad(src):
        put_grad(src, _pad_to(aten.gather.default(g, dim, index), src.shape))
    return out


@RULES.grad(aten.scatter_add.default)
def scatter_add(a, dim, index, src):
    out = aten.scatter_add.default(a, dim, index, src)
    g = get_grad(out)
    put_grad(a, g)
    if requires_grad(src):
        put_grad(src, _pad_to(aten.gather.default(g, dim, index), src.shape))
    return out


@RULES.grad(aten.index_select.default)
def index_select(a, dim, index):
    out = aten.index_select.default(a, dim, index)
    g = get_grad(out)
    put_grad(a, aten.index_add.default(zeros_shaped(g, a.shape), dim, index, g))
    return out


@RULES.grad(aten.index_add.default)
def index_add(a, dim, index, source, **kwargs):
    out = aten.index_add.default(a, dim, index, source, **kwargs)
    alpha = kwargs.get("alpha", 1)
    g = get_grad(out)
    put_grad(a, g)
    if requires_grad(source):
        gs = aten.index_select.default(g, dim, index)
        if source.ndim == 0:
            gs = aten.view.default(gs, [])
        put_grad(source, gs if alpha == 1 else aten.mul.Tensor(gs, alpha))
    return out


# a number written at the indexed places: the cotangent with zeros written there instead
for _op in (aten.scatter.value, aten.index_fill.int_Scalar):
    backward_kernel(RULES, _op, _op, lambda g, a, dim, index, _value: (g, dim, index, 0))


@RULES.grad(aten.index_fill.int_Tensor)
def index_fill_tensor(a, dim, index, value):
    out = aten.index_fill.int_Tensor(a, dim, index, value)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.index_fill.int_Scalar(g, dim, index, 0))
    if requires_grad(value):
        # the filled places, each counted once however often `index` names it
        filled = aten.sub.Tensor(g, aten.index_fill.int_Scalar(g, dim, index, 0))
        put_grad(value, aten.sum.default(filled))
    return out


def _integer_indices(bsym) -> bool:
    """These rules index by positions. A boolean mask selects a number of elements only its
    values tell (meta tensors cannot): capture records such a call with subsymbols that
    select by `nonzero(mask)` instead (capture/masks.py), and those are differentiated."""
    indices = bsym.args[1] if len(bsym.args) > 1 else bsym.kwargs.get("indices", ())
    return not any(
        isinstance(i, TensorProxy) and i.dtype in (torch.bool, torch.uint8) for i in indices
    )


def _index_rule(op) -> None:
    """Advanced indexing: the cotangent is added back at the indexed places (repeated
    indices accumulate)."""

    def index(a, indices):
        out = op(a, indices)
        g = get_grad(out)
        put_grad(a, aten.index_put.default(zeros_shaped(g, a.shape), indices, g, True))
        return out

    register(RULES, op, index, applies=_integer_indices)


def _put_index_put_grads(out, a, indices, values, accumulate) -> None:
    g = get_grad(out)
    if requires_grad(a):
        put_grad(
            a, g if accumulate else aten.index_put.default(g, indices, zeros_shaped(g, []), False)
        )
    if requires_grad(values):
        put_grad(values, aten.index.Tensor(g, indices))  # put_grad sums a broadcast away


for _op in (aten.index.Tensor, aten._unsafe_index.Tensor):
    _index_rule(_op)
for _op in (aten.index_put.default, aten._unsafe_index_put.default):
    with_arguments(RULES, _op, _put_index_put_grads, applies=_integer_indices)


# --- writing into a tensor (what functionalized mutation and setitem become) -----------------
# (copy, fill and alias are in rules/casts.py)


@RULES.grad(aten.select_scatter.default)
def select_scatter(a, src, dim, index):
    out = aten.select_scatter.default(a, src, dim, index)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.select_scatter.default(g, zeros_shaped(g, src.shape), dim, index))
    if requires_grad(src):
        put_grad(src, aten.select.int(g, dim, index))
    return out


@RULES.grad(aten.slice_scatter.default)
def slice_scatter(*args, **kwargs):
    out = aten.slice_scatter.default(*args, **kwargs)
    a, src, dim, start, end, step = op_args(aten.slice_scatter.default, args, kwargs)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(
            a, aten.slice_scatter.default(g, zeros_shaped(g, src.shape), dim, start, end, step)
        )
    if requires_grad(src):
        put_grad(src, aten.slice.Tensor(g, dim, start, end, step))
    return out


@RULES.grad(aten.diagonal_scatter.default)
def diagonal_scatter(*args, **kwargs):
    out = aten.diagonal_scatter.default(*args, **kwargs)
    a, src, offset, dim1, dim2 = op_args(aten.diagonal_scatter.default, args, kwargs)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(
            a, aten.diagonal_scatter.default(g, zeros_shaped(g, src.shape), offset, dim1, dim2)
        )
    if requires_grad(src):
        put_grad(src, aten.diagonal.default(g, offset, dim1, dim2))
    return out
