"""Grad rules for elementwise ops, checked against torch.autograd (and torch.func.jvp).

OpInfo samples give shapes and broadcasting we did not pick; the hand-written cases pin
down the edges: 0-dim tensors, broadcasting both ways, scalar operands, dtype promotion,
kinks and ties (where autograd picks a subgradient), and ops with no gradient.
"""

from __future__ import annotations

import math

import pytest
import torch

import thunderviz as tv
from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_each_output, check_vjp, reference_vjp
from thunderviz.autodiff import BUILTIN_RULES
from thunderviz.autodiff.registry import symbol_id

F64 = torch.float64
aten = torch.ops.aten


def _t(*values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def _randn(*shape, dtype=F64, seed=0):
    return torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def _positive(*shape, seed=0):
    return torch.rand(shape, dtype=F64, generator=torch.Generator().manual_seed(seed)) + 0.2


def _unit(*shape, seed=0):  # inside (-1, 1)
    return torch.rand(shape, dtype=F64, generator=torch.Generator().manual_seed(seed)) * 1.6 - 0.8


def _ours(fn, args, cts, **kwargs):
    return tv.vjp(fn)(args, cts, **kwargs)


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
BINARY_OPINFO = [
    "atan2",
    "pow",
    "float_power",
    "add",
    "sub",
    "rsub",
    "mul",
    ("div", "no_rounding_mode"),
    ("div", "trunc_rounding"),
    ("div", "floor_rounding"),
    "true_divide",
    "maximum",
    "minimum",
    ("max", "binary"),
    ("min", "binary"),
    "fmax",
    "fmin",
    "clamp",
    "clamp_min",
    "clamp_max",
    "where",
    "fmod",
    "remainder",
    "lerp",
    "addcmul",
    "addcdiv",
    "hypot",
    "xlogy",
    "logaddexp",
    "copysign",
    "masked_fill",
    "clone",
    "to",
]


@pytest.mark.parametrize("fn,args,kwargs", sample_params(UNARY_OPINFO, limit=6, spread=True))
def test_unary_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


@pytest.mark.parametrize("fn,args,kwargs", sample_params(BINARY_OPINFO, limit=8, spread=True))
def test_binary_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


# --- unary ops by hand: 0-dim, a batch, float32 ------------------------------------------------

# (name, fn, input maker on its domain)
UNARY = [
    ("abs", torch.abs, _randn),
    ("neg", torch.neg, _randn),
    ("exp", torch.exp, _randn),
    ("exp2", torch.exp2, _randn),
    ("expm1", torch.expm1, _randn),
    ("log", torch.log, _positive),
    ("log1p", torch.log1p, _positive),
    ("log2", torch.log2, _positive),
    ("log10", torch.log10, _positive),
    ("sqrt", torch.sqrt, _positive),
    ("rsqrt", torch.rsqrt, _positive),
    ("reciprocal", torch.reciprocal, _positive),
    ("sin", torch.sin, _randn),
    ("cos", torch.cos, _randn),
    ("tan", torch.tan, _unit),
    ("tanh", torch.tanh, _randn),
    ("sinh", torch.sinh, _randn),
    ("cosh", torch.cosh, _randn),
    ("asin", torch.asin, _unit),
    ("acos", torch.acos, _unit),
    ("atan", torch.atan, _randn),
    ("asinh", torch.asinh, _randn),
    ("acosh", lambda x: torch.acosh(x + 1), _positive),
    ("atanh", torch.atanh, _unit),
    ("sigmoid", torch.sigmoid, _randn),
    ("erf", torch.erf, _randn),
    ("erfc", torch.erfc, _randn),
    ("erfinv", torch.erfinv, _unit),
    ("logit", lambda x: torch.logit(x / 2), _positive),
    ("square", torch.square, _randn),
    ("frac", torch.frac, _randn),
    ("sign", torch.sign, _randn),
    ("floor", torch.floor, _randn),
    ("round", torch.round, _randn),
    ("trunc", torch.trunc, _randn),
    ("ceil", torch.ceil, _randn),
    ("pow_half", lambda x: x**0.5, _positive),
    ("pow_neg", lambda x: x**-1.5, _positive),
    ("pow_3", lambda x: x**3, _randn),
]


@pytest.mark.parametrize("name,fn,make", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("shape", [(), (3, 4)], ids=["0dim", "3x4"])
def test_unary(name, fn, make, shape):
    check_vjp(fn, make(*shape))


@pytest.mark.parametrize("name,fn,make", UNARY[:24], ids=[u[0] for u in UNARY[:24]])
def test_unary_float32(name, fn, make):
    check_vjp(fn, make(5).float(), rtol=1e-5, atol=1e-6)


def test_chain_of_unary_ops():
    check_vjp(lambda x: torch.erf(x).tanh().sigmoid().log1p().expm1().sqrt().exp2(), _randn(3, 4))


# --- binary ops: broadcasting, 0-dim, scalars, promotion ----------------------------------------

BINARY = [
    ("add", lambda a, b: a + b),
    ("add_alpha", lambda a, b: torch.add(a, b, alpha=-2)),
    ("sub", lambda a, b: a - b),
    ("sub_alpha", lambda a, b: torch.sub(a, b, alpha=3)),
    ("rsub", lambda a, b: torch.rsub(a, b, alpha=2)),
    ("mul", lambda a, b: a * b),
    ("div", lambda a, b: a / b),
    ("atan2", torch.atan2),
    ("maximum", torch.maximum),
    ("minimum", torch.minimum),
    ("fmax", torch.fmax),
    ("fmin", torch.fmin),
    ("pow", lambda a, b: torch.pow(a.abs() + 0.1, b)),
    ("hypot", torch.hypot),
    ("fmod", torch.fmod),
    ("remainder", torch.remainder),
    ("logaddexp", torch.logaddexp),
    ("xlogy", lambda a, b: torch.xlogy(a, b.abs() + 0.1)),
    ("copysign", torch.copysign),
    ("where", lambda a, b: torch.where(a > b, a, b)),
    ("lerp", lambda a, b: torch.lerp(a, b, 0.3)),
    ("lerp_tensor", lambda a, b: torch.lerp(a, b, b)),
    ("clamp_min_t", torch.clamp_min),
    ("clamp_max_t", torch.clamp_max),
]
SHAPES = [
    ((3, 4), (3, 4)),
    ((3, 1), (1, 4)),
    ((4,), (3, 4)),
    ((3, 4), (4,)),
    ((), (3, 4)),
    ((3, 4), ()),
    ((), ()),
]


@pytest.mark.parametrize("name,fn", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.parametrize("sa,sb", SHAPES, ids=[f"{a}-{b}" for a, b in SHAPES])
def test_binary_broadcasting(name, fn, sa, sb):
    check_vjp(fn, _randn(*sa, seed=1), _randn(*sb, seed=2) + 0.5)


PROMOTING = [b for b in BINARY if not b[0].startswith("lerp")]  # lerp wants one dtype


@pytest.mark.parametrize("name,fn", PROMOTING, ids=[b[0] for b in PROMOTING])
def test_binary_float32_with_float64(name, fn):
    # f32 op f64 computes in f64; the f32 input's gradient comes back as f32
    check_vjp(fn, _randn(3, 4, seed=1).float(), _randn(4, seed=2) + 0.5, rtol=1e-6, atol=1e-6)


SCALAR_OPERANDS = [
    ("add", lambda a: a + 2),
    ("radd", lambda a: 2 + a),
    ("add_alpha", lambda a: torch.add(a, 2, alpha=3)),
    ("sub", lambda a: a - 3),
    ("rsub", lambda a: 3 - a),
    ("rsub_alpha", lambda a: torch.rsub(a, 3.0, alpha=2)),
    ("mul", lambda a: a * 4),
    ("rmul", lambda a: 4.0 * a),
    ("mul_scalar_op", lambda a: aten.mul.Scalar(a, 2.5)),
    ("div", lambda a: a / 5),
    ("rdiv", lambda a: 5 / a),
    ("div_floor", lambda a: torch.div(a, 2, rounding_mode="floor")),
    ("pow", lambda a: a**3),
    ("rpow", lambda a: 3**a),
    ("fmod", lambda a: torch.fmod(a, 0.7)),
    ("remainder", lambda a: a % 0.7),
    ("clamp", lambda a: a.clamp(-0.3, 0.5)),
    ("clamp_max", lambda a: a.clamp(max=0.3)),
    ("where_scalar_self", lambda a: torch.where(a > 0, 1.0, a)),
    ("where_scalar_other", lambda a: torch.where(a > 0, a, 2.0)),
    ("masked_fill", lambda a: a.masked_fill(a < 0, 2.0)),
    ("copysign", lambda a: torch.copysign(a, -1.0)),
    ("xlogy_other", lambda a: torch.xlogy(a, 3.0)),
    ("xlogy_self", lambda a: torch.xlogy(2.0, a.abs() + 0.1)),
    ("atan2_0dim", lambda a: torch.atan2(a, torch.tensor(0.5, dtype=F64))),
]


@pytest.mark.parametrize("name,fn", SCALAR_OPERANDS, ids=[s[0] for s in SCALAR_OPERANDS])
def test_scalar_operands(name, fn):
    check_vjp(fn, _randn(3, 4) + 0.05)


def test_sub_and_rsub_decompositions_with_number_first():
    # decompositions record `sub.Tensor(1, x)`: a number as first operand
    check_vjp(lambda a, b: torch.rsub(a, b) + torch.rsub(a, 1.5) + (1 - a), _randn(3), _randn(3))


def test_fused_ops():
    a, b, c = _randn(3, 4), _randn(3, 1, seed=1), _positive(4, seed=2)
    check_vjp(lambda a, b, c: torch.addcmul(a, b, c, value=-0.5), a, b, c)
    check_vjp(lambda a, b, c: torch.addcdiv(a, b, c, value=3), a, b, c)
    check_vjp(lambda a, b, c: torch.lerp(a, b, c), a, b, c)


# --- edges: kinks, ties, domains ----------------------------------------------------------------


def test_abs_sign_copysign_at_zero():
    x = _t(0.0, -1.0, 2.0, -0.0)
    check_each_output(lambda x: [x.abs(), torch.sgn(x), torch.sign(x), torch.copysign(x, -1.0)], x)
    check_vjp(torch.copysign, x, _t(1.0, 1.0, -1.0, -2.0))


def test_maximum_minimum_ties_split_the_gradient():
    a, b = _t(1.0, 2.0, 3.0, 2.0), _t(1.0, 3.0, 2.0, 2.0)
    check_each_output(
        lambda a, b: [torch.maximum(a, b), torch.minimum(a, b), torch.max(a, b)], a, b
    )
    # the check has teeth: at a tie each input gets exactly half
    ct = torch.ones(4, dtype=F64)
    _, (ga, gb) = _ours(torch.maximum, (a, b), [ct])
    torch.testing.assert_close(ga, _t(0.5, 0.0, 1.0, 0.5))
    torch.testing.assert_close(gb, _t(0.5, 1.0, 0.0, 0.5))


def test_nan_in_maximum_and_fmax():
    a, b = _t(1.0, math.nan, 3.0, math.nan), _t(math.nan, 1.0, 2.0, math.nan)
    check_each_output(
        lambda a, b: [torch.maximum(a, b), torch.minimum(a, b), torch.fmax(a, b), torch.fmin(a, b)],
        a,
        b,
    )


def test_clamp_at_and_between_bounds():
    x = _t(0.0, 1.0, 1.5, 2.0, 3.0)
    check_each_output(
        lambda x: [
            x.clamp(1.0, 2.0),
            torch.clamp_min(x, 1.0),
            torch.clamp_max(x, 2.0),
            x.clamp(min=1.0),
            torch.relu(x - 1.5),
        ],
        x,
    )


def test_clamp_tensor_bounds_including_min_above_max():
    x = _t(0.0, 1.0, 2.0, 3.0, 1.0, 5.0, 0.5)
    lo = _t(1.0, 1.0, 1.0, 4.0, 1.0, 0.0, 2.0)
    hi = _t(2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0)
    check_vjp(torch.clamp, x, lo, hi)
    check_vjp(lambda x, lo: torch.clamp(x, min=lo), x, lo)
    check_vjp(lambda x, hi: torch.clamp(x, max=hi), x, hi)
    check_vjp(lambda x, lo: torch.clamp(x, lo[:1], None), x, lo)


def test_pow_edges_at_zero_and_negative_base():
    a = _t(0.0, 0.0, 0.0, 2.0, -2.0, 1.0, -3.0)
    b = _t(0.0, 2.0, -1.0, 0.0, 3.0, 0.5, 2.0)
    # one op per check: a nan from one would hide a wrong value of another
    check_vjp(torch.pow, a, b)
    for fn in (lambda a: a**0, lambda a: a**1, lambda a: a**2, lambda a: a**-1.5):
        check_vjp(fn, a)
    for base in (0.0, 2.0, -2.0):
        check_vjp(lambda b, base=base: torch.pow(base, b), b)


def test_pow_integer_exponent_tensor_has_no_gradient():
    x = _randn(3, 4)
    check_vjp(lambda x: torch.pow(x, torch.tensor([1, 2, 3, 0])) + x ** torch.tensor(2), x)


def test_piecewise_constant_ops_have_zero_gradients():
    # autograd's convention: zeros, not None
    a, b = _randn(3, 4) * 3, _randn(4, seed=1) + 2
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
    _, (ga, gb) = _ours(
        lambda a, b: torch.div(a, b, rounding_mode="floor"), (a, b), [torch.ones(3, 4, dtype=F64)]
    )
    assert ga is not None and gb is not None and not ga.any() and not gb.any()


def test_floor_divide_has_zero_gradient():
    # autograd has no derivative for floor_divide; it is flat almost everywhere
    a, b = _randn(3, 4) * 3, _randn(4, seed=1) + 2
    with pytest.raises(RuntimeError, match="not implemented"):
        reference_vjp(torch.floor_divide, (a, b), [torch.ones(3, 4, dtype=F64)])
    _, (ga, gb) = _ours(torch.floor_divide, (a, b), [torch.ones(3, 4, dtype=F64)])
    assert ga.shape == a.shape and gb.shape == b.shape and not ga.any() and not gb.any()


def test_remainder_with_scalar_dividend():
    # autograd has no derivative here; remainder(s, b) = s - b * floor(s / b) and floor is
    # flat, so the reference is autograd on that formula
    b = _randn(3, 4) + 0.1
    ct = _randn(3, 4, seed=5)
    _, (ours,) = _ours(lambda b: torch.remainder(2.0, b), (b,), [ct])
    _, (ref,) = reference_vjp(lambda b: 2.0 - b * torch.floor(2.0 / b), (b,), [ct])
    torch.testing.assert_close(ours, ref)


def test_where_and_masked_fill():
    a, b = _randn(3, 1), _randn(4, seed=1)
    check_vjp(lambda a, b: torch.where(torch.tensor([True, False, True, False]), a, b), a, b)
    x, v = _randn(3, 4), torch.tensor(2.0, dtype=F64)
    check_vjp(lambda x, v: x.masked_fill(x > 0, v), x, v)  # the fill value's gradient is a sum
    check_vjp(lambda x: x.masked_fill(torch.tensor([True, False, False, True]), -1.0), x)


def test_xlogy_and_logit_domains():
    a, b = _t(0.0, 0.0, 1.0, 2.0, 0.0), _t(0.0, -1.0, 0.5, 2.0, 3.0)
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
    p = _t(0.1, 0.2, 0.5, 0.9, 1.5, -0.2, 0.0)
    check_each_output(lambda p: [torch.logit(p), torch.logit(p, 0.25)], p)


def test_nan_to_num_and_infinities():
    x = _t(0.0, math.nan, math.inf, -math.inf, 2.0)
    check_each_output(lambda x: [torch.nan_to_num(x), torch.nan_to_num(x, nan=1.0, posinf=3.0)], x)


def test_logaddexp_with_infinities():
    a, b = _t(-math.inf, 0.0, 1.0, -2.0), _t(0.0, -math.inf, 1.0, 5.0)
    check_vjp(torch.logaddexp, a, b)


# --- casts, copies, in-place --------------------------------------------------------------------


def test_casts_and_copies():
    x = _randn(3, 4)
    check_vjp(
        lambda x: [x.float() * 2, x.to(torch.float16), x.clone() + 1, x.detach() + x, x.double()],
        x,
        rtol=1e-3,
        atol=1e-3,
    )
    check_vjp(
        lambda x: [torch.zeros(3, 4, dtype=F64).copy_(x) * 2, torch.zeros(2, 3, 4).copy_(x)],
        x,
        rtol=1e-6,
        atol=1e-6,
    )


def test_float32_gradient_of_cast_up():
    x = _randn(3, 4).float()
    check_vjp(lambda x: (x.double() ** 2).sum(), x, rtol=1e-6, atol=1e-6)


def test_inplace_chain():
    check_vjp(
        lambda x: x.clone().mul_(2).add_(x).clamp_(-1, 1).sub_(x, alpha=2).exp_(), _randn(3, 4)
    )


def test_integer_and_bool_results_carry_no_gradient():
    x = _randn(3, 4)
    check_vjp(
        lambda x: (
            (x > 0).float() * x
            + (x.isnan() | x.isinf()).to(x.dtype)
            + torch.logical_not(x < 1) * x.ceil().long()
        ),
        x,
    )


def _assert_no_gradient(fn, *args):
    """autograd gives None or zeros (its convention for these ops); ours gives none at all."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        outs = fn(*args)
    outs = outs if isinstance(outs, (tuple, list)) else [outs]
    cts = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]
    _, ref = reference_vjp(fn, args, cts)
    assert all(r is None or not r.any() for r in ref)
    _, ours = _ours(fn, args, cts)
    assert all(g is None for g in ours), ours


def test_detach_fill_and_factories_carry_no_gradient():
    x = _randn(3, 4)
    _assert_no_gradient(lambda x: x.detach() * 2, x)
    _assert_no_gradient(lambda x: torch.fill(x, 2.0), x)
    _assert_no_gradient(lambda x: x.clone().zero_() + 1, x)
    _assert_no_gradient(
        lambda x: torch.zeros_like(x) + torch.ones_like(x) + torch.full_like(x, 3.0), x
    )
    _assert_no_gradient(lambda x: x.new_zeros(2) + x.new_ones(2) + x.new_full((2,), 3.0), x)
    _assert_no_gradient(lambda x: torch.bernoulli(torch.sigmoid(x)), x)


def test_dropout_in_training_scales_by_the_kept_mask():
    x = _randn(6, 5) + 3  # nonzero everywhere, so out != 0 exactly where kept
    ct = _randn(6, 5, seed=1)
    (out, mask), (g,) = _ours(
        lambda x: aten.native_dropout(x, 0.3, True), (x,), [ct, torch.zeros(())]
    )
    torch.testing.assert_close(g, ct * mask / 0.7)
    out, (g,) = _ours(lambda x: torch.nn.functional.dropout(x, 0.3), (x,), [ct])
    torch.testing.assert_close(g, ct * (out != 0) / 0.7)
    assert 0 < (out != 0).sum() < out.numel()


def test_dropout_deterministic_cases():
    x = _randn(3, 4)
    check_vjp(
        lambda x: [
            torch.nn.functional.dropout(x, 0.5, training=False),
            aten.native_dropout(x, 0.5, False)[0],
            aten.native_dropout(x, 0.0, True)[0],
            aten.native_dropout(x, 1.0, True)[0],
        ],
        x,
    )


# --- 0-dim CPU tensors with CUDA tensors ------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_zero_dim_cpu_tensor_with_cuda_tensor():
    s, x = torch.tensor(0.7, dtype=F64), _randn(3, 4).cuda()
    fns = [
        lambda s, x: x * s,
        lambda s, x: x / s,
        lambda s, x: torch.atan2(s, x),
        lambda s, x: torch.where(x > 0, s, x),
        lambda s, x: torch.maximum(s, x),
    ]
    for fn in fns:
        ct = _randn(3, 4, seed=3).cuda()
        _, (gs, gx) = _ours(fn, (s, x), [ct])
        _, (rs, rx) = reference_vjp(fn, (s, x), [ct])
        assert gs.device.type == "cpu" and gx.device.type == "cuda"
        torch.testing.assert_close(gs, rs)
        torch.testing.assert_close(gx, rx)


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
    a, b = _randn(3, 4, seed=1), _randn(4, seed=2)
    ua, ub = _randn(3, 4, seed=3), _randn(4, seed=4)
    out, ju = torch.func.jvp(fn, (a, b), (ua, ub))
    v = _randn(*out.shape, seed=5)
    _, (ga, gb) = _ours(fn, (a, b), [v])
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
        aten.bernoulli.p,
        aten.fill.Scalar,
        aten.logical_and.default,
    ]
    assert all(not BUILTIN_RULES.get(symbol_id(op)).differentiable for op in nondiff)
