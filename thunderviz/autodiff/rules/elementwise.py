"""Grad rules for elementwise math of one tensor: powers, exponentials and logarithms,
trigonometric, hyperbolic and special functions, and piecewise-constant ops.

Conventions (those of torch.autograd, which the tests compare against):

* `put_grad` un-broadcasts, casts and moves each gradient to its input, so a rule writes the
  gradient at the output's (broadcast) shape and never sums by hand.
* Piecewise-constant ops of float values (`sign`, `floor`, `round`, ...) have a zero
  gradient, not none: autograd returns zeros for them.
* At kinks autograd picks a subgradient; the rules pick the same one (`abs` gives 0 at 0).
"""

from __future__ import annotations

import math

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import (
    backward_kernel,
    conj,
    log_of_number,
    one_minus,
    pass_through,
    unary,
    zero_gradient,
    zero_where,
    zeros_of,
)
from thunderviz.prims import aten

RULES = RuleSet("elementwise")

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


# --- powers, exponentials, logarithms, trigonometric and hyperbolic -------------------------


@RULES.grad(aten.pow.Tensor_Scalar, supports_complex=True)
def pow_tensor_scalar(a, exponent):
    """Complex a: the cotangent times the conjugate derivative, as torch's pow_backward."""
    out = aten.pow.Tensor_Scalar(a, exponent)
    g = get_grad(out)
    if exponent == 0:  # a**0 == 1 everywhere (autograd: zeros, even where a is 0 or inf)
        put_grad(a, zeros_of(a))
    elif exponent == 1:
        put_grad(a, g)
    elif exponent == 2:  # the common square: 2 * a, no pow needed
        put_grad(a, aten.mul.Tensor(g, conj(aten.mul.Tensor(a, 2))))
    else:  # exponent * a**(exponent - 1)
        put_grad(
            a,
            aten.mul.Tensor(
                g, conj(aten.mul.Tensor(aten.pow.Tensor_Scalar(a, exponent - 1), exponent))
            ),
        )
    return out


@RULES.grad(aten.pow.Tensor_Tensor, supports_complex=True)
def pow_tensor_tensor(a, b):
    """Complex: the cotangent times the conjugate derivatives (pow_backward_self and
    pow_backward_exponent), with a in the result's dtype for log(a)."""
    out = aten.pow.Tensor_Tensor(a, b)
    g = get_grad(out)
    if requires_grad(a):
        # b * a**(b-1), defined as 0 where b == 0 (a**0 is constant, even at a == 0)
        slope = aten.mul.Tensor(b, aten.pow.Tensor_Tensor(a, aten.sub.Tensor(b, 1)))
        put_grad(a, zero_where(aten.eq.Scalar(b, 0), aten.mul.Tensor(g, conj(slope))))
    if requires_grad(b):
        # d(a**b)/db = a**b * log(a); at a == 0 with b >= 0 (real), 0**b is flat (0 or 1):
        # use 0 instead of 0 * -inf
        nonnegative = (
            aten.logical_and.default(
                aten.eq.Scalar(aten.imag.default(b), 0), aten.ge.Scalar(aten.real.default(b), 0)
            )
            if b.dtype.is_complex
            else aten.ge.Scalar(b, 0)
        )
        flat = aten.logical_and.default(aten.eq.Scalar(a, 0), nonnegative)
        base = a if a.dtype == out.dtype else aten._to_copy.default(a, dtype=out.dtype)
        db = conj(aten.mul.Tensor(out, aten.log.default(base)))
        put_grad(b, aten.mul.Tensor(g, zero_where(flat, db)))
    return out


@RULES.grad(aten.pow.Scalar)
def pow_scalar(base, exponent):
    out = aten.pow.Scalar(base, exponent)
    g = get_grad(out)
    # d(base**e)/de = base**e * log(base); for base 0 the same flat-at-e>=0 rule as above
    db = aten.mul.Tensor(out, log_of_number(base))
    if base == 0:
        db = zero_where(aten.ge.Scalar(exponent, 0), db)
    put_grad(exponent, aten.mul.Tensor(g, db))
    return out


