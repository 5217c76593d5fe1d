"""Grad rules for special functions: gamma family, Bessel, error and normal-distribution
functions (formulas of torch's `tools/autograd/derivatives.yaml`).

Each is `out = f(a)`, gradient `g * f'(a)`, with `f'` written from `a` and `out`. The rules
sit on the ATen ops (`aten.lgamma`, `aten.special_i1`, ...) that torch decomposes into prims
(`prims.lgamma`, `prims.bessel_i1`) with no rules of their own.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import register, scalar_zero, unary
from thunderviz.core.proxies import TensorProxy
from thunderviz.prims import aten

RULES = RuleSet("special")

_SQRT_2PI = math.sqrt(2 * math.pi)
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _times(derivative: Callable) -> Callable:
    """The `grad` of `unary` for `out = op(a)` with gradient `g * derivative(a, out)`."""
    return lambda g, a, out: aten.mul.Tensor(g, derivative(a, out))


def _scalar(value, like):
    return aten.scalar_tensor.default(value, dtype=like.dtype, device=like.device)


def _away_from_zero(a):
    """(a is not tiny, a with its tiny values replaced by eps): Bessel i1/i1e divide by a;
    their derivative at 0 is 1/2, which the rules put there instead."""
    eps = torch.finfo(a.dtype).eps
    big = aten.gt.Scalar(aten.abs.default(a), eps)
    return big, aten.where.self(big, a, _scalar(eps, a))


def _i1_derivative(a, out):
    big, safe = _away_from_zero(a)
    d = aten.sub.Tensor(aten.i0.default(safe), aten.div.Tensor(out, safe))
    return aten.where.self(big, d, _scalar(0.5, a))


def _i1e_derivative(a, out):
    big, safe = _away_from_zero(a)
    factor = aten.add.Tensor(aten.sign.default(safe), aten.reciprocal.default(safe))
    d = aten.sub.Tensor(aten.special_i0e.default(safe), aten.mul.Tensor(out, factor))
    return aten.where.self(big, d, _scalar(0.5, a))


unary(RULES, aten.lgamma.default, _times(lambda a, out: aten.digamma.default(a)))
unary(RULES, aten.digamma.default, _times(lambda a, out: aten.polygamma.default(1, a)))
unary(RULES, aten.i0.default, _times(lambda a, out: aten.special_i1.default(a)))
# i0e(a) = exp(-|a|) i0(a): i1e(a) - sign(a) i0e(a)
unary(
    RULES,
    aten.special_i0e.default,
    _times(
        lambda a, out: aten.sub.Tensor(
            aten.special_i1e.default(a), aten.mul.Tensor(aten.sign.default(a), out)
        )
    ),
)
unary(RULES, aten.special_i1.default, _times(_i1_derivative))
unary(RULES, aten.special_i1e.default, _times(_i1e_derivative))
# erfcx(a) = exp(a^2) erfc(a): 2 a erfcx(a) - 2/sqrt(pi)
unary(
    RULES,
    aten.special_erfcx.default,
    _times(
        lambda a, out: aten.sub.Tensor(
            aten.mul.Tensor(aten.mul.Tensor(a, out), 2), _TWO_OVER_SQRT_PI
        )
    ),
)
# ndtri is the inverse of the normal CDF: 1 / pdf(ndtri(a)) = sqrt(2 pi) exp(out^2 / 2)
unary(
    RULES,
    aten.special_ndtri.default,
    _times(
        lambda a, out: aten.mul.Tensor(
            aten.exp.default(aten.div.Tensor(aten.mul.Tensor(out, out), 2)), _SQRT_2PI
        )
    ),
)
# log_ndtr = log(cdf(a)): pdf(a) / cdf(a) = exp(-(out + a^2 / 2)) / sqrt(2 pi)
unary(
    RULES,
    aten.special_log_ndtr.default,
    _times(
        lambda a, out: aten.div.Tensor(
            aten.exp.default(
                aten.neg.default(aten.add.Tensor(out, aten.div.Tensor(aten.mul.Tensor(a, a), 2)))
            ),
            _SQRT_2PI,
        )
    ),
)


# entr(a) = -a log(a): -(1 + log(a)), inf at 0 as eager's (torch's decomposition special-cases
# 0 in the forward, and differentiated gives nan there)
unary(
    RULES,
    aten.special_entr.default,
    _times(lambda a, out: aten.neg.default(aten.add.Tensor(aten.log.default(a), 1))),
)


@RULES.grad(aten.sinc.default)
def sinc(a):
    """sin(pi a) / (pi a): (pi a cos(pi a) - sin(pi a)) / (pi a^2), and 0 where pi a^2 is 0,
    as eager's `sinc_backward` (the decomposition, differentiated, gives nan at 0)."""
    out = aten.sinc.default(a)
    a_pi = aten.mul.Tensor(a, math.pi)
    a_squared_pi = aten.mul.Tensor(aten.mul.Tensor(a, a), math.pi)
    d = aten.div.Tensor(
        aten.sub.Tensor(aten.mul.Tensor(a_pi, aten.cos.default(a_pi)), aten.sin.default(a_pi)),
        a_squared_pi,
    )
    g = aten.mul.Tensor(get_grad(out), d)
    put_grad(a, aten.where.self(aten.eq.Scalar(a_squared_pi, 0), scalar_zero(g), g))
    return out


