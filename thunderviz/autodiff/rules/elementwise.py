"""Grad rules for elementwise ops: unary math, binary arithmetic, selection, casts and copies,
and the comparisons, logical ops and factories that carry no gradient.

Conventions (those of torch.autograd, which the tests compare against):

* `put_grad` un-broadcasts, casts and moves each gradient to its input, so a rule writes the
  gradient at the output's (broadcast) shape and never sums by hand.
* Piecewise-constant ops of float values (`sign`, `floor`, `round`, `div` with a rounding
  mode, ...) have a zero gradient, not none: autograd returns zeros for them.
* Ops whose output does not depend on the input's values at all (factories like
  `zeros_like`, `fill`, random draws like `bernoulli`) carry no gradient.
* At kinks autograd picks a subgradient; the rules pick the same one (`clamp` lets the
  gradient through at its bounds, `maximum` splits it in half at ties, `abs` gives 0 at 0).
"""

from __future__ import annotations

import math

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.prims import aten

RULES = RuleSet("elementwise")

_LN2 = math.log(2.0)
_LN10 = math.log(10.0)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


# --- small math helpers -----------------------------------------------------------------

def _zero(like):
    """A 0-dim zero with `like`'s dtype and device, for `where(cond, g, 0)`."""
    return aten.scalar_tensor.default(0.0, dtype=like.dtype, device=like.device)


def _zeros(x):
    """A zero gradient for input `x` (autograd's `zeros_like(grad)` for flat functions)."""
    return aten.full.default(list(x.shape), 0.0, dtype=x.dtype, device=x.device)


def _one_minus(x):
    """1 - x, with Core ATen ops only."""
    return aten.add.Tensor(aten.neg.default(x), 1)


def _scaled(g, c):
    """g * c for a Python number c, skipping the multiply when c is 1."""
    return g if c == 1 else aten.mul.Tensor(g, c)


def _log_of_number(base):
    """log(base) for a Python number, as IEEE math has it: -inf at 0, nan below."""
    if base > 0:
        return math.log(base)
    return -math.inf if base == 0 else math.nan


# --- arithmetic ---------------------------------------------------------------------------

@RULES.grad(aten.add.Tensor)
def add(a, b, **kwargs):
    alpha = kwargs.get("alpha", 1)
    out = aten.add.Tensor(a, b, **kwargs)
    g = get_grad(out)
    put_grad(a, g)
    if requires_grad(b):
        put_grad(b, _scaled(g, alpha))
    return out


@RULES.grad(aten.add.Scalar)
def add_scalar(a, other, alpha=1):
    out = aten.add.Scalar(a, other, alpha)
    put_grad(a, get_grad(out))
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


@RULES.grad(aten.sub.Scalar)
def sub_scalar(a, other, alpha=1):
    out = aten.sub.Scalar(a, other, alpha)
    put_grad(a, get_grad(out))
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
        put_grad(a, aten.mul.Tensor(g, b))
    if requires_grad(b):
        put_grad(b, aten.mul.Tensor(g, a))
    return out


@RULES.grad(aten.mul.Scalar)
def mul_scalar(a, other):
    out = aten.mul.Scalar(a, other)
    put_grad(a, aten.mul.Tensor(get_grad(out), other))
    return out


def _div_grads(a, b, g):
    # d(a/b)/da = 1/b; d(a/b)/db = -a/b^2, computed as -(a/b)/b like autograd (stabler
    # than -a/(b*b) when b*b would overflow or underflow).
    if requires_grad(a):
        put_grad(a, aten.div.Tensor(g, b))
    if requires_grad(b):
        put_grad(b, aten.mul.Tensor(aten.neg.default(g), aten.div.Tensor(aten.div.Tensor(a, b), b)))


@RULES.grad(aten.div.Tensor)
def div(a, b):
    out = aten.div.Tensor(a, b)
    _div_grads(a, b, get_grad(out))
    return out


@RULES.grad(aten.div.Scalar)
def div_scalar(a, other):
    out = aten.div.Scalar(a, other)
    put_grad(a, aten.div.Tensor(get_grad(out), other))
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
                put_grad(x, _zeros(x))
    return out


@RULES.grad(aten.div.Scalar_mode)
def div_scalar_mode(a, other, *, rounding_mode):
    out = aten.div.Scalar_mode(a, other, rounding_mode=rounding_mode)
    g = get_grad(out)
    put_grad(a, aten.div.Tensor(g, other) if rounding_mode is None else _zeros(a))
    return out


