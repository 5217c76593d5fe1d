"""A decomposition from torch's tables that disagrees with the op's own kernel on an output's
shape or dtype is not the op: the trace keeps the op whole (differentiated by its own
rule), rather than decomposing it into something of another shape. torch's
`multilabel_margin_loss_forward` decomposition returns a 1-element loss where the op returns
a 0-dim one, for a 1-d input without reduction. Checked against torch.autograd."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunderviz as tv
from tests.helpers import value_and_grads
from thunderviz.core.symbol import BsymTag

FORWARD = "aten.multilabel_margin_loss_forward.default"


def loss_1d(x, target):
    return F.multilabel_margin_loss(x, target, reduction="none")


def ops(trace):
    return {b.sym.id: b for top in trace.bound_symbols for b in top.walk()}


def test_a_decomposition_of_another_shape_is_not_used():
    x = torch.randn(4, dtype=torch.float64)
    op = ops(tv.trace(loss_1d, x, torch.tensor([3, 0, -1, 1])))[FORWARD]
    assert not op.subsymbols and BsymTag.NON_CORE in op.tags


def test_a_decomposition_that_agrees_is_used():
    x = torch.randn(2, 4, dtype=torch.float64)
    op = ops(tv.trace(loss_1d, x, torch.tensor([[3, 0, -1, 1], [1, 2, -1, 0]])))[FORWARD]
    assert op.subsymbols


@pytest.mark.parametrize("shape", [(4,), (2, 4)])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_multilabel_margin_loss_gradients_match_autograd(shape, reduction):
    target = torch.tensor([3, 0, -1, 1]) if len(shape) == 1 else torch.tensor([[3, 0, -1, 1]] * 2)

    def f(x):
        return F.multilabel_margin_loss(x, target, reduction=reduction).sum()

    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    (want, want_grads), (got, got_grads) = (value_and_grads(fn, x) for fn in (f, tv.jit(f)))
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_grads, want_grads, rtol=1e-12, atol=1e-12)
