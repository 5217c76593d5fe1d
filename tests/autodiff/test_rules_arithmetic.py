"""Grad rules for elementwise arithmetic of two operands (rules/arithmetic.py), checked
against torch.autograd.

OpInfo samples of binary ops, then by hand: broadcasting both ways, 0-dim tensors, scalar
operands, dtype promotion, fused multiply-adds, ops autograd has no derivative for, and 0-dim
CPU tensors with CUDA tensors.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.autodiff.inputs import positive, randn, vec
from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_vjp, reference_vjp, thunderviz_vjp

F64 = torch.float64
aten = torch.ops.aten


# --- OpInfo ----------------------------------------------------------------------------------

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


@pytest.mark.parametrize("fn,args,kwargs", sample_params(BINARY_OPINFO, limit=8, spread=True))
def test_binary_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


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
    check_vjp(fn, randn(*sa, seed=1), randn(*sb, seed=2) + 0.5)


PROMOTING = [b for b in BINARY if not b[0].startswith("lerp")]  # lerp wants one dtype


@pytest.mark.parametrize("name,fn", PROMOTING, ids=[b[0] for b in PROMOTING])
def test_binary_float32_with_float64(name, fn):
    # f32 op f64 computes in f64; the f32 input's gradient comes back as f32
    check_vjp(fn, randn(3, 4, seed=1).float(), randn(4, seed=2) + 0.5, rtol=1e-6, atol=1e-6)


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
    check_vjp(fn, randn(3, 4) + 0.05)


def test_sub_and_rsub_decompositions_with_number_first():
    # decompositions record `sub.Tensor(1, x)`: a number as first operand
    check_vjp(lambda a, b: torch.rsub(a, b) + torch.rsub(a, 1.5) + (1 - a), randn(3), randn(3))


def test_fused_ops():
    a, b, c = randn(3, 4), randn(3, 1, seed=1), positive(4, seed=2)
    check_vjp(lambda a, b, c: torch.addcmul(a, b, c, value=-0.5), a, b, c)
    check_vjp(lambda a, b, c: torch.addcdiv(a, b, c, value=3), a, b, c)
    check_vjp(lambda a, b, c: torch.lerp(a, b, c), a, b, c)


# --- edges: no derivative in autograd, infinities ----------------------------------------------


def test_floor_divide_has_zero_gradient():
    # autograd has no derivative for floor_divide; it is flat almost everywhere
    a, b = randn(3, 4) * 3, randn(4, seed=1) + 2
    with pytest.raises(RuntimeError, match="not implemented"):
        torch.floor_divide(a.clone().requires_grad_(), b).sum().backward()
    _, (ga, gb) = thunderviz_vjp(torch.floor_divide, (a, b), [torch.ones(3, 4, dtype=F64)])
    assert ga.shape == a.shape and gb.shape == b.shape and not ga.any() and not gb.any()


def test_remainder_with_scalar_dividend():
    # autograd has no derivative here; remainder(s, b) = s - b * floor(s / b) and floor is
    # flat, so the reference is autograd on that formula
    b = randn(3, 4) + 0.1
    ct = randn(3, 4, seed=5)
    _, (ours,) = thunderviz_vjp(lambda b: torch.remainder(2.0, b), (b,), [ct])
    _, (ref,) = reference_vjp(lambda b: 2.0 - b * torch.floor(2.0 / b), (b,), [ct])
    torch.testing.assert_close(ours, ref)


def test_logaddexp_with_infinities():
    a, b = vec(-math.inf, 0.0, 1.0, -2.0), vec(0.0, -math.inf, 1.0, 5.0)
    check_vjp(torch.logaddexp, a, b)


# --- 0-dim CPU tensors with CUDA tensors ------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_zero_dim_cpu_tensor_with_cuda_tensor():
    s, x = torch.tensor(0.7, dtype=F64), randn(3, 4).cuda()
    fns = [
        lambda s, x: x * s,
        lambda s, x: x / s,
        lambda s, x: torch.atan2(s, x),
        lambda s, x: torch.where(x > 0, s, x),
        lambda s, x: torch.maximum(s, x),
    ]
    for fn in fns:
        ct = randn(3, 4, seed=3).cuda()
        _, (gs, gx) = thunderviz_vjp(fn, (s, x), [ct])
        _, (rs, rx) = reference_vjp(fn, (s, x), [ct])
        assert gs.device.type == "cpu" and gx.device.type == "cuda"
        torch.testing.assert_close(gs, rs)
        torch.testing.assert_close(gx, rx)