@RULES.grad(aten.floor_divide.default)
def floor_divide(a, b):
    out = aten.floor_divide.default(a, b)
    get_grad(out)
    for x in (a, b):
        if requires_grad(x):
            put_grad(x, _zeros(x))
    return out


@RULES.grad(aten.neg.default)
def neg(a):
    out = aten.neg.default(a)
    put_grad(a, aten.neg.default(get_grad(out)))
    return out


# --- powers, exponentials, logarithms -------------------------------------------------------

@RULES.grad(aten.pow.Tensor_Scalar)
def pow_tensor_scalar(a, exponent):
    out = aten.pow.Tensor_Scalar(a, exponent)
    g = get_grad(out)
    if exponent == 0:  # a**0 == 1 everywhere (autograd: zeros, even where a is 0 or inf)
        put_grad(a, _zeros(a))
    elif exponent == 1:
        put_grad(a, g)
    elif exponent == 2:  # the common square: 2 * a, no pow needed
        put_grad(a, aten.mul.Tensor(g, aten.mul.Tensor(a, 2)))
    else:  # exponent * a**(exponent - 1)
        put_grad(a, aten.mul.Tensor(
            g, aten.mul.Tensor(aten.pow.Tensor_Scalar(a, exponent - 1), exponent)))
    return out


@RULES.grad(aten.pow.Tensor_Tensor)
def pow_tensor_tensor(a, b):
    out = aten.pow.Tensor_Tensor(a, b)
    g = get_grad(out)
    if requires_grad(a):
        # b * a**(b-1), defined as 0 where b == 0 (a**0 is constant, even at a == 0)
        da = aten.mul.Tensor(g, aten.mul.Tensor(b, aten.pow.Tensor_Tensor(a, aten.sub.Tensor(b, 1))))
        put_grad(a, aten.where.self(aten.eq.Scalar(b, 0), _zero(da), da))
    if requires_grad(b):
        # d(a**b)/db = a**b * log(a); at a == 0 with b >= 0, 0**b is flat (0 or 1): use 0
        # instead of 0 * -inf
        flat = aten.logical_and.default(aten.eq.Scalar(a, 0), aten.ge.Scalar(b, 0))
        db = aten.mul.Tensor(out, aten.log.default(a))
        put_grad(b, aten.mul.Tensor(g, aten.where.self(flat, _zero(db), db)))
    return out


@RULES.grad(aten.pow.Scalar)
def pow_scalar(base, exponent):
    out = aten.pow.Scalar(base, exponent)
    g = get_grad(out)
    # d(base**e)/de = base**e * log(base); for base 0 the same flat-at-e>=0 rule as above
    db = aten.mul.Tensor(out, _log_of_number(base))
    if base == 0:
        db = aten.where.self(aten.ge.Scalar(exponent, 0), _zero(db), db)
    put_grad(exponent, aten.mul.Tensor(g, db))
    return out


@RULES.grad(aten.exp.default)
def exp(a):
    out = aten.exp.default(a)
    put_grad(a, aten.mul.Tensor(get_grad(out), out))
    return out


@RULES.grad(aten.exp2.default)
def exp2(a):
    # 2**a = e**(a ln 2)
    out = aten.exp2.default(a)
    put_grad(a, aten.mul.Tensor(aten.mul.Tensor(get_grad(out), out), _LN2))
    return out


@RULES.grad(aten.expm1.default)
def expm1(a):
    # d(e**a - 1)/da = e**a = out + 1
    out = aten.expm1.default(a)
    put_grad(a, aten.mul.Tensor(get_grad(out), aten.add.Tensor(out, 1)))
    return out


@RULES.grad(aten.log.default)
def log(a):
    out = aten.log.default(a)
    put_grad(a, aten.div.Tensor(get_grad(out), a))
    return out


@RULES.grad(aten.log1p.default)
def log1p(a):
    out = aten.log1p.default(a)
    put_grad(a, aten.div.Tensor(get_grad(out), aten.add.Tensor(a, 1)))
    return out


@RULES.grad(aten.log2.default)
def log2(a):
    # log2(a) = ln(a) / ln 2
    out = aten.log2.default(a)
    put_grad(a, aten.div.Tensor(get_grad(out), aten.mul.Tensor(a, _LN2)))
    return out


