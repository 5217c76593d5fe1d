"""Grad rules for views, shape changes and indexing."""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.prims import aten

RULES = RuleSet("shape")


@RULES.grad(aten.t.default)
def t(a):
    out = aten.t.default(a)
    put_grad(a, aten.t.default(get_grad(out)))
    return out


@RULES.grad(aten.view.default, aten._unsafe_view.default, aten.reshape.default)
def view(a, shape):
    out = aten.view.default(a, shape)
    put_grad(a, aten.view.default(get_grad(out), list(a.shape)))
    return out
