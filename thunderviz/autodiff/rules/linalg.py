"""Grad rules for matrix products.

`torch.matmul`, `F.linear` and `einsum` have no rules of their own: they decompose into
these (`t`/`addmm`/`mm`/`view` for linear, `expand`/`bmm`/`_unsafe_view` for batched
matmul, `dot`/`mv` for vectors).
"""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.prims import aten

RULES = RuleSet("linalg")


def _scaled(g, c):
    return g if c == 1 else aten.mul.Tensor(g, c)


def _mT(x):
    """The batched transpose of the last two dims."""
    return aten.transpose.int(x, -2, -1)


@RULES.grad(aten.mm.default)
def mm(a, b):
    out = aten.mm.default(a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.mm.default(g, aten.t.default(b)))
    if requires_grad(b):
        put_grad(b, aten.mm.default(aten.t.default(a), g))
    return out


@RULES.grad(aten.addmm.default)
def addmm(bias, a, b, **kwargs):
    out = aten.addmm.default(bias, a, b, **kwargs)
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    g = get_grad(out)
    if requires_grad(bias):
        put_grad(bias, _scaled(g, beta))
    ga = _scaled(g, alpha)
    if requires_grad(a):
        put_grad(a, aten.mm.default(ga, aten.t.default(b)))
    if requires_grad(b):
        put_grad(b, aten.mm.default(aten.t.default(a), ga))
    return out


@RULES.grad(aten.bmm.default)
def bmm(a, b):
    out = aten.bmm.default(a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.bmm.default(g, _mT(b)))
    if requires_grad(b):
        put_grad(b, aten.bmm.default(_mT(a), g))
    return out


@RULES.grad(aten.baddbmm.default)
def baddbmm(c, a, b, **kwargs):
    out = aten.baddbmm.default(c, a, b, **kwargs)
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    g = get_grad(out)
    if requires_grad(c):
        put_grad(c, _scaled(g, beta))
    ga = _scaled(g, alpha)
    if requires_grad(a):
        put_grad(a, aten.bmm.default(ga, _mT(b)))
    if requires_grad(b):
        put_grad(b, aten.bmm.default(_mT(a), ga))
    return out


@RULES.grad(aten.addbmm.default)
def addbmm(c, a, b, **kwargs):
    """c + sum_i a[i] @ b[i]: every batch shares the output's cotangent."""
    out = aten.addbmm.default(c, a, b, **kwargs)
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    g = get_grad(out)
    if requires_grad(c):
        put_grad(c, _scaled(g, beta))
    ga = aten.expand.default(aten.unsqueeze.default(_scaled(g, alpha), 0), [a.shape[0], *g.shape])
    if requires_grad(a):
        put_grad(a, aten.bmm.default(ga, _mT(b)))
    if requires_grad(b):
        put_grad(b, aten.bmm.default(_mT(a), ga))
    return out


@RULES.grad(aten.dot.default)
def dot(a, b):
    out = aten.dot.default(a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.mul.Tensor(b, g))
    if requires_grad(b):
        put_grad(b, aten.mul.Tensor(a, g))
    return out


def _outer(u, v):
    return aten.mul.Tensor(aten.unsqueeze.default(u, 1), aten.unsqueeze.default(v, 0))


@RULES.grad(aten.mv.default)
def mv(m, v):
    out = aten.mv.default(m, v)
    g = get_grad(out)
    if requires_grad(m):
        put_grad(m, _outer(g, v))
    if requires_grad(v):
        put_grad(v, aten.mv.default(aten.t.default(m), g))
    return out


@RULES.grad(aten.addmv.default)
def addmv(c, m, v, **kwargs):
    out = aten.addmv.default(c, m, v, **kwargs)
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    g = get_grad(out)
    if requires_grad(c):
        put_grad(c, _scaled(g, beta))
    ga = _scaled(g, alpha)
    if requires_grad(m):
        put_grad(m, _outer(ga, v))
    if requires_grad(v):
        put_grad(v, aten.mv.default(aten.t.default(m), ga))
    return out