@RULES.grad(aten.log10.default)
def log10(a):
    out = aten.log10.default(a)
    put_grad(a, aten.div.Tensor(get_grad(out), aten.mul.Tensor(a, _LN10)))
    return out


@RULES.grad(aten.sqrt.default)
def sqrt(a):
    # d sqrt(a) = 1 / (2 sqrt(a)): reuse the output
    out = aten.sqrt.default(a)
    put_grad(a, aten.div.Tensor(get_grad(out), aten.mul.Tensor(out, 2)))
    return out


@RULES.grad(aten.rsqrt.default)
def rsqrt(a):
    # d a**(-1/2) = -1/2 a**(-3/2) = -1/2 out**3
    out = aten.rsqrt.default(a)
    put_grad(a, aten.mul.Tensor(aten.mul.Tensor(get_grad(out), -0.5),
                                aten.pow.Tensor_Scalar(out, 3)))
    return out


@RULES.grad(aten.reciprocal.default)
def reciprocal(a):
    # d(1/a) = -1/a**2 = -out**2
    out = aten.reciprocal.default(a)
    put_grad(a, aten.mul.Tensor(aten.neg.default(get_grad(out)), aten.mul.Tensor(out, out)))
    return out


# --- trigonometric and hyperbolic ------------------------------------------------------------

@RULES.grad(aten.sin.default)
def sin(a):
    out = aten.sin.default(a)
    put_grad(a, aten.mul.Tensor(get_grad(out), aten.cos.default(a)))
    return out


@RULES.grad(aten.cos.default)
def cos(a):
    out = aten.cos.default(a)
    put_grad(a, aten.mul.Tensor(get_grad(out), aten.neg.default(aten.sin.default(a))))
    return out


@RULES.grad(aten.tan.default)
def tan(a):
    # d tan = 1 + tan**2
    out = aten.tan.default(a)
    put_grad(a, aten.mul.Tensor(get_grad(out), aten.add.Tensor(aten.pow.Tensor_Scalar(out, 2), 1)))
    return out


@RULES.grad(aten.tanh.default)
def tanh(a):
    # d tanh = 1 - tanh**2
    out = aten.tanh.default(a)
    g = get_grad(out)
    put_grad(a, aten.mul.Tensor(g, _one_minus(aten.mul.Tensor(out, out))))
    return out


@RULES.grad(aten.sinh.default)
def sinh(a):
    out = aten.sinh.default(a)
    put_grad(a, aten.mul.Tensor(get_grad(out), aten.cosh.default(a)))
    return out


@RULES.grad(aten.cosh.default)
def cosh(a):
    out = aten.cosh.default(a)
    put_grad(a, aten.mul.Tensor(get_grad(out), aten.sinh.default(a)))
    return out


@RULES.grad(aten.asin.default)
def asin(a):
    # d asin = 1 / sqrt(1 - a**2)
    out = aten.asin.default(a)
    put_grad(a, aten.mul.Tensor(get_grad(out), aten.rsqrt.default(_one_minus(aten.mul.Tensor(a, a)))))
    return out


@RULES.grad(aten.acos.default)
def acos(a):
    # d acos = -1 / sqrt(1 - a**2)
    out = aten.acos.default(a)
    put_grad(a, aten.mul.Tensor(
        get_grad(out), aten.neg.default(aten.rsqrt.default(_one_minus(aten.mul.Tensor(a, a))))))
    return out


@RULES.grad(aten.atan.default)
def atan(a):
    # d atan = 1 / (1 + a**2)
    out = aten.atan.default(a)
    put_grad(a, aten.div.Tensor(get_grad(out), aten.add.Tensor(aten.mul.Tensor(a, a), 1)))
    return out


@RULES.grad(aten.asinh.default)
def asinh(a):
    # d asinh = 1 / sqrt(a**2 + 1)
    out = aten.asinh.default(a)
    put_grad(a, aten.mul.Tensor(
        get_grad(out), aten.rsqrt.default(aten.add.Tensor(aten.pow.Tensor_Scalar(a, 2), 1))))
    return out


@RULES.grad(aten.acosh.default)
def acosh(a):
    # d acosh = 1 / sqrt(a**2 - 1)
    out = aten.acosh.default(a)
    put_grad(a, aten.mul.Tensor(
        get_grad(out), aten.rsqrt.default(aten.sub.Tensor(aten.mul.Tensor(a, a), 1))))
    return out


