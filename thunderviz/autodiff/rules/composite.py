"""Grad rules for composite ATen ops that reach autodiff whole: torch implements them with
other ops, but the trace records them as one call with no decomposition it can use
(`movedim`, `narrow`, `broadcast_tensors`, `outer`, `diag`, `take`, `put`, `bilinear`, ...).

Most move values without changing them: the gradient moves the cotangent back.
"""

from __future__ import annotations

import torch

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import conj, register, self_adjoint
from thunderviz.prims import aten
from thunderviz.prims.torch_symbols import named_torch_symbol

RULES = RuleSet("composite", supports_complex=True)


@RULES.grad(aten.movedim.int)
def movedim(a, source, destination):
    out = aten.movedim.int(a, source, destination)
    put_grad(a, aten.movedim.int(get_grad(out), destination, source))
    return out


# x.T: all dims reversed, its own inverse
self_adjoint(RULES, aten.numpy_T.default)


def _broadcast_back(tensors, outs):
    """Each output is its input expanded: put_grad sums the cotangent back down. An input
    that already has the broadcast shape comes back as itself (ATen returns the very tensor,
    so the trace gives the output the input's name): its cotangent is already the input's."""
    for t, o in zip(tensors, outs, strict=True):
        if tuple(t.shape) != tuple(o.shape):
            put_grad(t, get_grad(o))
    return outs


@RULES.grad(aten.broadcast_tensors.default)
def broadcast_tensors(tensors):
    return _broadcast_back(tensors, aten.broadcast_tensors.default(tensors))


_torch_broadcast_tensors = named_torch_symbol(torch.broadcast_tensors)


@RULES.grad(torch.broadcast_tensors)
def torch_broadcast_tensors(*tensors):
    """The torch-level call: its expands are views of the inputs the trace records nothing
    for, so the call itself is the unit."""
    return _broadcast_back(tensors, _torch_broadcast_tensors(*tensors))


@RULES.grad(aten.narrow.default)
def narrow(a, dim, start, length):
    out = aten.narrow.default(a, dim, start, length)
    dim = dim % a.ndim
    start = start % a.shape[dim] if start < 0 else start
    put_grad(
        a, aten.slice_backward.default(get_grad(out), list(a.shape), dim, start, start + length, 1)
    )
    return out


@RULES.grad(aten.type_as.default)
def type_as(a, other):
    """A cast: put_grad casts the cotangent back to a's dtype. `other` gives only a dtype."""
    out = aten.type_as.default(a, other)
    put_grad(a, get_grad(out))
    return out


@RULES.grad(aten.outer.default)
def outer(a, b):
    """out[i, j] = a[i] b[j]."""
    out = aten.outer.default(a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.mv.default(g, conj(b)))
    if requires_grad(b):
        put_grad(b, aten.mv.default(aten.t.default(g), conj(a)))
    return out


@RULES.grad(aten.diag.default)
def diag(a, diagonal=0):
    """A vector becomes a matrix's diagonal (gradient: that diagonal); a matrix gives its
    diagonal (gradient: a zero matrix with the cotangent there)."""
    out = aten.diag.default(a, diagonal)
    g = get_grad(out)
    if a.ndim == 1:
        put_grad(a, aten.diagonal.default(g, diagonal))
    else:
        put_grad(a, aten.diagonal_backward.default(g, list(a.shape), diagonal, 0, 1))
    return out


@RULES.grad(aten.take.default)
def take(a, index):
    """Reads a flattened at `index`; a position read twice gets both cotangents."""
    out = aten.take.default(a, index)
    g = get_grad(out)
    flat = aten.index_put.default(
        aten.new_zeros.default(g, [a.numel]),
        [aten.reshape.default(_wrapped(index, a.numel), [-1])],
        aten.reshape.default(g, [-1]),
        True,
    )
    put_grad(a, aten.view.default(flat, list(a.shape)))
    return out


def _wrapped(index, n):
    """take/put accept negative positions, counted from the end."""
    return aten.remainder.Scalar(index, n)


@RULES.grad(aten.put.default)
def put(a, index, source, accumulate=False):
    """a with source written (or added) at the flat positions `index`: a's written-over
    elements take no gradient unless it accumulates; source takes the cotangent there."""
    out = aten.put.default(a, index, source, accumulate)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(
            a,
            g
            if accumulate
            else aten.put.default(g, index, aten.new_zeros.default(g, list(source.shape)), False),
        )
    if requires_grad(source):
        put_grad(source, aten.reshape.default(aten.take.default(g, index), list(source.shape)))
    return out


def _bilinear_rule(fn) -> None:
    """F.bilinear / torch.bilinear as one op (ATen runs it as `_trilinear`, a general
    contraction): out[..., o] = sum_ij x1[..., i] W[o, i, j] x2[..., j] + b[o]."""
    sym = named_torch_symbol(fn)

    def bilinear(x1, x2, weight, bias=None):
        out = sym(x1, x2, weight, bias)
        g = get_grad(out)
        if requires_grad(x1):
            put_grad(x1, aten.einsum.default("...o,oij,...j->...i", [g, weight, x2]))
        if requires_grad(x2):
            put_grad(x2, aten.einsum.default("...o,oij,...i->...j", [g, weight, x1]))
        if requires_grad(weight):
            put_grad(weight, aten.einsum.default("...o,...i,...j->oij", [g, x1, x2]))
        if requires_grad(bias):
            put_grad(bias, g)
        return out

    register(RULES, fn, bilinear, supports_complex=False, name=f"bilinear[{sym.id}]")


_bilinear_rule(torch.nn.functional.bilinear)
_bilinear_rule(torch.bilinear)
