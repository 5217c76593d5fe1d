"""A model output the loss does not use: the parameters only it reads get None, as in eager
PyTorch, so optimizers that treat None and zero differently (AdamW) train the same."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import thunderviz as tv


class TwoHeads(nn.Module):
    """A trunk with a head the loss uses and an auxiliary head (a pooler) it may not use."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Linear(6, 8)
        self.head = nn.Linear(8, 3)
        self.pooler = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.trunk(x))
        return self.head(h), self.pooler(h).tanh()


class FilledBuffer(TwoHeads):
    """The head's output written into a zero buffer, slice by slice, as Longformer's
    attention fills its banded scores: the loss reads the trunk and head through writes."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.trunk(x))
        out = self.head(h)
        buf = out.new_zeros((out.shape[0], 4))
        buf[:, :2] = out[:, :2]
        buf[:, 3] = out[:, 2] * 2
        return buf, self.pooler(h).tanh()


def _train(model: nn.Module, loss_of, steps: int = 3) -> list[dict[str, torch.Tensor | None]]:
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, weight_decay=0.5)
    grads = []
    for step in range(steps):
        x = torch.randn(5, 6, generator=torch.Generator().manual_seed(step))
        opt.zero_grad(set_to_none=True)
        loss_of(*model(x)).backward()
        grads.append(
            {n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()}
        )
        opt.step()
    return grads


LOSSES = {
    "pooler unused": lambda out, pooled: out.square().mean(),
    "head unused": lambda out, pooled: pooled.sum(),
    "both used": lambda out, pooled: out.square().mean() + pooled.sum(),
}


@pytest.mark.parametrize("model", [TwoHeads, FilledBuffer], ids=["two_heads", "filled_buffer"])
@pytest.mark.parametrize("loss", list(LOSSES))
def test_parameters_only_an_unused_output_reads_get_none_like_eager(loss: str, model) -> None:
    torch.manual_seed(0)
    eager = model()
    ours = copy.deepcopy(eager)
    expected = _train(eager, LOSSES[loss])
    got = _train(tv.jit(ours), LOSSES[loss])
    for step, (e, g) in enumerate(zip(expected, got, strict=True)):
        for name in e:
            assert (e[name] is None) == (g[name] is None), (step, name, e[name], g[name])
            if e[name] is not None:
                torch.testing.assert_close(g[name], e[name], rtol=1e-5, atol=1e-6)
    for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6, msg=name)
