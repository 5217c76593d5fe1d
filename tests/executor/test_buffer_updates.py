"""Buffers a forward replaces (`self.ema = 0.9 * self.ema + ...`, `self.steps = self.steps + 1`)
hold under `jit` what they hold in eager, and a gradient that reads a buffer's value from
before its update reads that value. Compared with the same module run eagerly, in float64,
to 1e-12, over several steps."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from tests.helpers import assert_same_state, jitted_twin
from thunderviz.capture.errors import CaptureError

F64 = dict(dtype=torch.float64)


class EMA(nn.Module):
    """Running statistics replaced each step (an EMA of activations, a step counter)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("ema", torch.zeros(3))
        self.register_buffer("steps", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        h = self.lin(x)
        self.ema = 0.9 * self.ema + 0.1 * h.detach().mean(0)
        self.steps = self.steps + 1
        return h.tanh().sum()


class ScaledThenUpdated(nn.Module):
    """The backward reads the buffer as it was before the forward replaced it."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 3))

    def forward(self, x):
        out = (self.lin(x) * self.scale).sum()
        self.scale = self.scale * 2
        return out


class InPlaceThenReplaced(nn.Module):
    """An in-place update, then a replacement: the last value is the one kept."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("total", torch.zeros(3))

    def forward(self, x):
        h = self.lin(x)
        self.total.add_(h.detach().sum(0))
        self.total = self.total * 0.5
        return h.sum()


@pytest.mark.parametrize("make", [EMA, ScaledThenUpdated, InPlaceThenReplaced])
def test_replaced_buffers_and_gradients_match_eager_over_steps(make):
    eager, ours, jitted = jitted_twin(make)
    for _ in range(4):
        x = torch.randn(5, 3, **F64)
        jitted(x).backward()
        eager(x).backward()
        assert_same_state(ours, eager)
    assert jitted.cache_misses == 1


def test_tracing_a_module_that_replaces_buffers_leaves_them_as_they_were():
    torch.manual_seed(0)
    model = EMA()
    before = {k: v.clone() for k, v in model.named_buffers()}
    tv.trace(model, torch.randn(5, 3))
    for name, b in model.named_buffers():
        assert torch.equal(b, before[name]), name


class Reshaped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("history", torch.zeros(2))

    def forward(self, x):
        self.history = torch.cat([self.history, x.detach().sum(0)])
        return x.sum()


def test_a_buffer_replaced_by_another_shape_is_refused_with_the_way_out():
    with pytest.raises(CaptureError, match=r"replaces 'history' \(\(2,\).*Update it in place"):
        tv.jit(Reshaped())(torch.randn(4, 1))


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        h = self.lin(x)
        self.last = h.detach()  # an intermediate of the block, kept on it
        return torch.tanh(h)


class KeepsActivations(nn.Module):
    """Debugging code's habit: each of four identical blocks (what block stamping writes out
    from one recording) keeps its activation on itself; the top keeps the logits."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(_Block() for _ in range(4))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        self.logits = x * 2  # needs a gradient, as in eager
        return x.sum()


def test_tensors_the_forward_keeps_on_modules_are_this_calls_as_in_eager():
    eager, ours, jitted = jitted_twin(KeepsActivations)
    for _ in range(3):
        x = torch.randn(2, 3, **F64)
        jitted(x).backward()
        eager(x).backward()
        for i, (a, b) in enumerate(zip(ours.blocks, eager.blocks, strict=True)):
            torch.testing.assert_close(a.last, b.last, rtol=0, atol=0, msg=str(i))
        torch.testing.assert_close(ours.logits, eager.logits, rtol=0, atol=0)
        assert ours.logits.requires_grad
    assert jitted.cache_misses == 1


@pytest.mark.parametrize("fake", [False, True])
def test_tracing_leaves_the_modules_attributes_as_they_were(fake):
    model = KeepsActivations()
    model.logits = "before"
    tv.trace(model, torch.randn(2, 3), fake=fake)
    assert model.logits == "before"
    assert not any("last" in vars(b) for b in model.blocks)
