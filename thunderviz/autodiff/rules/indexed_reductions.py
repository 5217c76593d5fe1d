"""Grad rules for reductions into positions an index names: `scatter_reduce`,
`index_reduce` and `segment_reduce` (torch's `scatter_reduce_backward` /
`index_reduce_backward` formulas; `_segment_reduce_backward` is an ATen kernel).

`scatter_reduce(self, dim, index, src, reduce)` and `index_reduce(self, dim, index, source,
reduce)` differ only in how an index addresses positions, so one rule maker writes both
from four ops each: gather (read at the index), add (add at the index), fill (zero at the
index) and the reduction itself.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import with_arguments
from thunderviz.prims import aten
from thunderviz.prims.call_args import op_args

RULES = RuleSet("indexed_reductions")


@dataclass(frozen=True)
class _Indexing:
    """How one family of ops reads and writes at `index` along `dim`."""

    reduce_op: Any  # (self, dim, index, src, reduce, include_self) -> out
    gather: Any  # (t, dim, index) -> t at the index, src-shaped
    add: Any  # (t, dim, index, src) -> t with src added at the index
    fill_zero: Any  # (t, dim, index) -> t with zeros at the indexed positions


_SCATTER = _Indexing(
    reduce_op=lambda s, d, i, src, r, inc: aten.scatter_reduce.two(
        s, d, i, src, r, include_self=inc
    ),
    gather=lambda t, d, i: aten.gather.default(t, d, i),
    add=lambda t, d, i, src: aten.scatter_add.default(t, d, i, src),
    fill_zero=lambda t, d, i: aten.scatter.value(t, d, i, 0),
)
_INDEX = _Indexing(
    reduce_op=lambda s, d, i, src, r, inc: aten.index_reduce.default(
        s, d, i, src, r, include_self=inc
    ),
    gather=lambda t, d, i: aten.index_select.default(t, d, i),
    add=lambda t, d, i, src: aten.index_add.default(t, d, i, src),
    fill_zero=lambda t, d, i: aten.index_fill.int_Scalar(t, d, i, 0),
)


def _as(x, like):
    return aten._to_copy.default(x, dtype=like.dtype)


def _reduce_grads(ix: _Indexing, g, out, a, dim, index, src, reduce, include_self):
    """(gradient of self, gradient of src) of out = reduce(self, dim, index, src)."""
    if reduce == "sum":
        grad_self, grad_src = g, ix.gather(g, dim, index)
    elif reduce == "mean":  # each output is divided by the count of what it averaged
        count = aten.ones_like.default(g) if include_self else aten.zeros_like.default(g)
        count = ix.add(count, dim, index, aten.ones_like.default(src))
        count = aten.where.self(aten.eq.Scalar(count, 0), aten.ones_like.default(count), count)
        grad_self = aten.div.Tensor(g, count)
        grad_src = aten.div.Tensor(ix.gather(g, dim, index), ix.gather(count, dim, index))
    elif reduce in ("amax", "amin"):  # ties share the gradient evenly
        value = ix.gather(out, dim, index)
        self_is = _as(aten.eq.Tensor(a, out), a)
        src_is = _as(aten.eq.Tensor(src, value), a)
        share = aten.div.Tensor(g, ix.add(self_is, dim, index, src_is))
        grad_self = aten.mul.Tensor(self_is, share)
        grad_src = aten.mul.Tensor(src_is, ix.gather(share, dim, index))
    elif reduce == "prod":
        grad_self, grad_src = _prod_grads(ix, g, out, a, dim, index, src, include_self)
    else:
        raise AutodiffError(f"no gradient for reduce={reduce!r}")
    if not include_self:  # self's values at the indexed positions were not used
        grad_self = ix.fill_zero(grad_self, dim, index)
    return grad_self, grad_src


def _prod_grads(ix: _Indexing, g, out, a, dim, index, src, include_self):
    """The product of the others, without dividing by zero: self's zeros are taken out of
    the product; a src element that is the only zero at its position gets the product of
    the others, one of several zeros gets 0."""
    one = aten.ones_like.default(a)
    masked_self = aten.where.self(aten.eq.Scalar(a, 0), one, a)
    without_self = ix.reduce_op(masked_self, dim, index, src, "prod", include_self)
    grad_self = aten.div.Tensor(aten.mul.Tensor(g, without_self), masked_self)
    src_zero = aten.eq.Scalar(src, 0)
    zeros_there = ix.gather(
        ix.add(aten.zeros_like.default(a), dim, index, _as(src_zero, a)), dim, index
    )
    single_zero = aten.logical_and.default(src_zero, aten.eq.Scalar(zeros_there, 1))
    masked_src = aten.where.self(single_zero, aten.ones_like.default(src), src)
    without_src = ix.reduce_op(a, dim, index, masked_src, "prod", include_self)
    src_or_one = aten.where.self(src_zero, aten.ones_like.default(src), src)
    grad_src = aten.where.self(
        single_zero,
        ix.gather(aten.mul.Tensor(g, without_src), dim, index),
        aten.div.Tensor(ix.gather(aten.mul.Tensor(g, out), dim, index), src_or_one),
    )
    return grad_self, grad_src


def _put_reduce_grads(ix: _Indexing, out, a, dim, index, src, reduce, include_self) -> None:
    g = get_grad(out)
    grad_self, grad_src = _reduce_grads(ix, g, out, a, dim, index, src, reduce, include_self)
    put_grad(a, grad_self)
    put_grad(src, grad_src)


for _op, _ix in ((aten.scatter_reduce.two, _SCATTER), (aten.index_reduce.default, _INDEX)):
    with_arguments(RULES, _op, functools.partial(_put_reduce_grads, _ix))


@RULES.grad(aten.segment_reduce.default)
def segment_reduce(*args, **kwargs):
    out = aten.segment_reduce.default(*args, **kwargs)
    data, reduce, lengths, indices, offsets, axis, _unsafe, initial = op_args(
        aten.segment_reduce.default, args, kwargs
    )
    if indices is not None:
        raise AutodiffError(
            "segment_reduce with `indices=` has no gradient in torch either; "
            "pass `lengths=` or `offsets=`"
        )
    g = get_grad(out)
    put_grad(
        data,
        aten._segment_reduce_backward.default(
            g, out, data, reduce, lengths=lengths, offsets=offsets, axis=axis, initial=initial
        ),
    )
    return out
