"""In-place updates under no_grad of tensors that need a gradient (a weight clipped in the
forward, Embedding's max_norm renormalising rows, an activation clamped, the variance
`gaussian_nll_loss` clamps inside its own call) are invisible to
eager's autograd: later uses differentiate as to the tensor itself, at its new value. Under
jit the gradients, the updated parameters and the losses are eager's, over several steps
(float64, to 1e-12)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from tests.helpers import assert_same_state, jitted_twin
from thunderviz.capture.no_grad_updates import StraightThrough

F64 = dict(dtype=torch.float64)


class ClippedWeight(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        with torch.no_grad():
            self.lin.weight.clamp_(-0.2, 0.2)
        return self.lin(x)


class ClampedActivation(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        with torch.no_grad():
            h.clamp_(-0.5, 0.5)
        return h * 2


class MaxNormEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4, max_norm=0.5, padding_idx=0)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(self.emb((x.abs() * 3).long() % 10))


class MaxNormEmbeddingBag(nn.Module):
    """EmbeddingBag renormalises the same way, inside its functional call: its weight lost
    its gradient when the lookup read the renormalised rows within that one call."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(10, 4, max_norm=0.5, mode=mode)
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(self.bag((x.abs() * 3).long() % 10))


class GaussianHead(nn.Module):
    """`F.gaussian_nll_loss` clamps a copy of the variance to `eps` in place under no_grad,
    inside the call: autograd never sees the clamp, and where the variance is below eps its
    gradient is large (-1/(2 eps) and more), not 0 as the clamp, differentiated, once had it."""

    def __init__(self) -> None:
        super().__init__()
        self.mean, self.var = nn.Linear(4, 1), nn.Linear(4, 1)

    def forward(self, x):
        target = x.sum(1, keepdim=True)
        return F.gaussian_nll_loss(self.mean(x), target, self.var(x).pow(2) * 1e-6) * 1e-6


class InitRow(nn.Module):
    """`nn.init.constant_` on a row view: torch's init writes under its own no_grad, inside
    its call, into the parameter the program reads after."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        nn.init.constant_(self.w[0], 0.25)
        return x @ self.w


class WrittenThroughAView(nn.Module):
    """A view made with grad, written under no_grad, then read with its base: a parameter's
    row and an activation's column. Both reads differentiate as to the tensor itself."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        row, h = self.w[0], self.lin(x)
        column = h[:, 0]
        with torch.no_grad():
            row.fill_(0.5)
            column.mul_(0.5)
        return x @ self.w + row + h * column[:, None]


MAKERS = {
    "clipped_weight": ClippedWeight,
    "clamped_activation": ClampedActivation,
    "max_norm_embedding": MaxNormEmbedding,
    "max_norm_bag_sum": lambda: MaxNormEmbeddingBag("sum"),
    "max_norm_bag_mean": lambda: MaxNormEmbeddingBag("mean"),
    "max_norm_bag_max": lambda: MaxNormEmbeddingBag("max"),
    "gaussian_nll_loss": GaussianHead,
    "init_row": InitRow,
    "written_through_a_view": WrittenThroughAView,
}


@pytest.mark.parametrize("make", list(MAKERS.values()), ids=list(MAKERS))
def test_no_grad_updates_train_like_eager(make):
    eager, ours, jitted = jitted_twin(make)
    for _ in range(3):
        x = torch.randn(5, 4, **F64)
        got, want = jitted(x).pow(2).sum(), eager(x).pow(2).sum()
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        got.backward()
        want.backward()
        assert_same_state(ours, eager)
        for p, q in zip(eager.parameters(), ours.parameters(), strict=True):
            with torch.no_grad():  # a step, so the next clip or renorm has work to do
                p -= 0.5 * p.grad
                q -= 0.5 * q.grad
            p.grad = q.grad = None


def test_a_write_through_a_detached_alias_under_no_grad_is_reattached_once():
    """Its base is the target twice over (a view's base, and a detached alias's base): one
    StraightThrough, not two in a row."""

    class Halved(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(3))

        def forward(self, x):
            alias = self.w.detach()
            with torch.no_grad():
                alias.mul_(0.5)
            return (x * self.w).sum()

    trace = tv.trace(Halved(), torch.randn(3))
    calls = [getattr(b.args[0], "value", None) for b in trace.bound_symbols if b.args]
    assert sum(getattr(c, "cls", None) is StraightThrough for c in calls) == 1
