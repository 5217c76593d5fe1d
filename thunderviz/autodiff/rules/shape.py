"""Grad rules for views, shape changes, slicing, joining and splitting (gather, scatter,
index and the writes into a tensor: `rules/indexing.py`).

Most of these move values around without changing them, so the gradient moves the
cotangent back: a view is undone (reshape to the input's shape, the inverse permutation), a
selection is scattered into zeros (`slice_backward`), and a concatenation is split.
Broadcasting (`expand`) needs nothing: `put_grad` sums back down.
"""

from __future__ import annotations

import sys

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import (
    pass_through,
    reshape_back,
    self_adjoint,
    unary,
    with_arguments,
    zeros_shaped,
)
from thunderviz.prims import aten
from thunderviz.prims.call_args import op_args

RULES = RuleSet("shape", supports_complex=True)  # linear maps: no conjugates

_INT64_MAX = sys.maxsize  # what ATen means by "to the end" in slice


def _norm_dim(dim: int, ndim: int) -> int:
    """A dim index in [0, ndim): negative dims count from the end (0-dim tensors take 0/-1)."""
    return dim % max(ndim, 1)


# --- views and reshapes ------------------------------------------------------------------


# atleast_1d/2d/3d are seen inside decompositions (Python refs call these CompositeImplicit
# ops): they only add size-1 dims
for _op in (
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten._reshape_alias.default,
    aten.atleast_1d.default,
    aten.atleast_2d.default,
    aten.atleast_3d.default,
):
    reshape_back(RULES, _op)
pass_through(RULES, aten.expand.default)  # put_grad sums the broadcast dims away


@RULES.grad(aten.permute.default)
def permute(a, dims):
    out = aten.permute.default(a, dims)
    inverse = [0] * len(dims)
    for i, d in enumerate(dims):
        inverse[_norm_dim(d, len(dims))] = i
    put_grad(a, aten.permute.default(get_grad(out), inverse))
    return out


for _op in (
    aten.transpose.int,
    aten.t.default,
    aten.mT.default,  # (torch.cdist's matmul path calls it below the composite level)
    aten.flip.default,
    aten.tril.default,
    aten.triu.default,
):
    self_adjoint(RULES, _op)


def _unsqueeze_back(g, a, dims):
    """Put back the size-1 dims `dims` (of `a`) that a squeeze removed."""
    for d in sorted(dims):
        g = aten.unsqueeze.default(g, d)
    return g


def _squeezed_dims(a, dims):
    return {_norm_dim(d, a.ndim) for d in dims if a.ndim > 0 and a.shape[_norm_dim(d, a.ndim)] == 1}


unary(
    RULES,
    aten.squeeze.default,
    lambda g, a, out: _unsqueeze_back(g, a, [i for i, s in enumerate(a.shape) if s == 1]),
)


@RULES.grad(aten.squeeze.dim)
def squeeze_dim(a, dim):
    out = aten.squeeze.dim(a, dim)
    put_grad(a, _unsqueeze_back(get_grad(out), a, _squeezed_dims(a, [dim])))
    return out


@RULES.grad(aten.squeeze.dims)
def squeeze_dims(a, dim):
    out = aten.squeeze.dims(a, dim)
    put_grad(a, _unsqueeze_back(get_grad(out), a, _squeezed_dims(a, dim)))
    return out


@RULES.grad(aten.unsqueeze.default)
def unsqueeze(a, dim):
    out = aten.unsqueeze.default(a, dim)
    put_grad(a, aten.squeeze.dim(get_grad(out), _norm_dim(dim, out.ndim)))
    return out


@RULES.grad(aten.unfold.default)
def unfold(a, dimension, size, step):
    out = aten.unfold.default(a, dimension, size, step)
    put_grad(a, aten.unfold_backward.default(get_grad(out), list(a.shape), dimension, size, step))
    return out


# --- slicing and selecting ---------------------------------------------------------------


@RULES.grad(aten.slice.Tensor)
def slice_(*args, **kwargs):
    out = aten.slice.Tensor(*args, **kwargs)
    a, dim, start, end, step = op_args(aten.slice.Tensor, args, kwargs)
    g = get_grad(out)
    put_grad(
        a,
        aten.slice_backward.default(
            g,
            list(a.shape),
            dim,
            0 if start is None else start,
            _INT64_MAX if end is None else end,
            step,
        ),
    )
    return out


