"""Grad rules for elementwise selection: maximum/minimum, clamp, where, masked_fill.

At ties and bounds the rules pick the installed torch's subgradient, which changed in torch
2.14 (its derivatives.yaml): `maximum` splits the gradient in half at ties in every
release; up to 2.13 `clamp` lets it through at its bounds and `fmax`/`fmin` give it whole to
the operand picked (the other where it is NaN); from 2.14 a number bound stops it, and a
tensor bound, `fmax` and `fmin` split it at ties as `maximum` does.
"""

from __future__ import annotations

import torch

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

TIES_SPLIT = torch.__version__ >= "2.14"  # the convention above


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
    if TIES_SPLIT:
        _split_at_ties(get_grad(out), a, b, aten.lt.Tensor(a, b), aten.gt.Tensor(a, b))
    else:
        _fmax_fmin_grads(get_grad(out), a, b, aten.ge.Tensor(a, b))
    return out


@RULES.grad(aten.fmin.default)
def fmin(a, b):
    out = aten.fmin.default(a, b)
    if TIES_SPLIT:
        _split_at_ties(get_grad(out), a, b, aten.gt.Tensor(a, b), aten.lt.Tensor(a, b))
    else:
        _fmax_fmin_grads(get_grad(out), a, b, aten.le.Tensor(a, b))
    return out


def _clamp_self_mask(a, lo, hi, ge, le):
    """Where `a` passes through clamp: lo <= a <= hi (bounds included: subgradient 1; from
    torch 2.14, `ge`/`le` are the strict comparisons)."""
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
    ge, le = (aten.gt.Scalar, aten.lt.Scalar) if TIES_SPLIT else (aten.ge.Scalar, aten.le.Scalar)
    mask = _clamp_self_mask(a, min, max, ge, le)
    put_grad(a, g if mask is None else only_where(mask, g))
    return out


@RULES.grad(aten.clamp.Tensor)
def clamp_tensor(a, min=None, max=None):
    # clamp(a, lo, hi) = minimum(maximum(a, lo), hi): hi wins when lo > hi
    out = aten.clamp.Tensor(a, min, max)
    g = get_grad(out)
    if TIES_SPLIT:
        _clamp_tensor_splitting_ties(g, a, min, max)
        return out
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


def _clamp_tensor_splitting_ties(g, a, lo, hi) -> None:
    """torch 2.14's clamp.Tensor gradients (read off its autograd over every order of a, lo
    and hi, NaN included; tests/autodiff/test_rules_selection_ties.py checks them so): one bound
    is `maximum`/`minimum`'s; with both, a tie with a bound splits the gradient where
    lo < hi, and hi takes it all where lo > hi."""
    if hi is None:  # maximum(a, lo)
        _split_at_ties(g, a, lo, aten.lt.Tensor(a, lo), aten.gt.Tensor(a, lo))
        return
    if lo is None:  # minimum(a, hi)
        _split_at_ties(g, a, hi, aten.gt.Tensor(a, hi), aten.lt.Tensor(a, hi))
        return
    half, zero = aten.div.Tensor(g, 2), scalar_zero(g)
    ordered, unordered = aten.lt.Tensor(lo, hi), aten.le.Tensor(lo, hi)
    at_lo = aten.logical_and.default(aten.eq.Tensor(a, lo), ordered)
    at_hi = aten.logical_and.default(aten.eq.Tensor(a, hi), ordered)
    if requires_grad(a):
        tie = aten.logical_or.default(at_lo, at_hi)
        out_of = aten.logical_or.default(aten.lt.Tensor(a, lo), aten.gt.Tensor(a, hi))
        put_grad(a, zero_where(out_of, aten.where.self(tie, half, g)))
    if requires_grad(lo):
        below = aten.logical_and.default(aten.lt.Tensor(a, lo), unordered)
        put_grad(lo, aten.where.self(below, g, aten.where.self(at_lo, half, zero)))
    if requires_grad(hi):
        above = aten.logical_or.default(
            aten.logical_and.default(aten.gt.Tensor(a, hi), unordered), aten.gt.Tensor(lo, hi)
        )
        put_grad(hi, aten.where.self(above, g, aten.where.self(at_hi, half, zero)))


def _one_sided_clamp_rule(op, keeps, strictly_keeps) -> None:
    """clamp_min / clamp_max against a number or a tensor bound: the gradient goes to `a`
    where `keeps(a, bound)` (at the bound itself too, as autograd up to torch 2.13; from
    2.14 `strictly_keeps`, and a tensor bound splits it at ties), to the bound where `a` is
    strictly past it, and nowhere where either is NaN."""

    def one_sided_clamp(a, bound):
        out = op(a, bound)
        g = get_grad(out)
        if TIES_SPLIT and op.id.endswith(".Tensor"):  # a tensor bound: as `maximum`
            _split_at_ties(g, a, bound, strictly_keeps(bound, a), strictly_keeps(a, bound))
            return out
        keep = (strictly_keeps if TIES_SPLIT else keeps)(a, bound)
        if requires_grad(a):
            put_grad(a, only_where(keep, g))
        if requires_grad(bound):  # False for a number; where a is strictly past it (not NaN)
            put_grad(bound, only_where(strictly_keeps(bound, a), g))
        return out

    register(RULES, op, one_sided_clamp)


for _op, _keeps, _strictly in (
    (aten.clamp_min.default, aten.ge.Scalar, aten.gt.Scalar),
    (aten.clamp_min.Tensor, aten.ge.Tensor, aten.gt.Tensor),
    (aten.clamp_max.default, aten.le.Scalar, aten.lt.Scalar),
    (aten.clamp_max.Tensor, aten.le.Tensor, aten.lt.Tensor),
):
    _one_sided_clamp_rule(_op, _keeps, _strictly)


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