def _xlog1py_rule(op) -> None:
    """x log1p(y), as derivatives.yaml has it: dx = xlog1py(g, y), 0 where x is 0 and
    y <= -1 only (torch's decomposition, differentiated, gives 0 wherever x is 0); dy =
    g x / (y + 1). A Python number among the two (`self_scalar`, `other_scalar`) has none."""

    def rule(x, y):
        out = op(x, y)
        g = get_grad(out)
        if isinstance(x, TensorProxy):
            dx = (
                aten.special_xlog1py.default(g, y)
                if isinstance(y, TensorProxy)
                else aten.special_xlog1py.other_scalar(g, y)
            )
            flat = _zero_and_at_most(x, y, -1)
            put_grad(x, dx if flat is None else aten.masked_fill.Scalar(dx, flat, 0.0))
        if isinstance(y, TensorProxy):
            put_grad(y, aten.div.Tensor(aten.mul.Tensor(g, x), aten.add.Tensor(y, 1)))
        return out

    register(RULES, op, rule)


def _zero_and_at_most(x, y, bound):
    """x == 0 & y <= bound, for a tensor x and a tensor or number y; None where it holds
    nowhere (a number y above the bound)."""
    zero = aten.eq.Scalar(x, 0)
    if not isinstance(y, TensorProxy):
        return zero if y <= bound else None
    return aten.logical_and.default(zero, aten.le.Scalar(y, bound))


for _op in (
    aten.special_xlog1py.default,
    aten.special_xlog1py.self_scalar,
    aten.special_xlog1py.other_scalar,
):
    _xlog1py_rule(_op)


@RULES.grad(aten.polygamma.default)
def polygamma(n, a):
    out = aten.polygamma.default(n, a)
    put_grad(a, aten.mul.Tensor(get_grad(out), aten.polygamma.default(n + 1, a)))
    return out


@RULES.grad(aten.frexp.Tensor)
def frexp(a):
    """a = mantissa * 2**exponent: the mantissa's gradient is g / 2**exponent; the integer
    exponent has none."""
    mantissa, exponent = aten.frexp.Tensor(a)
    g = get_grad(mantissa)
    put_grad(
        a, aten.div.Tensor(g, aten.exp2.default(aten._to_copy.default(exponent, dtype=a.dtype)))
    )
    return mantissa, exponent


@RULES.grad(aten.nextafter.default)
def nextafter(a, b):
    """The next float after a towards b: a step of one ulp, so d/da = 1, but 0 where a == b
    (nextafter(a, a) is a), and d/db = 0, as autograd has it."""
    out = aten.nextafter.default(a, b)
    g = get_grad(out)
    put_grad(a, aten.where.self(aten.ne.Tensor(a, b), g, scalar_zero(g)))
    put_grad(b, aten.mul.Tensor(g, scalar_zero(g)))
    return out
