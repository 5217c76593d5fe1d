"""Grad rules for elementwise arithmetic of two operands: add, sub, mul, div (with
rounding modes), modular arithmetic, blends and fused multiply-adds.

`put_grad` un-broadcasts, casts and moves each gradient to its input, so a rule writes the
gradient at the output's (broadcast) shape and never sums by hand.

Complex tensors: as torch's derivatives.yaml, the cotangent is multiplied by the conjugate
of the derivative (`mul`: grad * other.conj()); `put_grad` keeps the real part for a real
input of a complex result. Ops torch defines for real numbers only say so
(`supports_complex=False`).
"""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import (
    conj,
    one_minus,
    pass_through,
    register,
    scaled,
    unary,
    zero_where,
    zeros_of,
)
from thunderviz.prims import aten

RULES = RuleSet("arithmetic", supports_complex=True)


# --- arithmetic ---------------------------------------------------------------------------


@RULES.grad(aten.add.Tensor)
def add(a, b, **kwargs):
    alpha = kwargs.get("alpha", 1)
    out = aten.add.Tensor(a, b, **kwargs)
    g = get_grad(out)
    put_grad(a, g)
    if requires_grad(b):
        put_grad(b, scaled(g, alpha))
    return out


@RULES.grad(aten.sub.Tensor)
def sub(a, b, **kwargs):
    alpha = kwargs.get("alpha", 1)
    out = aten.sub.Tensor(a, b, **kwargs)
    g = get_grad(out)
    put_grad(a, g)
    if requires_grad(b):
        put_grad(b, aten.neg.default(g) if alpha == 1 else aten.mul.Tensor(g, -alpha))
    return out


@RULES.grad(aten.rsub.Tensor)
def rsub(a, b, **kwargs):
    alpha = kwargs.get("alpha", 1)
    # rsub(a, b) = b - alpha * a
    out = aten.rsub.Tensor(a, b, **kwargs)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.neg.default(g) if alpha == 1 else aten.mul.Tensor(g, -alpha))
    put_grad(b, g)
    return out


@RULES.grad(aten.rsub.Scalar)
def rsub_scalar(a, other, alpha=1):
    out = aten.rsub.Scalar(a, other, alpha)
    g = get_grad(out)
    put_grad(a, aten.neg.default(g) if alpha == 1 else aten.mul.Tensor(g, -alpha))
    return out


@RULES.grad(aten.mul.Tensor)
def mul(a, b):
    out = aten.mul.Tensor(a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.mul.Tensor(g, conj(b)))
    if requires_grad(b):
        put_grad(b, aten.mul.Tensor(g, conj(a)))
    return out


@RULES.grad(aten.mul.Scalar)
def mul_scalar(a, other):
    out = aten.mul.Scalar(a, other)
    put_grad(a, aten.mul.Tensor(get_grad(out), conj(other)))
    return out


def _div_grads(a, b, g):
    # d(a/b)/da = 1/b; d(a/b)/db = -a/b^2, computed as -(a/b)/b like autograd (stabler
    # than -a/(b*b) when b*b would overflow or underflow).
    if requires_grad(a):
        put_grad(a, aten.div.Tensor(g, conj(b)))
    if requires_grad(b):
        put_grad(
            b, aten.mul.Tensor(aten.neg.default(g), conj(aten.div.Tensor(aten.div.Tensor(a, b), b)))
        )


@RULES.grad(aten.div.Tensor)
def div(a, b):
    out = aten.div.Tensor(a, b)
    _div_grads(a, b, get_grad(out))
    return out


@RULES.grad(aten.div.Scalar)
def div_scalar(a, other):
    out = aten.div.Scalar(a, other)
    put_grad(a, aten.div.Tensor(get_grad(out), conj(other)))
    return out


@RULES.grad(aten.div.Tensor_mode)
def div_mode(a, b, *, rounding_mode):
    out = aten.div.Tensor_mode(a, b, rounding_mode=rounding_mode)
    g = get_grad(out)
    if rounding_mode is None:
        _div_grads(a, b, g)
    else:  # trunc/floor division is piecewise constant
        for x in (a, b):
            if requires_grad(x):
                put_grad(x, zeros_of(x))
    return out


@RULES.grad(aten.div.Scalar_mode)
def div_scalar_mode(a, other, *, rounding_mode):
    out = aten.div.Scalar_mode(a, other, rounding_mode=rounding_mode)
    g = get_grad(out)
    put_grad(a, aten.div.Tensor(g, conj(other)) if rounding_mode is None else zeros_of(a))
    return out


@RULES.grad(aten.floor_divide.default)
def floor_divide(a, b):
    out = aten.floor_divide.default(a, b)
    get_grad(out)
    for x in (a, b):
        if requires_grad(x):
            put_grad(x, zeros_of(x))
    return out


unary(RULES, aten.neg.default, lambda g, a, out: aten.neg.default(g))


# --- modular arithmetic ------------------------------------------------------------------

# fmod(a, b) = a - b * trunc(a / b) and remainder(a, b) = a - b * floor(a / b): slope 1 in
# a and -(the rounded quotient) in b between the jumps.


def _modular_rule(op, rounding: str) -> None:
    """fmod ("trunc") and remainder ("floor") of two tensors (real numbers only: torch has
    no complex fmod or remainder)."""

    def modular(a, b):
        out = op(a, b)
        g = get_grad(out)
        put_grad(a, g)
        if requires_grad(b):
            q = aten.div.Tensor_mode(a, b, rounding_mode=rounding)
            put_grad(b, aten.mul.Tensor(aten.neg.default(g), q))
        return out

    register(RULES, op, modular, supports_complex=False)


