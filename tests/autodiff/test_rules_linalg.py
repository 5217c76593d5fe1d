"""Grad rules for matrix products, against torch.autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunderviz as tv
from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_vjp

F64 = torch.float64


LINALG_OPS = [
    "mm",
    "bmm",
    "addmm",
    ("addmm", "decomposed"),
    "baddbmm",
    "addbmm",
    "dot",
    "mv",
    "addmv",
    "matmul",
    "nn.functional.linear",
    "einsum",
]


@pytest.mark.parametrize("fn,args,kwargs", sample_params(LINALG_OPS, limit=8))
def test_linalg_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


def _ops(fn, *args):
    tr = tv.trace(fn, *[a.requires_grad_() for a in args])
    return {b.sym.id for top in tr.bound_symbols for b in top.walk()}


def test_linear_decomposes_to_t_addmm_mm_and_view():
    x2, x3 = torch.randn(4, 6, dtype=F64), torch.randn(2, 3, 6, dtype=F64)
    w, b = torch.randn(5, 6, dtype=F64), torch.randn(5, dtype=F64)
    assert {"aten.t.default", "aten.addmm.default"} <= _ops(F.linear, x2, w, b)
    assert {"aten.view.default", "aten.addmm.default"} <= _ops(F.linear, x3, w, b)
    assert "aten.mm.default" in _ops(lambda x, w: F.linear(x, w), x3, w)
    for x in (x2, x3, torch.randn(6, dtype=F64)):
        check_vjp(F.linear, x.detach(), w.detach(), b.detach())
        check_vjp(F.linear, x.detach(), w.detach())
    check_vjp(F.linear, x3.detach(), w[0].detach())  # a 1-D weight: a dot product per row
    check_vjp(F.linear, x3.detach(), w[0].detach(), b[0].detach())


def test_linear_keeps_the_fused_call_and_saves_the_weight_not_a_transposed_copy():
    x = torch.randn(2, 3, 6, requires_grad=True)
    w, b = torch.randn(5, 6, requires_grad=True), torch.randn(5, requires_grad=True)
    result = tv.autodiff(tv.trace(F.linear, x, w, b))
    assert [op.sym.id for op in result.augmented_forward.bound_symbols] == [
        "torch.nn.functional.linear"
    ]
    x_arg, w_arg, _ = result.forward.args
    assert sorted(s.name for s in result.saved_for_backward) == sorted([x_arg.name, w_arg.name])


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [
        ((6,), (6,)),
        ((4, 6), (6,)),
        ((6,), (6, 3)),
        ((2, 4, 6), (6,)),
        ((6,), (2, 6, 4)),
        ((2, 4, 6), (2, 6, 3)),
        ((2, 1, 4, 6), (3, 6, 5)),
        ((4, 6), (2, 6, 5)),
    ],
)
def test_matmul_shapes(a_shape, b_shape):
    check_vjp(torch.matmul, torch.randn(a_shape, dtype=F64), torch.randn(b_shape, dtype=F64))


def test_scaled_products():
    c, a, b = (
        torch.randn(2, 4, 3, dtype=F64),
        torch.randn(2, 4, 6, dtype=F64),
        torch.randn(2, 6, 3, dtype=F64),
    )
    check_vjp(lambda c, a, b: torch.baddbmm(c, a, b, beta=0.5, alpha=-2.0), c, a, b)
    check_vjp(lambda c, a, b: torch.baddbmm(c[0, :1], a, b), c, a, b)  # broadcast input
    check_vjp(lambda c, a, b: torch.addbmm(c[0], a, b, alpha=3.0), c, a, b)
    m1, m2 = torch.randn(4, 6, dtype=F64), torch.randn(6, 3, dtype=F64)
    check_vjp(
        lambda c, a, b: torch.addmm(c, a, b, beta=2.0, alpha=0.5), torch.randn(3, dtype=F64), m1, m2
    )
    check_vjp(
        lambda c, m, v: torch.addmv(c, m, v, beta=0.0, alpha=2.0),
        torch.randn(4, dtype=F64),
        m1,
        torch.randn(6, dtype=F64),
    )


def test_only_inputs_that_need_it_get_gradients_and_residuals():
    """mm's backward for `a` reads only `b`: with a constant `a`, `b`'s gradient saves a."""
    a, b = torch.randn(4, 6), torch.randn(6, 3, requires_grad=True)
    tr = tv.trace(lambda b: a @ b, b)
    result = tv.autodiff(tr)
    assert [s.name for s in result.saved_for_backward] == []  # a is a trace constant
    ops = [x.sym.id for x in result.backward.bound_symbols]
    assert ops.count("aten.mm.default") == 1