# Analytic in a: the grad is g times f'(a) (of a and out), so complex tensors get torch's
# g * conj(f'(a)) (`unary(..., holomorphic=True)`). The other rules here are refused for
# complex tensors (registry: supports_complex) unless they say otherwise.
for _op, _grad in (
    (aten.exp.default, lambda g, a, out: aten.mul.Tensor(g, out)),
    # d(e**a - 1)/da = e**a = out + 1
    (aten.expm1.default, lambda g, a, out: aten.mul.Tensor(g, aten.add.Tensor(out, 1))),
    (aten.log.default, lambda g, a, out: aten.div.Tensor(g, a)),
    (aten.log1p.default, lambda g, a, out: aten.div.Tensor(g, aten.add.Tensor(a, 1))),
    # log2(a) = ln(a) / ln 2
    (aten.log2.default, lambda g, a, out: aten.div.Tensor(g, aten.mul.Tensor(a, _LN2))),
    (aten.log10.default, lambda g, a, out: aten.div.Tensor(g, aten.mul.Tensor(a, _LN10))),
    # d sqrt(a) = 1 / (2 sqrt(a)): reuse the output
    (aten.sqrt.default, lambda g, a, out: aten.div.Tensor(g, aten.mul.Tensor(out, 2))),
    # d(1/a) = -1/a**2 = -out**2
    (
        aten.reciprocal.default,
        lambda g, a, out: aten.mul.Tensor(aten.neg.default(g), aten.mul.Tensor(out, out)),
    ),
    (aten.sin.default, lambda g, a, out: aten.mul.Tensor(g, aten.cos.default(a))),
    (aten.cos.default, lambda g, a, out: aten.mul.Tensor(g, aten.neg.default(aten.sin.default(a)))),
    # d tan = 1 + tan**2
    (
        aten.tan.default,
        lambda g, a, out: aten.mul.Tensor(g, aten.add.Tensor(aten.pow.Tensor_Scalar(out, 2), 1)),
    ),
    (aten.sinh.default, lambda g, a, out: aten.mul.Tensor(g, aten.cosh.default(a))),
    (aten.cosh.default, lambda g, a, out: aten.mul.Tensor(g, aten.sinh.default(a))),
    # d asin = 1 / sqrt(1 - a**2)
    (
        aten.asin.default,
        lambda g, a, out: aten.mul.Tensor(g, aten.rsqrt.default(one_minus(aten.mul.Tensor(a, a)))),
    ),
    # d atan = 1 / (1 + a**2)
    (
        aten.atan.default,
        lambda g, a, out: aten.div.Tensor(g, aten.add.Tensor(aten.mul.Tensor(a, a), 1)),
    ),
    # d atanh = 1 / (1 - a**2)
    (
        aten.atanh.default,
        lambda g, a, out: aten.div.Tensor(g, one_minus(aten.pow.Tensor_Scalar(a, 2))),
    ),
):
    unary(RULES, _op, _grad, holomorphic=True)


# Conjugated by hand for complex a, or eager's fused kernels (which conjugate)
for _op, _grad in (
    # d a**(-1/2) = -1/2 a**(-3/2) = -1/2 out**3
    (
        aten.rsqrt.default,
        lambda g, a, out: aten.mul.Tensor(
            aten.mul.Tensor(g, -0.5), conj(aten.pow.Tensor_Scalar(out, 3))
        ),
    ),
    # d tanh = 1 - tanh**2: eager's one fused kernel, g * (1 - out * out), not three ops
    (aten.tanh.default, lambda g, a, out: aten.tanh_backward.default(g, out)),
    # d sigmoid = sigmoid * (1 - sigmoid): eager's fused kernel, g * (1 - out) * out
    (aten.sigmoid.default, lambda g, a, out: aten.sigmoid_backward.default(g, out)),
    # d acos = -1 / sqrt(1 - a**2)
    (
        aten.acos.default,
        lambda g, a, out: aten.mul.Tensor(
            g, conj(aten.neg.default(aten.rsqrt.default(one_minus(aten.mul.Tensor(a, a)))))
        ),
    ),
    # d asinh = 1 / sqrt(a**2 + 1)
    (
        aten.asinh.default,
        lambda g, a, out: aten.mul.Tensor(
            g, conj(aten.rsqrt.default(aten.add.Tensor(aten.pow.Tensor_Scalar(a, 2), 1)))
        ),
    ),
    # d acosh = 1 / sqrt(a**2 - 1)
    (
        aten.acosh.default,
        lambda g, a, out: aten.mul.Tensor(
            g, conj(aten.rsqrt.default(aten.sub.Tensor(aten.mul.Tensor(a, a), 1)))
        ),
    ),
):
    unary(RULES, _op, _grad, supports_complex=True)