@RULES.grad(aten.atanh.default)
def atanh(a):
    # d atanh = 1 / (1 - a**2)
    out = aten.atanh.default(a)
    put_grad(a, aten.div.Tensor(get_grad(out), _one_minus(aten.pow.Tensor_Scalar(a, 2))))
    return out


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

@RULES.grad(aten.sigmoid.default)
def sigmoid(a):
    # d sigmoid = sigmoid * (1 - sigmoid)
    out = aten.sigmoid.default(a)
    put_grad(a, aten.mul.Tensor(aten.mul.Tensor(get_grad(out), _one_minus(out)), out))
    return out


@RULES.grad(aten.erf.default)
def erf(a):
    # d erf = 2/sqrt(pi) * exp(-a**2)
    out = aten.erf.default(a)
    d = aten.mul.Tensor(aten.exp.default(aten.neg.default(aten.pow.Tensor_Scalar(a, 2))), _TWO_OVER_SQRT_PI)
    put_grad(a, aten.mul.Tensor(d, get_grad(out)))
    return out


@RULES.grad(aten.erfc.default)
def erfc(a):
    # erfc = 1 - erf
    out = aten.erfc.default(a)
    d = aten.mul.Tensor(aten.exp.default(aten.neg.default(aten.pow.Tensor_Scalar(a, 2))), -_TWO_OVER_SQRT_PI)
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
    out = aten.logit.default(a, eps)
    g = get_grad(out)
    d = aten.div.Tensor(g, aten.mul.Tensor(a, _one_minus(a)))
    lo, hi = (0.0, 1.0) if eps is None else (eps, 1.0 - eps)
    inside = aten.logical_and.default(aten.ge.Scalar(a, lo), aten.le.Scalar(a, hi))
    outside = _zero(d) if eps is not None else aten.scalar_tensor.default(
        math.nan, dtype=d.dtype, device=d.device)
    put_grad(a, aten.where.self(inside, d, outside))
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
        put_grad(a, _zeros(a))
        return out
    zero_grad.__name__ = f"{op.label}_zero_grad"
    return zero_grad


# Flat almost everywhere: autograd gives them a zero gradient (not none).
for _op in (aten.sign.default, aten.sgn.default, aten.floor.default, aten.ceil.default,
            aten.round.default, aten.round.decimals, aten.trunc.default):
    _zero_grad_rule(_op)


@RULES.grad(aten.frac.default)
def frac(a):
    # frac(a) = a - trunc(a): slope 1 between the jumps
    out = aten.frac.default(a)
    put_grad(a, get_grad(out))
    return out


@RULES.grad(aten.abs.default)
def abs_(a):
    # d|a| = sign(a), 0 at 0
    out = aten.abs.default(a)
    put_grad(a, aten.mul.Tensor(get_grad(out), aten.sign.default(a)))
    return out


def _copysign_self_grad(g, a, out):
    # copysign(a, b) = a * s with s = out / a in {-1, 1}; 0 where a == 0 (a kink)
    ratio = aten.div.Tensor(out, a)
    return aten.mul.Tensor(g, aten.where.self(aten.eq.Scalar(a, 0), _zero(ratio), ratio))


@RULES.grad(aten.copysign.Tensor)
def copysign(a, b):
    out = aten.copysign.Tensor(a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, _copysign_self_grad(g, a, out))
    if requires_grad(b):  # only b's sign matters
        put_grad(b, _zeros(b))
    return out


@RULES.grad(aten.copysign.Scalar)
def copysign_scalar(a, other):
    out = aten.copysign.Scalar(a, other)
    put_grad(a, _copysign_self_grad(get_grad(out), a, out))
    return out


# --- selection: max/min, clamp, where, masked_fill ----------------------------------------

def _split_at_ties(g, a, b, loses_a, loses_b):
    # the gradient goes to the selected operand; at ties (a == b) each gets half
    half = aten.where.self(aten.eq.Tensor(a, b), aten.div.Tensor(g, 2), g)
    if requires_grad(a):
        put_grad(a, aten.where.self(loses_a, _zero(half), half))
    if requires_grad(b):
        put_grad(b, aten.where.self(loses_b, _zero(half), half))


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
    zero = _zero(g)
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
    put_grad(a, g if mask is None else aten.where.self(mask, g, _zero(g)))
    return out


