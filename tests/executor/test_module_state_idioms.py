"""Module state set up or rewritten by the program itself: weights a spectral_norm or
weight_norm hook sets from its parameters on every call, a plain tensor attribute read and
rewritten (a running average), lazy modules whose parameters take their shapes from the
first call. Losses, gradients and state against eager for three SGD steps, in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.nn.utils import spectral_norm, weight_norm

import thunderviz as tv
from tests.helpers import jitted_twin

F64 = dict(dtype=torch.float64)


class RunningAverage(nn.Module):
    """A plain tensor attribute the forward reads and rewrites: the trace holds the old one."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(5, 2)
        self.avg = torch.zeros(2)

    def forward(self, x):
        y = self.lin(x)
        self.avg = 0.5 * self.avg + 0.5 * y.detach().mean(0)
        return y + self.avg


MODELS = {
    "spectral_norm hook": lambda: nn.Sequential(spectral_norm(nn.Linear(5, 5)), nn.Tanh()),
    "weight_norm hook": lambda: nn.Sequential(weight_norm(nn.Linear(5, 5)), nn.Tanh()),
    "running average attribute": RunningAverage,
    "lazy layers": lambda: nn.Sequential(nn.LazyLinear(4), nn.Tanh(), nn.LazyLinear(2)),
}
# How many traces three steps take. A rewritten attribute the trace never read is held by
# its metadata: the weight the norm hooks set at construction is float32 (`.double()`
# converts parameters, not a plain attribute), the one the first call sets float64, so the
# second call traces again, and no call after it. One the trace reads changes every call.
TRACES = {"spectral_norm hook": 2, "weight_norm hook": 2, "running average attribute": 3}


@pytest.mark.parametrize("name", list(MODELS))
def test_three_sgd_steps_match_eager(name):
    torch.manual_seed(0)
    ours = MODELS[name]().double()
    torch.manual_seed(0)
    theirs = MODELS[name]().double()
    jitted = tv.jit(ours)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (ours, theirs)]
    for step in range(3):
        x = torch.randn(4, 5, **F64)
        losses = []
        for call in (jitted, theirs):
            torch.manual_seed(step)  # a lazy layer's first call draws its initial values
            losses.append(call(x).square().mean())
        for model, loss in zip((ours, theirs), losses, strict=True):
            model.zero_grad()
            loss.backward()
        for a, b in zip(ours.parameters(), theirs.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-14)
        for optimizer in optimizers:
            optimizer.step()
        torch.testing.assert_close(losses[0], losses[1], rtol=1e-12, atol=0)
        for (k, a), b in zip(ours.state_dict().items(), theirs.state_dict().values(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14, msg=k)
    if name in TRACES:
        assert jitted.cache_misses == TRACES[name]


class StoresLast(nn.Module):
    """Keeps its last output on itself, and takes another path while it has none."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(5, 2)
        self.last = None

    def forward(self, x):
        y = self.lin(x * 2 if self.last is None else x * 3)
        self.last = y
        return y


def test_a_rewritten_attribute_reset_by_the_user_takes_eagers_path_again():
    theirs, ours, jitted = jitted_twin(StoresLast)
    for step in range(6):
        if step == 4:
            ours.last = theirs.last = None  # the user resets it: `is None` holds again
        x = torch.randn(3, 5, **F64)
        torch.testing.assert_close(jitted(x), theirs(x), rtol=0, atol=0)
    assert jitted.cache_misses == 2  # one trace per path, each found again


class KeyQueue(nn.Module):
    """A MoCo-style queue: keys written at a pointer kept as a plain int attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)
        self.register_buffer("queue", torch.zeros(8, 2))
        self.ptr = 0

    def forward(self, x):
        keys = self.lin(x)
        with torch.no_grad():
            self.queue[self.ptr : self.ptr + x.shape[0]] = keys.detach()
        self.ptr = (self.ptr + x.shape[0]) % self.queue.shape[0]
        return (keys @ self.queue.t()).sum()


def test_a_plain_value_the_forward_assigns_is_assigned_by_every_run():
    """The pointer comes round to a value already traced: that trace runs, and must move the
    pointer on as its forward did (it stayed, and the queue was written at the same place)."""
    theirs, ours, jitted = jitted_twin(KeyQueue)
    for _ in range(10):
        x = torch.randn(2, 3, **F64)
        torch.testing.assert_close(jitted(x), theirs(x), rtol=0, atol=0)
        assert ours.ptr == theirs.ptr
        torch.testing.assert_close(ours.queue, theirs.queue, rtol=0, atol=0)
    assert jitted.cache_misses == 4  # one trace per pointer value
    trace = tv.trace(ours, torch.randn(2, 3, **F64))
    assert ours.ptr == theirs.ptr  # tracing alone moved nothing
    assert trace.meta["attribute_values"] == [("", "ptr", (ours.ptr + 2) % 8)]


@pytest.mark.parametrize("norm", [spectral_norm, weight_norm], ids=["spectral_norm", "weight_norm"])
def test_a_norm_hook_on_the_jitted_module_itself_is_refused_with_the_way_out(norm):
    """The jitted module's own hooks run around the traced call, so the weight its norm hook
    sets on every call reaches the trace from outside: refused, naming the hook and how to
    have it traced; the way out given agrees with eager."""
    torch.manual_seed(0)
    module = norm(nn.Linear(5, 5)).double()
    x = torch.randn(4, 5, **F64)
    hook = type(next(iter(module._forward_pre_hooks.values()))).__qualname__
    with pytest.raises(RuntimeError, match=rf"`Linear.weight`.*\({hook}\).*Sequential"):
        tv.jit(module)(x)
    ours, eager = (norm(nn.Linear(5, 5)).double() for _ in range(2))
    eager.load_state_dict(ours.state_dict())
    wrapped = tv.jit(nn.Sequential(ours))
    for _ in range(2):
        got, want = wrapped(x), eager(x)
        got.square().sum().backward()
        want.square().sum().backward()
        torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
        for a, b in zip(ours.parameters(), eager.parameters(), strict=True):
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-12, atol=1e-14)