@RULES.grad(aten.select.int)
def select(a, dim, index):
    out = aten.select.int(a, dim, index)
    put_grad(a, aten.select_backward.default(get_grad(out), list(a.shape), dim, index))
    return out


@RULES.grad(aten.diagonal.default)
def diagonal(*args, **kwargs):
    out = aten.diagonal.default(*args, **kwargs)
    a, offset, dim1, dim2 = op_args(aten.diagonal.default, args, kwargs)
    put_grad(a, aten.diagonal_backward.default(get_grad(out), list(a.shape), offset, dim1, dim2))
    return out


@RULES.grad(aten.roll.default)
def roll(*args, **kwargs):
    out = aten.roll.default(*args, **kwargs)
    a, shifts, dims = op_args(aten.roll.default, args, kwargs)
    shifts = [shifts] if isinstance(shifts, int) else shifts
    put_grad(a, aten.roll.default(get_grad(out), [-s for s in shifts], dims))
    return out


@RULES.grad(aten.constant_pad_nd.default)
def constant_pad_nd(a, pad, *args, **kwargs):
    out = aten.constant_pad_nd.default(a, pad, *args, **kwargs)
    put_grad(a, aten.constant_pad_nd.default(get_grad(out), [-p for p in pad]))
    return out


@RULES.grad(aten.repeat.default)
def repeat(a, repeats):
    out = aten.repeat.default(a, repeats)
    g = get_grad(out)
    lead = len(repeats) - a.ndim
    # out dim i (aligned with a) is [repeats[i] copies of a's dim]: split and sum the copies
    split_shape: list[int] = list(repeats[:lead])
    for r, s in zip(repeats[lead:], a.shape, strict=True):
        split_shape += [r, s]
    copies = list(range(lead)) + [lead + 2 * i for i in range(a.ndim)]
    if copies:
        g = aten.sum.dim_IntList(aten.reshape.default(g, split_shape), copies)
    put_grad(a, g)
    return out


# --- joining and splitting ---------------------------------------------------------------


def _skipped_by_cat(t, out_ndim: int) -> bool:
    """cat ignores 1-d empty tensors (legacy behavior) whatever the other inputs' rank."""
    return t.ndim == 1 and t.shape[0] == 0 and out_ndim != 1


@RULES.grad(aten.cat.default)
def cat(*args, **kwargs):
    out = aten.cat.default(*args, **kwargs)
    tensors, dim = op_args(aten.cat.default, args, kwargs)
    g = get_grad(out)
    d = _norm_dim(dim, out.ndim)
    kept = [t for t in tensors if not _skipped_by_cat(t, out.ndim)]
    for t in tensors:
        if _skipped_by_cat(t, out.ndim) and requires_grad(t):
            put_grad(t, zeros_shaped(g, [0]))
    if len(kept) == 1:
        put_grad(kept[0], g)
        return out
    pieces = aten.split_with_sizes.default(g, [t.shape[d] for t in kept], d)
    for t, piece in zip(kept, pieces, strict=True):
        if requires_grad(t):
            put_grad(t, piece)
    return out


@RULES.grad(aten.stack.default)
def stack(*args, **kwargs):
    out = aten.stack.default(*args, **kwargs)
    tensors, dim = op_args(aten.stack.default, args, kwargs)
    g = get_grad(out)
    pieces = aten.unbind.int(g, _norm_dim(dim, out.ndim))
    for t, piece in zip(tensors, pieces, strict=True):
        if requires_grad(t):
            put_grad(t, piece)
    return out


def _split_grads(outs, a, _split, dim):
    """Split-like ops: the input's gradient is the pieces' cotangents put back together."""
    grads = [get_grad(o) for o in outs]
    d = _norm_dim(dim, a.ndim)
    put_grad(a, grads[0] if len(grads) == 1 else aten.cat.default(grads, d))


for _op in (
    aten.split.Tensor,
    aten.split_with_sizes.default,
    aten.unsafe_split.Tensor,
    aten.tensor_split.sections,
    aten.tensor_split.indices,
):
    with_arguments(RULES, _op, _split_grads)


@RULES.grad(aten.unbind.int)
def unbind(*args, **kwargs):
    outs = aten.unbind.int(*args, **kwargs)
    a, dim = op_args(aten.unbind.int, args, kwargs)
    grads = [get_grad(o) for o in outs]
    put_grad(a, aten.stack.default(grads, _norm_dim(dim, a.ndim)))
    return outs