@RULES.grad(aten.clamp.Tensor)
def clamp_tensor(a, min=None, max=None):
    # clamp(a, lo, hi) = minimum(maximum(a, lo), hi): hi wins when lo > hi
    out = aten.clamp.Tensor(a, min, max)
    g = get_grad(out)
    zero = _zero(g)
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


@RULES.grad(aten.clamp_min.default)
def clamp_min(a, min):
    out = aten.clamp_min.default(a, min)
    g = get_grad(out)
    put_grad(a, aten.where.self(aten.ge.Scalar(a, min), g, _zero(g)))
    return out


@RULES.grad(aten.clamp_min.Tensor)
def clamp_min_tensor(a, min):
    out = aten.clamp_min.Tensor(a, min)
    g = get_grad(out)
    keep = aten.ge.Tensor(a, min)
    if requires_grad(a):
        put_grad(a, aten.where.self(keep, g, _zero(g)))
    if requires_grad(min):
        put_grad(min, aten.where.self(keep, _zero(g), g))
    return out


@RULES.grad(aten.clamp_max.default)
def clamp_max(a, max):
    out = aten.clamp_max.default(a, max)
    g = get_grad(out)
    put_grad(a, aten.where.self(aten.le.Scalar(a, max), g, _zero(g)))
    return out


@RULES.grad(aten.clamp_max.Tensor)
def clamp_max_tensor(a, max):
    out = aten.clamp_max.Tensor(a, max)
    g = get_grad(out)
    keep = aten.le.Tensor(a, max)
    if requires_grad(a):
        put_grad(a, aten.where.self(keep, g, _zero(g)))
    if requires_grad(max):
        put_grad(max, aten.where.self(keep, _zero(g), g))
    return out


@RULES.grad(aten.where.self)
def where(cond, a, b):
    out = aten.where.self(cond, a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.where.self(cond, g, _zero(g)))
    if requires_grad(b):
        put_grad(b, aten.where.self(cond, _zero(g), g))
    return out


@RULES.grad(aten.where.ScalarSelf)
def where_scalar_self(cond, a, b):
    out = aten.where.ScalarSelf(cond, a, b)
    g = get_grad(out)
    put_grad(b, aten.where.self(cond, _zero(g), g))
    return out


@RULES.grad(aten.where.ScalarOther)
def where_scalar_other(cond, a, b):
    out = aten.where.ScalarOther(cond, a, b)
    g = get_grad(out)
    put_grad(a, aten.where.self(cond, g, _zero(g)))
    return out


@RULES.grad(aten.masked_fill.Scalar)
def masked_fill(a, mask, value):
    out = aten.masked_fill.Scalar(a, mask, value)
    g = get_grad(out)
    put_grad(a, aten.where.self(mask, _zero(g), g))
    return out


@RULES.grad(aten.masked_fill.Tensor)
def masked_fill_tensor(a, mask, value):
    # `value` (0-dim) is written at every masked place: its gradient is the sum there
    # (put_grad does the sum)
    out = aten.masked_fill.Tensor(a, mask, value)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.where.self(mask, _zero(g), g))
    if requires_grad(value):
        put_grad(value, aten.where.self(mask, g, _zero(g)))
    return out


# --- modular arithmetic ------------------------------------------------------------------

# fmod(a, b) = a - b * trunc(a / b) and remainder(a, b) = a - b * floor(a / b): slope 1 in
# a and -(the rounded quotient) in b between the jumps.

def _modular_rule(op, rounding: str):
    """fmod ("trunc") and remainder ("floor") of two tensors."""
    def modular(a, b):
        out = op(a, b)
        g = get_grad(out)
        put_grad(a, g)
        if requires_grad(b):
            q = aten.div.Tensor_mode(a, b, rounding_mode=rounding)
            put_grad(b, aten.mul.Tensor(aten.neg.default(g), q))
        return out

    modular.__name__ = op.label
    return modular


def _slope_one_rule(op):
    """fmod / remainder by a number: the gradient passes through unchanged."""
    def modular_by_number(a, other):
        out = op(a, other)
        put_grad(a, get_grad(out))
        return out

    modular_by_number.__name__ = f"{op.label}_scalar"
    return modular_by_number


