"""Grad rules for matrix products."""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.prims import aten

RULES = RuleSet("linalg")


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
def addmm(bias, a, b, *, beta=1, alpha=1):
    out = aten.addmm.default(bias, a, b, beta=beta, alpha=alpha)
    g = get_grad(out)
    if requires_grad(bias):
        put_grad(bias, g if beta == 1 else aten.mul.Tensor(g, beta))
    ga = g if alpha == 1 else aten.mul.Tensor(g, alpha)
    if requires_grad(a):
        put_grad(a, aten.mm.default(ga, aten.t.default(b)))
    if requires_grad(b):
        put_grad(b, aten.mm.default(aten.t.default(a), ga))
    return out
