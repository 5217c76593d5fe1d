"""Grad rules for casts, copies, in-place chains, dropout, and the ops that carry no
gradient (rules/casts.py), checked against torch.autograd.
"""

from __future__ import annotations

import torch

from tests.autodiff.inputs import randn
from tests.helpers import check_vjp, reference_vjp, thunderviz_vjp

F64 = torch.float64
aten = torch.ops.aten


def test_casts_and_copies():
    x = randn(3, 4)
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
    x = randn(3, 4).float()
    check_vjp(lambda x: (x.double() ** 2).sum(), x, rtol=1e-6, atol=1e-6)


def test_inplace_chain():
    check_vjp(
        lambda x: x.clone().mul_(2).add_(x).clamp_(-1, 1).sub_(x, alpha=2).exp_(), randn(3, 4)
    )


def test_integer_and_bool_results_carry_no_gradient():
    x = randn(3, 4)
    check_vjp(
        lambda x: (
            (x > 0).float() * x
            + (x.isnan() | x.isinf()).to(x.dtype)
            + torch.logical_not(x < 1) * x.ceil().long()
        ),
        x,
    )


def _assert_no_gradient(fn, *args):
    """autograd gives none (the outputs need no gradient); ours gives none either."""
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        outs = fn(*args)
    outs = outs if isinstance(outs, (tuple, list)) else [outs]
    cts = [torch.randn(o.shape, dtype=o.dtype, generator=gen) for o in outs]
    _, ref = reference_vjp(fn, args, cts)
    assert all(r is None for r in ref)
    _, ours = thunderviz_vjp(fn, args, cts)
    assert all(g is None for g in ours), ours


def test_detach_and_factories_carry_no_gradient():
    x = randn(3, 4)
    _assert_no_gradient(lambda x: x.detach() * 2, x)
    _assert_no_gradient(
        lambda x: torch.zeros_like(x) + torch.ones_like(x) + torch.full_like(x, 3.0), x
    )
    _assert_no_gradient(lambda x: x.new_zeros(2) + x.new_ones(2) + x.new_full((2,), 3.0), x)


def test_overwrites_and_draws_give_a_zero_gradient():
    """Their outputs do not depend on the input's values, but eager's gradient is zeros, not
    none (tests/autodiff/test_rules_at_edges.py has them all, the random draws too, under
    jit)."""
    x = randn(3, 4)
    check_vjp(lambda x: torch.fill(x, 2.0), x)
    check_vjp(lambda x: x.clone().zero_() + 1, x)


def test_dropout_in_training_scales_by_the_kept_mask():
    x = randn(6, 5) + 3  # nonzero everywhere, so out != 0 exactly where kept
    ct = randn(6, 5, seed=1)
    (out, mask), (g,) = thunderviz_vjp(
        lambda x: aten.native_dropout(x, 0.3, True), (x,), [ct, torch.zeros(())]
    )
    torch.testing.assert_close(g, ct * mask / 0.7)
    out, (g,) = thunderviz_vjp(lambda x: torch.nn.functional.dropout(x, 0.3), (x,), [ct])
    torch.testing.assert_close(g, ct * (out != 0) / 0.7)
    assert 0 < (out != 0).sum() < out.numel()


def test_dropout_deterministic_cases():
    x = randn(3, 4)
    check_vjp(
        lambda x: [
            torch.nn.functional.dropout(x, 0.5, training=False),
            aten.native_dropout(x, 0.5, False)[0],
            aten.native_dropout(x, 0.0, True)[0],
            aten.native_dropout(x, 1.0, True)[0],
        ],
        x,
    )