RULES.grad(aten.fmod.Tensor)(_modular_rule(aten.fmod.Tensor, "trunc"))
RULES.grad(aten.remainder.Tensor)(_modular_rule(aten.remainder.Tensor, "floor"))
RULES.grad(aten.fmod.Scalar)(_slope_one_rule(aten.fmod.Scalar))
RULES.grad(aten.remainder.Scalar)(_slope_one_rule(aten.remainder.Scalar))


@RULES.grad(aten.remainder.Scalar_Tensor)
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
        put_grad(a, aten.mul.Tensor(g, 1 - weight))
    if requires_grad(end):
        put_grad(end, aten.mul.Tensor(g, weight))
    return out


@RULES.grad(aten.lerp.Tensor)
def lerp_tensor(a, end, weight):
    out = aten.lerp.Tensor(a, end, weight)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.mul.Tensor(g, _one_minus(weight)))
    if requires_grad(end):
        put_grad(end, aten.mul.Tensor(g, weight))
    if requires_grad(weight):
        put_grad(weight, aten.mul.Tensor(g, aten.sub.Tensor(end, a)))
    return out


@RULES.grad(aten.addcmul.default)
def addcmul(a, t1, t2, **kwargs):
    # a + value * t1 * t2
    out = aten.addcmul.default(a, t1, t2, **kwargs)
    value = kwargs.get("value", 1)
    g = get_grad(out)
    put_grad(a, g)
    if requires_grad(t1):
        put_grad(t1, aten.mul.Tensor(g, _scaled(t2, value)))
    if requires_grad(t2):
        put_grad(t2, aten.mul.Tensor(g, _scaled(t1, value)))
    return out


@RULES.grad(aten.addcdiv.default)
def addcdiv(a, t1, t2, **kwargs):
    # a + value * t1 / t2: d/dt1 = value / t2, d/dt2 = -value * t1 / t2**2
    out = aten.addcdiv.default(a, t1, t2, **kwargs)
    value = kwargs.get("value", 1)
    g = get_grad(out)
    put_grad(a, g)
    if requires_grad(t1):
        put_grad(t1, aten.div.Tensor(_scaled(g, value), t2))
    if requires_grad(t2):
        put_grad(t2, aten.mul.Tensor(aten.neg.default(g), aten.div.Tensor(
            _scaled(t1, value), aten.mul.Tensor(t2, t2))))
    return out


@RULES.grad(aten.hypot.default)
def hypot(a, b):
    # hypot = sqrt(a**2 + b**2): d/da = a / hypot
    out = aten.hypot.default(a, b)
    g = get_grad(out)
    for x in (a, b):
        if requires_grad(x):
            put_grad(x, aten.div.Tensor(aten.mul.Tensor(g, x), out))
    return out


@RULES.grad(aten.logaddexp.default)
def logaddexp(a, b):
    # log(e**a + e**b): d/da = e**a / (e**a + e**b) = 1 / (1 + e**(b - a))
    out = aten.logaddexp.default(a, b)
    g = get_grad(out)
    if requires_grad(a):
        put_grad(a, aten.div.Tensor(g, aten.add.Tensor(aten.exp.default(aten.sub.Tensor(b, a)), 1)))
    if requires_grad(b):
        put_grad(b, aten.div.Tensor(g, aten.add.Tensor(aten.exp.default(aten.sub.Tensor(a, b)), 1)))
    return out


@RULES.grad(aten.xlogy.Tensor)
def xlogy(a, b):
    # a * log(b), defined as 0 at a == 0. d/da = log(b), taken as 0 where a == 0 and
    # b <= 0 (log undefined: autograd uses the derivative along a == 0); d/db = a / b
    out = aten.xlogy.Tensor(a, b)
    g = get_grad(out)
    if requires_grad(a):
        da = aten.xlogy.Tensor(g, b)
        undefined = aten.logical_and.default(aten.eq.Scalar(a, 0), aten.le.Scalar(b, 0))
        put_grad(a, aten.where.self(undefined, _zero(da), da))
    if requires_grad(b):
        put_grad(b, aten.div.Tensor(aten.mul.Tensor(g, a), b))
    return out


@RULES.grad(aten.xlogy.Scalar_Other)
def xlogy_scalar_other(a, other):
    out = aten.xlogy.Scalar_Other(a, other)
    da = aten.xlogy.Scalar_Other(get_grad(out), other)
    if not other > 0:
        da = aten.where.self(aten.eq.Scalar(a, 0), _zero(da), da)
    put_grad(a, da)
    return out


