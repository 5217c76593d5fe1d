"""Grad rules for elementwise selection: maximum/minimum, clamp, where, masked_fill.

At ties and bounds the rules pick autograd's subgradient: `clamp` lets the gradient through
at its bounds, `maximum` splits it in half at ties.
"""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import (
    only_where,
    register,
    scalar_zero,
    with_arguments,
    zero_where,
)
from thunderviz.prims import aten

RULES = RuleSet("selection")


# --- selection: max/min, clamp, where, masked_fill ----------------------------------------


def _split_at_ties(g, a, b, loses_a, loses_b):
    # the gradient goes to the selected operand; at ties (a == b) each gets half
    half = aten.where.self(aten.eq.Tensor(a, b), aten.div.Tensor(g, 2), g)
    if requires_grad(a):
        put_grad(a, zero_where(loses_a, half))
    if requires_grad(b):
        put_grad(b, zero_where(loses_b, half))


@RULES.grad(aten.maximum.default)
def maximum(a, b):
    out = aten.maximum.default(a, b)
    _split_at_ties(get_grad(out), a, b, aten.lt.Tensor(a, b), aten.gt.Tensor(a, b))
    return out


@RULES.grad(aten.minimum.default)
def minimum(a, b):
    out = aten.minimum.default(a, b)
    _split_at_ties(get_grad(out), a, b, aten.gt.Tensor(a, b), aten.lt.Tensor(a, b))
    return out


def _fmax_fmin_grads(g, a, b, a_wins):
    # fmax/fmin ignore nan: `a` is selected where it wins or b is nan; no split at ties
    picked_a = aten.logical_or.default(a_wins, aten.isnan.default(b))
    zero = scalar_zero(g)
    if requires_grad(a):
        put_grad(a, aten.where.self(picked_a, g, zero))
    if requires_grad(b):
        put_grad(b, aten.where.self(picked_a, zero, g))


@RULES.grad(aten.fmax.default)
def fmax(a, b):
    out = aten.fmax.default(a, b)
    _fmax_fmin_grads(get_grad(out), a, b, aten.ge.Tensor(a, b))
    return out


@RULES.grad(aten.fmin.default)
def fmin(a, b):
    out = aten.fmin.default(a, b)
    _fmax_fmin_grads(get_grad(out), a, b, aten.le.Tensor(a, b))
    return out


def _clamp_self_mask(a, lo, hi, ge, le):
    """Where `a` passes through clamp: lo <= a <= hi (bounds included: subgradient 1)."""
    masks = []
    if lo is not None:
        masks.append(ge(a, lo))
    if hi is not None:
        masks.append(le(a, hi))
    if len(masks) == 2:
        return aten.logical_and.default(*masks)
    return masks[0] if masks else None


@RULES.grad(aten.clamp.default)
def clamp(a, min=None, max=None):
    out = aten.clamp.default(a, min, max)
    g = get_grad(out)
    mask = _clamp_self_mask(a, min, max, aten.ge.Scalar, aten.le.Scalar)
    put_grad(a, g if mask is None else only_where(mask, g))
    return out


@RULES.grad(aten.clamp.Tensor)
def clamp_tensor(a, min=None, max=None):
    # clamp(a, lo, hi) = minimum(maximum(a, lo), hi): hi wins when lo > hi
    out = aten.clamp.Tensor(a, min, max)
    g = get_grad(out)
    zero = scalar_zero(g)
    if requires_grad(a):
        mask = _clamp_self_mask(a, min, max, aten.ge.Tensor, aten.le.Tensor)
        put_grad(a, g if mask is None else aten.where.self(mask, g, zero))
    if requires_grad(min):
        below = aten.lt.Tensor(a, min)
        if max is not None:
            below = aten.logical_and.default(below, aten.lt.Tensor(min, max))
        put_grad(min, aten.where.self(below, g, zero))
    if requires_grad(max):
        above = aten.gt.Tensor(a, max)
        if min is not None:
            above = aten.logical_or.default(above, aten.lt.Tensor(max, min))
        put_grad(max, aten.where.self(above, g, zero))
    return out


def _one_sided_clamp_rule(op, keeps) -> None:
    """clamp_min / clamp_max against a number or a tensor bound: the gradient goes to `a`
    where `keeps(a, bound)` (at the bound itself too, as autograd), elsewhere to the bound."""

    def one_sided_clamp(a, bound):
        out = op(a, bound)
        g = get_grad(out)
        keep = keeps(a, bound)
        if requires_grad(a):
            put_grad(a, only_where(keep, g))
        if requires_grad(bound):  # False for a number
            put_grad(bound, zero_where(keep, g))
        return out

    register(RULES, op, one_sided_clamp)


for _op, _keeps in (
    (aten.clamp_min.default, aten.ge.Scalar),
    (aten.clamp_min.Tensor, aten.ge.Tensor),
    (aten.clamp_max.default, aten.le.Scalar),
    (aten.clamp_max.Tensor, aten.le.Tensor),
):
    _one_sided_clamp_rule(_op, _keeps)


def _masked_grads(mask_at: int, kept_at: int):
    """where(cond, a, b) (mask at 0, `a` kept where it holds) and masked_fill(a, mask, value)
    (mask at 1, `value` written where it holds): the operand written where the mask holds
    takes the cotangent there, the other one elsewhere. A number operand has no gradient
    (`requires_grad` is False); a 0-dim tensor value's is the sum (put_grad sums)."""

    def put(out, *args):
        g = get_grad(out)
        for i, x in enumerate(args):
            if i != mask_at and requires_grad(x):
                put_grad(x, (only_where if i == kept_at else zero_where)(args[mask_at], g))

    return put


for _op in (aten.where.self, aten.where.ScalarSelf, aten.where.ScalarOther):
    with_arguments(RULES, _op, _masked_grads(0, 1), supports_complex=True)
for _op in (aten.masked_fill.Scalar, aten.masked_fill.Tensor):
    with_arguments(RULES, _op, _masked_grads(1, 2), supports_complex=True)
