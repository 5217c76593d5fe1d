"""Grad rules for reductions."""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.prims import aten

RULES = RuleSet("reductions")


@RULES.grad(aten.sum.dim_IntList)
def sum_dim(a, dim, keepdim=False, *, dtype=None):
    out = aten.sum.dim_IntList(a, dim, keepdim, dtype=dtype)
    g = get_grad(out)
    if not keepdim and a.ndim > 0:
        dims = sorted(d % a.ndim for d in (dim if dim else range(a.ndim)))
        for d in dims:
            g = aten.unsqueeze.default(g, d)
    put_grad(a, aten.expand.default(g, list(a.shape)))
    return out


@RULES.grad(aten.sum.default)
def sum_all(a, *, dtype=None):
    out = aten.sum.default(a, dtype=dtype)
    g = get_grad(out)
    put_grad(a, aten.expand.default(g, list(a.shape)))
    return out