# 2**a = e**(a ln 2): analytic, as exp
unary(
    RULES,
    aten.exp2.default,
    lambda g, a, out: aten.mul.Tensor(aten.mul.Tensor(g, out), _LN2),
    holomorphic=True,
)


@RULES.grad(aten.atan2.default)
def atan2(a, b):
    # atan2(a, b) is the angle of the point (b, a): d/da = b / r**2, d/db = -a / r**2.
    # At the origin (or where r**2 underflows) 1 / r**2 is inf; eager takes it as 0 there,
    # so both gradients are 0, not nan.
    out = aten.atan2.default(a, b)
    g = get_grad(out)
    recip = aten.reciprocal.default(aten.add.Tensor(aten.mul.Tensor(a, a), aten.mul.Tensor(b, b)))
    recip = aten.masked_fill.Scalar(recip, aten.eq.Scalar(recip, math.inf), 0.0)
    if requires_grad(a):
        put_grad(a, aten.mul.Tensor(aten.mul.Tensor(g, b), recip))
    if requires_grad(b):
        put_grad(b, aten.mul.Tensor(aten.mul.Tensor(g, aten.neg.default(a)), recip))
    return out


# --- special functions ------------------------------------------------------------------


@RULES.grad(aten.erf.default)
def erf(a):
    # d erf = 2/sqrt(pi) * exp(-a**2)
    out = aten.erf.default(a)
    d = aten.mul.Tensor(
        aten.exp.default(aten.neg.default(aten.pow.Tensor_Scalar(a, 2))), _TWO_OVER_SQRT_PI
    )
    put_grad(a, aten.mul.Tensor(d, get_grad(out)))
    return out


@RULES.grad(aten.erfc.default)
def erfc(a):
    # erfc = 1 - erf
    out = aten.erfc.default(a)
    d = aten.mul.Tensor(
        aten.exp.default(aten.neg.default(aten.pow.Tensor_Scalar(a, 2))), -_TWO_OVER_SQRT_PI
    )
    put_grad(a, aten.mul.Tensor(d, get_grad(out)))
    return out


@RULES.grad(aten.erfinv.default)
def erfinv(a):
    # inverse-function rule: 1 / erf'(out) = sqrt(pi)/2 * exp(out**2)
    out = aten.erfinv.default(a)
    d = aten.mul.Tensor(aten.exp.default(aten.pow.Tensor_Scalar(out, 2)), math.sqrt(math.pi) / 2)
    put_grad(a, aten.mul.Tensor(d, get_grad(out)))
    return out


# logit(a) = log(a / (1 - a)), d/da = 1 / (a (1 - a)). With eps, a is clamped to
# [eps, 1 - eps] first, so the gradient is 0 outside; without, outside [0, 1] is nan.
# Eager's one kernel does all of it.
backward_kernel(RULES, aten.logit.default, aten.logit_backward.default)


@RULES.grad(aten.nan_to_num.default)
def nan_to_num(a, nan=None, posinf=None, neginf=None):
    # identity on finite values; the replaced nan/inf entries are constants
    out = aten.nan_to_num.default(a, nan, posinf, neginf)
    put_grad(a, aten.mul.Tensor(get_grad(out), aten.isfinite.default(a)))
    return out


# --- piecewise-constant and sign-like --------------------------------------------------------


# Flat almost everywhere: autograd gives them a zero gradient (not none).
for _op in (
    aten.sign.default,
    aten.floor.default,
    aten.ceil.default,
    aten.round.default,
    aten.round.decimals,
    aten.trunc.default,
):
    zero_gradient(RULES, _op)


# frac(a) = a - trunc(a): slope 1 between the jumps
pass_through(RULES, aten.frac.default)

# abs and sgn (which see complex numbers): rules/complex_numbers.py


def _copysign_self_grad(g, a, out):
    # copysign(a, b) = a * s with s = out / a in {-1, 1}; 0 where a == 0 (a kink)
    ratio = aten.div.Tensor(out, a)
    return aten.mul.Tensor(g, zero_where(aten.eq.Scalar(a, 0), ratio))


@RULES.grad(aten.copysign.Tensor)
def copysign(a, b):
    out = aten.copysign.Tensor(a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, _copysign_self_grad(g, a, out))
    if requires_grad(b):  # only b's sign matters
        put_grad(b, zeros_of(b))
    return out


@RULES.grad(aten.copysign.Scalar)
def copysign_scalar(a, other):
    out = aten.copysign.Scalar(a, other)
    put_grad(a, _copysign_self_grad(get_grad(out), a, out))
    return out
