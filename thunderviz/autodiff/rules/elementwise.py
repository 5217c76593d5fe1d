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
    conj,
    log_of_number,
    one_minus,
    zero_where,
    zeros_of,
)
from thunderviz.prims import aten

RULES = RuleSet("elementwise")

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


# --- powers, exponentials, logarithms -------------------------------------------------------


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


# Ops whose `grad` below is g times an analytic expression f'(a) of a and out: for complex
# a, torch's gradient g * conj(f'(a)) is conj(grad(conj(g), a, out)). The others are
# refused for complex tensors (registry: supports_complex).
_HOLOMORPHIC = {
    aten.exp.default,
    aten.expm1.default,
    aten.log.default,
    aten.log1p.default,
    aten.log2.default,
    aten.log10.default,
    aten.sqrt.default,
    aten.reciprocal.default,
    aten.sin.default,
    aten.cos.default,
    aten.tan.default,
    aten.sinh.default,
    aten.cosh.default,
    aten.asin.default,
    aten.atan.default,
    aten.atanh.default,
}
# Ops whose `grad` is eager's fused backward kernel, which conjugates for complex tensors.
_CONJUGATING_KERNELS = {aten.tanh.default, aten.sigmoid.default}


def _unary(op, grad) -> None:
    """Register the rule of an elementwise op of one tensor, `out = op(a)`, whose gradient
    is `grad(g, a, out)` for the output's cotangent g (JAX's `defjvp` in spirit: the math in
    one line, the machinery in one place)."""

    def rule(a):
        out = op(a)
        g = get_grad(out)
        if a.dtype.is_complex and op in _HOLOMORPHIC:
            put_grad(a, conj(grad(conj(g), a, out)))
        else:
            put_grad(a, grad(g, a, out))
        return out

    rule.__name__ = op.label
    RULES.grad(op, supports_complex=op in _HOLOMORPHIC or op in _CONJUGATING_KERNELS)(rule)


_unary(aten.exp.default, lambda g, a, out: aten.mul.Tensor(g, out))

# 2**a = e**(a ln 2)
_unary(aten.exp2.default, lambda g, a, out: aten.mul.Tensor(aten.mul.Tensor(g, out), _LN2))

# d(e**a - 1)/da = e**a = out + 1
_unary(aten.expm1.default, lambda g, a, out: aten.mul.Tensor(g, aten.add.Tensor(out, 1)))

_unary(aten.log.default, lambda g, a, out: aten.div.Tensor(g, a))

_unary(aten.log1p.default, lambda g, a, out: aten.div.Tensor(g, aten.add.Tensor(a, 1)))

# log2(a) = ln(a) / ln 2
_unary(aten.log2.default, lambda g, a, out: aten.div.Tensor(g, aten.mul.Tensor(a, _LN2)))

_unary(aten.log10.default, lambda g, a, out: aten.div.Tensor(g, aten.mul.Tensor(a, _LN10)))

# d sqrt(a) = 1 / (2 sqrt(a)): reuse the output
_unary(aten.sqrt.default, lambda g, a, out: aten.div.Tensor(g, aten.mul.Tensor(out, 2)))


@RULES.grad(aten.rsqrt.default, supports_complex=True)
def rsqrt(a):
    # d a**(-1/2) = -1/2 a**(-3/2) = -1/2 out**3 (conjugated for complex a)
    out = aten.rsqrt.default(a)
    put_grad(
        a,
        aten.mul.Tensor(aten.mul.Tensor(get_grad(out), -0.5), conj(aten.pow.Tensor_Scalar(out, 3))),
    )
    return out


# d(1/a) = -1/a**2 = -out**2
_unary(
    aten.reciprocal.default,
    lambda g, a, out: aten.mul.Tensor(aten.neg.default(g), aten.mul.Tensor(out, out)),
)

# --- trigonometric and hyperbolic ------------------------------------------------------------

_unary(aten.sin.default, lambda g, a, out: aten.mul.Tensor(g, aten.cos.default(a)))

_unary(
    aten.cos.default, lambda g, a, out: aten.mul.Tensor(g, aten.neg.default(aten.sin.default(a)))
)


# d tan = 1 + tan**2
_unary(
    aten.tan.default,
    lambda g, a, out: aten.mul.Tensor(g, aten.add.Tensor(aten.pow.Tensor_Scalar(out, 2), 1)),
)


# d tanh = 1 - tanh**2: eager's one fused kernel, g * (1 - out * out), not three ops
_unary(aten.tanh.default, lambda g, a, out: aten.tanh_backward.default(g, out))


_unary(aten.sinh.default, lambda g, a, out: aten.mul.Tensor(g, aten.cosh.default(a)))

