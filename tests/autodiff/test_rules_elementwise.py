"""Grad rules for elementwise math of one tensor (rules/elementwise.py), checked against
torch.autograd (and torch.func.jvp).

OpInfo samples give shapes we did not pick; the hand-written cases pin down the edges:
0-dim tensors, float32, kinks (where autograd picks a subgradient), domains, and the
piecewise-constant ops whose gradient is zero. Two-operand arithmetic, selection and casts
have modules of their own (test_rules_arithmetic.py, test_rules_selection.py,
test_rules_casts.py).
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.autodiff.inputs import positive, randn, unit, vec
from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_each_output, check_vjp, thunderviz_vjp
from thunderviz.autodiff import BUILTIN_RULES
from thunderviz.autodiff.registry import symbol_id

F64 = torch.float64
aten = torch.ops.aten


# --- OpInfo ----------------------------------------------------------------------------------

UNARY_OPINFO = [
    "abs",
    "neg",
    "exp",
    "exp2",
    "expm1",
    "log",
    "log1p",
    "log2",
    "log10",
    "sqrt",
    "rsqrt",
    "reciprocal",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sinh",
    "cosh",
    "asin",
    "acos",
    "atan",
    "asinh",
    "acosh",
    "atanh",
    "sigmoid",
    "erf",
    "erfc",
    "erfinv",
    "logit",
    "nan_to_num",
    "sign",
    "sgn",
    "floor",
    "ceil",
    "round",
    ("round", "decimals_3"),
    ("round", "decimals_neg_3"),
    "trunc",
    "frac",
    "square",
    "deg2rad",
    "sinc",
]


@pytest.mark.parametrize("fn,args,kwargs", sample_params(UNARY_OPINFO, limit=6, spread=True))
def test_unary_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


# --- unary ops by hand: 0-dim, a batch, float32 ------------------------------------------------

# (name, fn, input maker on its domain)
UNARY = [
    ("abs", torch.abs, randn),
    ("neg", torch.neg, randn),
    ("exp", torch.exp, randn),
    ("exp2", torch.exp2, randn),
    ("expm1", torch.expm1, randn),
    ("log", torch.log, positive),
    ("log1p", torch.log1p, positive),
    ("log2", torch.log2, positive),
    ("log10", torch.log10, positive),
    ("sqrt", torch.sqrt, positive),
    ("rsqrt", torch.rsqrt, positive),
    ("reciprocal", torch.reciprocal, positive),
    ("sin", torch.sin, randn),
    ("cos", torch.cos, randn),
    ("tan", torch.tan, unit),
    ("tanh", torch.tanh, randn),
    ("sinh", torch.sinh, randn),
    ("cosh", torch.cosh, randn),
    ("asin", torch.asin, unit),
    ("acos", torch.acos, unit),
    ("atan", torch.atan, randn),
    ("asinh", torch.asinh, randn),
    ("acosh", lambda x: torch.acosh(x + 1), positive),
    ("atanh", torch.atanh, unit),
    ("sigmoid", torch.sigmoid, randn),
    ("erf", torch.erf, randn),
    ("erfc", torch.erfc, randn),
    ("erfinv", torch.erfinv, unit),
    ("logit", lambda x: torch.logit(x / 2), positive),
    ("square", torch.square, randn),
    ("frac", torch.frac, randn),
    ("sign", torch.sign, randn),
    ("floor", torch.floor, randn),
    ("round", torch.round, randn),
    ("trunc", torch.trunc, randn),
    ("ceil", torch.ceil, randn),
    ("pow_half", lambda x: x**0.5, positive),
    ("pow_neg", lambda x: x**-1.5, positive),
    ("pow_3", lambda x: x**3, randn),
]


@pytest.mark.parametrize("name,fn,make", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("shape", [(), (3, 4)], ids=["0dim", "3x4"])
def test_unary(name, fn, make, shape):
    check_vjp(fn, make(*shape))


@pytest.mark.parametrize("name,fn,make", UNARY[:24], ids=[u[0] for u in UNARY[:24]])
def test_unary_float32(name, fn, make):
    check_vjp(fn, make(5).float(), rtol=1e-5, atol=1e-6)


def test_chain_of_unary_ops():
    check_vjp(lambda x: torch.erf(x).tanh().sigmoid().log1p().expm1().sqrt().exp2(), randn(3, 4))


# --- edges: kinks, domains, piecewise-constant ops ---------------------------------------------


def test_abs_sign_copysign_at_zero():
    x = vec(0.0, -1.0, 2.0, -0.0)
    check_each_output(lambda x: [x.abs(), torch.sgn(x), torch.sign(x), torch.copysign(x, -1.0)], x)
    check_vjp(torch.copysign, x, vec(1.0, 1.0, -1.0, -2.0))


def test_pow_edges_at_zero_and_negative_base():
    a = vec(0.0, 0.0, 0.0, 2.0, -2.0, 1.0, -3.0)
    b = vec(0.0, 2.0, -1.0, 0.0, 3.0, 0.5, 2.0)
    # one op per check: a nan from one would hide a wrong value of another
    check_vjp(torch.pow, a, b)
    for fn in (lambda a: a**0, lambda a: a**1, lambda a: a**2, lambda a: a**-1.5):
        check_vjp(fn, a)
    for base in (0.0, 2.0, -2.0):
        check_vjp(lambda b, base=base: torch.pow(base, b), b)


def test_pow_integer_exponent_tensor_has_no_gradient():
    x = randn(3, 4)
    check_vjp(lambda x: torch.pow(x, torch.tensor([1, 2, 3, 0])) + x ** torch.tensor(2), x)


def test_piecewise_constant_ops_have_zero_gradients():
    # autograd's convention: zeros, not None
    a, b = randn(3, 4) * 3, randn(4, seed=1) + 2
    check_each_output(
        lambda a, b: [
            torch.div(a, b, rounding_mode="floor"),
            torch.div(a, b, rounding_mode="trunc"),
            a.floor(),
            a.ceil(),
            a.round(),
            a.round(decimals=1),
            a.trunc(),
            a.sign(),
        ],
        a,
        b,
    )
    _, (ga, gb) = thunderviz_vjp(
        lambda a, b: torch.div(a, b, rounding_mode="floor"), (a, b), [torch.ones(3, 4, dtype=F64)]
    )
    assert ga is not None and gb is not None and not ga.any() and not gb.any()


def test_xlogy_and_logit_domains():
    a, b = vec(0.0, 0.0, 1.0, 2.0, 0.0), vec(0.0, -1.0, 0.5, 2.0, 3.0)
    check_each_output(
        lambda a, b: [
            torch.xlogy(a, b),
            torch.xlogy(a, 0.0),
            torch.xlogy(a, 2.0),
            torch.xlogy(2.0, b),
        ],
        a,
        b,
    )
    p = vec(0.1, 0.2, 0.5, 0.9, 1.5, -0.2, 0.0)
    check_each_output(lambda p: [torch.logit(p), torch.logit(p, 0.25)], p)


def test_nan_to_num_and_infinities():
    x = vec(0.0, math.nan, math.inf, -math.inf, 2.0)
    check_each_output(lambda x: [torch.nan_to_num(x), torch.nan_to_num(x, nan=1.0, posinf=3.0)], x)


# --- dot-product test against forward mode: <J u, v> == <u, J^T v> ---------------------------

DOT = [
    ("arith", lambda a, b: (a + b) * a / (b * b + 1) - torch.rsub(a, b, alpha=2)),
    (
        "transcendental",
        lambda a, b: torch.exp(a) * torch.sin(b) + torch.log1p(a * a) * torch.atan2(a, b),
    ),
    ("powers", lambda a, b: torch.pow(a.abs() + 1, b) + a**3 + torch.rsqrt(b * b + 1)),
    ("selection", lambda a, b: torch.maximum(a, b) + torch.where(a > 0, a, b) + a.clamp(-0.5, 0.5)),
    ("special", lambda a, b: torch.sigmoid(a) * torch.erf(b) + torch.tanh(a) * torch.hypot(a, b)),
    (
        "blend",
        lambda a, b: torch.lerp(a, b, torch.sigmoid(b)) + torch.addcdiv(a, a, b * b + 1, value=0.5),
    ),
]


@pytest.mark.parametrize("name,fn", DOT, ids=[d[0] for d in DOT])
def test_vjp_is_the_transpose_of_forward_mode(name, fn):
    a, b = randn(3, 4, seed=1), randn(4, seed=2)
    ua, ub = randn(3, 4, seed=3), randn(4, seed=4)
    out, ju = torch.func.jvp(fn, (a, b), (ua, ub))
    v = randn(*out.shape, seed=5)
    _, (ga, gb) = thunderviz_vjp(fn, (a, b), [v])
    lhs = (ju * v).sum()
    rhs = (ua * ga).sum() + (ub * gb).sum()
    torch.testing.assert_close(lhs, rhs, rtol=1e-10, atol=1e-10)


# --- every op of the brief has a rule ------------------------------------------------------------

COVERED = [
    aten.abs.default,
    aten.neg.default,
    aten.exp.default,
    aten.exp2.default,
    aten.expm1.default,
    aten.log.default,
    aten.log1p.default,
    aten.log2.default,
    aten.log10.default,
    aten.sqrt.default,
    aten.rsqrt.default,
    aten.reciprocal.default,
    aten.sin.default,
    aten.cos.default,
    aten.tan.default,
    aten.tanh.default,
    aten.sinh.default,
    aten.cosh.default,
    aten.asin.default,
    aten.acos.default,
    aten.atan.default,
    aten.atan2.default,
    aten.sigmoid.default,
    aten.erf.default,
    aten.erfc.default,
    aten.pow.Tensor_Tensor,
    aten.pow.Tensor_Scalar,
    aten.pow.Scalar,
    aten.add.Tensor,
    aten.add.Scalar,
    aten.sub.Tensor,
    aten.sub.Scalar,
    aten.rsub.Tensor,
    aten.rsub.Scalar,
    aten.mul.Tensor,
    aten.mul.Scalar,
    aten.div.Tensor,
    aten.div.Scalar,
    aten.div.Tensor_mode,
    aten.div.Scalar_mode,
    aten.maximum.default,
    aten.minimum.default,
    aten.clamp.default,
    aten.clamp.Tensor,
    aten.where.self,
    aten.sign.default,
    aten.fmod.Tensor,
    aten.fmod.Scalar,
    aten.remainder.Tensor,
    aten.remainder.Scalar,
    aten._to_copy.default,
    aten.clone.default,
    aten.alias.default,
    aten.detach.default,
    aten.lift_fresh_copy.default,
    aten.fill.Scalar,
    aten.full_like.default,
    aten.zeros_like.default,
    aten.empty_like.default,
    aten.masked_fill.Scalar,
    aten.masked_fill.Tensor,
    aten.copy.default,
    aten.bernoulli.p,
    aten.native_dropout.default,
    aten.lerp.Scalar,
    aten.lerp.Tensor,
    aten.addcmul.default,
    aten.addcdiv.default,
    aten.eq.Tensor,
    aten.eq.Scalar,
    aten.ne.Scalar,
    aten.lt.Tensor,
    aten.gt.Scalar,
    aten.logical_and.default,
    aten.logical_not.default,
]


def test_brief_ops_have_rules():
    missing = [symbol_id(op) for op in COVERED if symbol_id(op) not in BUILTIN_RULES]
    assert not missing
    nondiff = [
        aten.eq.Tensor,
        aten.detach.default,
        aten.zeros_like.default,
        aten.new_full.default,
        aten.rand_like.default,
        aten.logical_and.default,
    ]
    assert all(not BUILTIN_RULES.get(symbol_id(op)).differentiable for op in nondiff)