_modular_rule(aten.fmod.Tensor, "trunc")
_modular_rule(aten.remainder.Tensor, "floor")
# the other operands are numbers, the slope in `a` is 1 (a + 2, fmod(a, 3))
for _op in (aten.add.Scalar, aten.sub.Scalar):
    pass_through(RULES, _op)
for _op in (aten.fmod.Scalar, aten.remainder.Scalar):
    pass_through(RULES, _op, supports_complex=False)


@RULES.grad(aten.remainder.Scalar_Tensor, supports_complex=False)
def remainder_scalar_tensor(a, b):
    out = aten.remainder.Scalar_Tensor(a, b)
    g = get_grad(out)
    num = aten.scalar_tensor.default(a, dtype=out.dtype, device=out.device)
    q = aten.div.Tensor_mode(num, b, rounding_mode="floor")
    put_grad(b, aten.mul.Tensor(aten.neg.default(g), q))
    return out


# --- blends and fused arithmetic ---------------------------------------------------------


@RULES.grad(aten.lerp.Scalar)
def lerp(a, end, weight):
    # lerp = a + w (end - a) = (1 - w) a + w end
    out = aten.lerp.Scalar(a, end, weight)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.mul.Tensor(g, conj(1 - weight)))
    if requires_grad(end):
        put_grad(end, aten.mul.Tensor(g, conj(weight)))
    return out


@RULES.grad(aten.lerp.Tensor)
def lerp_tensor(a, end, weight):
    out = aten.lerp.Tensor(a, end, weight)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.mul.Tensor(g, conj(one_minus(weight))))
    if requires_grad(end):
        put_grad(end, aten.mul.Tensor(g, conj(weight)))
    if requires_grad(weight):
        put_grad(weight, aten.mul.Tensor(g, conj(aten.sub.Tensor(end, a))))
    return out


@RULES.grad(aten.addcmul.default)
def addcmul(a, t1, t2, **kwargs):
    # a + value * t1 * t2
    out = aten.addcmul.default(a, t1, t2, **kwargs)
    value = kwargs.get("value", 1)
    g = get_grad(out)
    put_grad(a, g)
    if requires_grad(t1):
        put_grad(t1, aten.mul.Tensor(g, conj(scaled(t2, value))))
    if requires_grad(t2):
        put_grad(t2, aten.mul.Tensor(g, conj(scaled(t1, value))))
    return out


@RULES.grad(aten.addcdiv.default)
def addcdiv(a, t1, t2, **kwargs):
    # a + value * t1 / t2: d/dt1 = value / t2, d/dt2 = -value * t1 / t2**2
    out = aten.addcdiv.default(a, t1, t2, **kwargs)
    value = kwargs.get("value", 1)
    g = get_grad(out)
    put_grad(a, g)
    if requires_grad(t1):
        put_grad(t1, aten.div.Tensor(scaled(g, conj(value)), conj(t2)))
    if requires_grad(t2):
        put_grad(
            t2,
            aten.mul.Tensor(
                aten.neg.default(g),
                conj(aten.div.Tensor(scaled(t1, value), aten.mul.Tensor(t2, t2))),
            ),
        )
    return out


@RULES.grad(aten.hypot.default, supports_complex=False)
def hypot(a, b):
    # hypot = sqrt(a**2 + b**2): d/da = a / hypot
    out = aten.hypot.default(a, b)
    g = get_grad(out)
    for x in (a, b):
        if requires_grad(x):
            put_grad(x, aten.div.Tensor(aten.mul.Tensor(g, x), out))
    return out


@RULES.grad(aten.logaddexp.default, supports_complex=False)
def logaddexp(a, b):
    # log(e**a + e**b): d/da = e**a / (e**a + e**b) = 1 / (1 + e**(b - a))
    out = aten.logaddexp.default(a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.div.Tensor(g, aten.add.Tensor(aten.exp.default(aten.sub.Tensor(b, a)), 1)))
    if requires_grad(b):
        put_grad(b, aten.div.Tensor(g, aten.add.Tensor(aten.exp.default(aten.sub.Tensor(a, b)), 1)))
    return out


@RULES.grad(aten.xlogy.Tensor, supports_complex=False)
def xlogy(a, b):
    # a * log(b), defined as 0 at a == 0. d/da = log(b), taken as 0 where a == 0 and
    # b <= 0 (log undefined: autograd uses the derivative along a == 0); d/db = a / b
    out = aten.xlogy.Tensor(a, b)
    g = get_grad(out)
    if requires_grad(a):
        da = aten.xlogy.Tensor(g, b)
        undefined = aten.logical_and.default(aten.eq.Scalar(a, 0), aten.le.Scalar(b, 0))
        put_grad(a, zero_where(undefined, da))
    if requires_grad(b):
        put_grad(b, aten.div.Tensor(aten.mul.Tensor(g, a), b))
    return out


@RULES.grad(aten.xlogy.Scalar_Other, supports_complex=False)
def xlogy_scalar_other(a, other):
    out = aten.xlogy.Scalar_Other(a, other)
    da = aten.xlogy.Scalar_Other(get_grad(out), other)
    if not other > 0:
        da = zero_where(aten.eq.Scalar(a, 0), da)
    put_grad(a, da)
    return out


@RULES.grad(aten.xlogy.Scalar_Self, supports_complex=False)
def xlogy_scalar_self(a, b):
    out = aten.xlogy.Scalar_Self(a, b)
    put_grad(b, aten.div.Tensor(aten.mul.Tensor(get_grad(out), a), b))
    return out
