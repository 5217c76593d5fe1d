"""Grad rules for elementwise ops: unary math, binary arithmetic, comparisons."""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.prims import aten

RULES = RuleSet("elementwise")


@RULES.grad(aten.add.Tensor)
def add(a, b, *, alpha=1):
    out = aten.add.Tensor(a, b, alpha=alpha)
    g = get_grad(out)
    put_grad(a, g)
    put_grad(b, g if alpha == 1 else aten.mul.Tensor(g, alpha))
    return out


@RULES.grad(aten.mul.Tensor)
def mul(a, b):
    out = aten.mul.Tensor(a, b)
    g = get_grad(out)
    put_grad(a, aten.mul.Tensor(g, b))
    put_grad(b, aten.mul.Tensor(g, a))
    return out


@RULES.grad(aten.tanh.default)
def tanh(a):
    out = aten.tanh.default(a)
    g = get_grad(out)
    put_grad(a, aten.mul.Tensor(g, aten.rsub.Scalar(aten.mul.Tensor(out, out), 1)))
    return out


@RULES.grad(aten.relu.default)
def relu(a):
    out = aten.relu.default(a)
    g = get_grad(out)
    put_grad(a, aten.threshold_backward.default(g, out, 0))
    return out
