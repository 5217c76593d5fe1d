"""Random draws through thunderviz.jit equal eager's under the same seed (same numbers, same
order, the backward using the mask the forward drew), and attention dropout trains."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from tests.autodiff.idioms_training import train_like_eager


class _AttentionBlock(nn.Module):
    """Dropout inside multi_head_attention_forward, then nn.Dropout on a transposed tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 2, dropout=0.1)
        self.drop = nn.Dropout(0.1)

    def forward(self, x):  # x: (batch, seq, feature)
        h = x.transpose(0, 1)
        return self.drop(self.attn(h, h, h, need_weights=False)[0].transpose(0, 1))


def _loss(out):
    return (out * torch.linspace(-1, 1, out.numel(), dtype=out.dtype).reshape(out.shape)).sum()


def test_attention_block_with_two_dropouts_trains_like_eager():
    # float64: in float32 the trace's matmul runs as bmm where eager's (with grad) runs mm,
    # so the gradients differ by rounding (~1e-5) though the masks are equal
    torch.manual_seed(0)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    train_like_eager(_AttentionBlock().double(), lambda step: ((x,), {}), _loss, dtype=torch.float64)


@pytest.mark.parametrize("draw", ["bernoulli_", "uniform_", "exponential_"])
def test_in_place_draws_into_a_transposed_tensor_equal_eager(draw):
    """The draw fills memory order; the trace must put each number where eager put it."""
    def fn(x):
        noise = getattr(torch.empty_like(x.t()), draw)()
        return x.t() * noise

    x = torch.randn(6, 4, requires_grad=True)
    jitted = tv.jit(fn)
    torch.manual_seed(7)
    eager = fn(x)
    torch.manual_seed(7)
    out = jitted(x)
    assert torch.equal(out, eager)
    g = torch.randn_like(out)
    (grad_e,) = torch.autograd.grad(eager, x, g)
    (grad_j,) = torch.autograd.grad(out, x, g)
    assert torch.equal(grad_j, grad_e)


def test_draws_happen_in_eager_order_across_layers():
    """Several dropouts on differently laid out tensors: masks, output and gradients match."""
    def fn(x, w):
        a = F.dropout(x @ w, 0.3)
        b = F.dropout(a.transpose(0, 1), 0.5)
        return F.dropout(b.permute(1, 0) * 2, 0.2).sum(0)

    x = torch.randn(5, 7, dtype=torch.float64)
    w = torch.randn(7, 3, dtype=torch.float64, requires_grad=True)
    torch.manual_seed(3)
    eager = fn(x, w)
    (grad_e,) = torch.autograd.grad(eager.sum(), w)
    torch.manual_seed(3)
    out = tv.jit(fn)(x, w)
    (grad_j,) = torch.autograd.grad(out.sum(), w)
    assert torch.equal(out, eager)
    assert torch.equal(grad_j, grad_e)