_unary(aten.cosh.default, lambda g, a, out: aten.mul.Tensor(g, aten.sinh.default(a)))

# d asin = 1 / sqrt(1 - a**2)
_unary(
    aten.asin.default,
    lambda g, a, out: aten.mul.Tensor(g, aten.rsqrt.default(one_minus(aten.mul.Tensor(a, a)))),
)


@RULES.grad(aten.acos.default, supports_complex=True)
def acos(a):
    # d acos = -1 / sqrt(1 - a**2) (conjugated for complex a)
    out = aten.acos.default(a)
    put_grad(
        a,
        aten.mul.Tensor(
            get_grad(out),
            conj(aten.neg.default(aten.rsqrt.default(one_minus(aten.mul.Tensor(a, a))))),
        ),
    )
    return out


# d atan = 1 / (1 + a**2)
_unary(
    aten.atan.default,
    lambda g, a, out: aten.div.Tensor(g, aten.add.Tensor(aten.mul.Tensor(a, a), 1)),
)


@RULES.grad(aten.asinh.default, supports_complex=True)
def asinh(a):
    # d asinh = 1 / sqrt(a**2 + 1) (conjugated for complex a)
    out = aten.asinh.default(a)
    put_grad(
        a,
        aten.mul.Tensor(
            get_grad(out),
            conj(aten.rsqrt.default(aten.add.Tensor(aten.pow.Tensor_Scalar(a, 2), 1))),
        ),
    )
    return out


@RULES.grad(aten.acosh.default, supports_complex=True)
def acosh(a):
    # d acosh = 1 / sqrt(a**2 - 1) (conjugated for complex a)
    out = aten.acosh.default(a)
    put_grad(
        a,
        aten.mul.Tensor(
            get_grad(out), conj(aten.rsqrt.default(aten.sub.Tensor(aten.mul.Tensor(a, a), 1)))
        ),
    )
    return out


# d atanh = 1 / (1 - a**2)
_unary(
    aten.atanh.default,
    lambda g, a, out: aten.div.Tensor(g, one_minus(aten.pow.Tensor_Scalar(a, 2))),
)


@RULES.grad(aten.atan2.default)
def atan2(a, b):
    # atan2(a, b) is the angle of the point (b, a): d/da = b / r**2, d/db = -a / r**2
    out = aten.atan2.default(a, b)
    g = get_grad(out)
    recip = aten.reciprocal.default(aten.add.Tensor(aten.mul.Tensor(a, a), aten.mul.Tensor(b, b)))
    if requires_grad(a):
        put_grad(a, aten.mul.Tensor(aten.mul.Tensor(g, b), recip))
    if requires_grad(b):
        put_grad(b, aten.mul.Tensor(aten.mul.Tensor(g, aten.neg.default(a)), recip))
    return out


# --- special functions ------------------------------------------------------------------

# d sigmoid = sigmoid * (1 - sigmoid): eager's fused kernel, g * (1 - out) * out
_unary(aten.sigmoid.default, lambda g, a, out: aten.sigmoid_backward.default(g, out))


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


@RULES.grad(aten.logit.default)
def logit(a, eps=None):
    # logit(a) = log(a / (1 - a)), d/da = 1 / (a (1 - a)). With eps, a is clamped to
    # [eps, 1 - eps] first, so the gradient is 0 outside; without, outside [0, 1] is nan.
    # Eager's one kernel does all of it.
    out = aten.logit.default(a, eps)
    put_grad(a, aten.logit_backward.default(get_grad(out), a, eps))
    return out


@RULES.grad(aten.nan_to_num.default)
def nan_to_num(a, nan=None, posinf=None, neginf=None):
    # identity on finite values; the replaced nan/inf entries are constants
    out = aten.nan_to_num.default(a, nan, posinf, neginf)
    put_grad(a, aten.mul.Tensor(get_grad(out), aten.isfinite.default(a)))
    return out


# --- piecewise-constant and sign-like --------------------------------------------------------


def _zero_grad_rule(op):
    @RULES.grad(op)
    def zero_grad(a, *args, **kwargs):
        out = op(a, *args, **kwargs)
        get_grad(out)
        put_grad(a, zeros_of(a))
        return out

    zero_grad.__name__ = f"{op.label}_zero_grad"
    return zero_grad


# Flat almost everywhere: autograd gives them a zero gradient (not none).
for _op in (
    aten.sign.default,
    aten.floor.default,
    aten.ceil.default,
    aten.round.default,
    aten.round.decimals,
    aten.trunc.default,
):
    _zero_grad_rule(_op)


# frac(a) = a - trunc(a): slope 1 between the jumps
_unary(aten.frac.default, lambda g, a, out: g)

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