@RULES.grad(aten.xlogy.Scalar_Self)
def xlogy_scalar_self(a, b):
    out = aten.xlogy.Scalar_Self(a, b)
    put_grad(b, aten.div.Tensor(aten.mul.Tensor(get_grad(out), a), b))
    return out


# --- casts, copies, dropout ----------------------------------------------------------------

# Identity on values: the gradient passes straight through (put_grad casts it back to the
# input's dtype and device, which is the whole backward of `_to_copy`).
@RULES.grad(aten._to_copy.default)
def to_copy(a, **kwargs):
    out = aten._to_copy.default(a, **kwargs)
    put_grad(a, get_grad(out))
    return out


@RULES.grad(aten.clone.default)
def clone(a, **kwargs):
    out = aten.clone.default(a, **kwargs)
    put_grad(a, get_grad(out))
    return out


@RULES.grad(aten.alias.default)
def alias(a):
    out = aten.alias.default(a)
    put_grad(a, get_grad(out))
    return out


@RULES.grad(aten.lift_fresh_copy.default)
def lift_fresh_copy(a):
    out = aten.lift_fresh_copy.default(a)
    put_grad(a, get_grad(out))
    return out


@RULES.grad(aten.lift_fresh.default)
def lift_fresh(a):
    out = aten.lift_fresh.default(a)
    put_grad(a, get_grad(out))
    return out


@RULES.grad(aten.copy.default)
def copy(a, src, non_blocking=False):
    # the result is src's values in a's shape, dtype and device: a's old values are gone
    out = aten.copy.default(a, src, non_blocking)
    put_grad(src, get_grad(out))
    return out


@RULES.grad(aten.fill.Tensor)
def fill_tensor(a, value):
    # every element is `value` (0-dim): its gradient is the sum (put_grad sums)
    out = aten.fill.Tensor(a, value)
    put_grad(value, get_grad(out))
    return out


@RULES.grad(aten.native_dropout.default)
def native_dropout(a, p, train):
    # training: out = a * mask / (1 - p); otherwise the identity (mask all true)
    out, mask = aten.native_dropout.default(a, p, train)
    g = get_grad(out)
    scale = 1.0 if not train else (0.0 if p == 1 else 1.0 / (1.0 - p))
    put_grad(a, _scaled(aten.mul.Tensor(g, mask), scale))
    return out, mask


@RULES.grad(aten.relu.default)
def relu(a):
    out = aten.relu.default(a)
    g = get_grad(out)
    put_grad(a, aten.threshold_backward.default(g, out, 0))
    return out


# --- no gradient ---------------------------------------------------------------------------

RULES.nondifferentiable(
    # comparisons and predicates (bool results)
    aten.eq.Tensor, aten.eq.Scalar, aten.ne.Tensor, aten.ne.Scalar,
    aten.lt.Tensor, aten.lt.Scalar, aten.le.Tensor, aten.le.Scalar,
    aten.gt.Tensor, aten.gt.Scalar, aten.ge.Tensor, aten.ge.Scalar,
    aten.isnan.default, aten.isinf.default, aten.isfinite.default, aten.isneginf.default,
    aten.isposinf.default, aten.signbit.default,
    aten.logical_and.default, aten.logical_or.default, aten.logical_xor.default,
    aten.logical_not.default,
    aten.bitwise_not.default, aten.bitwise_and.Tensor, aten.bitwise_and.Scalar,
    aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, aten.bitwise_xor.Tensor,
    aten.bitwise_xor.Scalar,
    # a where between two constants
    aten.where.Scalar,
    # detach: no gradient by definition
    aten.detach.default,
    # factories: the input only gives shape, dtype and device
    aten.zeros_like.default, aten.ones_like.default, aten.full_like.default,
    aten.empty_like.default, aten.new_zeros.default, aten.new_ones.default,
    aten.new_full.default, aten.new_empty.default, aten.new_empty_strided.default,
    aten.fill.Scalar, aten.zero.default,
    # random draws
    aten.rand_like.default, aten.randn_like.default, aten.randint_like.default,
    aten.randint_like.low_dtype, aten.bernoulli.default, aten.bernoulli.p,
    aten.bernoulli.Tensor, aten.uniform.default, aten.normal_functional.default,
    aten.exponential.default,
)
