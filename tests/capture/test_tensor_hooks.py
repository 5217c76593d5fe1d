"""`t.register_hook(fn)` inside a jitted program runs in every backward, on the gradient
eager's hook gets, and what it returns is the gradient that flows on, as in eager. Each case
is compared with the same program run eagerly (float64, to 1e-12): gradients, and what the
hooks saw, call by call."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from thunderviz.capture.errors import CaptureError

F64 = dict(dtype=torch.float64)


class Hooked(nn.Module):
    """Hooks on an intermediate (doubling), on the input (observing) and on a block's output
    in each of four identical blocks (scaling by the block's index): the repeated blocks
    are what block stamping writes out from one recording."""

    def __init__(self, seen: list) -> None:
        super().__init__()
        self.seen = seen
        self.blocks = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        x.register_hook(lambda g: self.seen.append(("input", g.clone())))
        h = x * 1.5
        h.register_hook(lambda g: g * 2)
        for i, block in enumerate(self.blocks):
            h = torch.tanh(block(h))
            h.register_hook(lambda g, i=i: g * (i + 1))
        return self.head(h).sum()


def _run(model, seen, x):
    seen.clear()
    model(x).backward()
    return [(kind, g.clone()) for kind, g in seen]


def test_hooks_change_and_see_the_gradients_eager_does():
    torch.manual_seed(0)
    seen_eager, seen_ours = [], []
    eager = Hooked(seen_eager).double()
    ours = copy.deepcopy(eager)
    ours.seen = seen_ours
    jitted = tv.jit(ours)
    for _ in range(3):
        x = torch.randn(3, 4, **F64, requires_grad=True)
        x2 = x.detach().clone().requires_grad_()
        want = _run(eager, seen_eager, x)
        got = _run(jitted, seen_ours, x2)
        assert [k for k, _ in got] == [k for k, _ in want] == ["input"]
        torch.testing.assert_close(got[0][1], want[0][1], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(x2.grad, x.grad, rtol=1e-12, atol=1e-12)
        for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-12, atol=1e-12, msg=name)
            p.grad = q.grad = None
    assert jitted.cache_misses == 1


def removed_before_backward(x):
    h = x * 3
    handle = h.register_hook(lambda g: g * 100)
    out = (h * h).sum()
    handle.remove()
    return out


def hook_on_the_output(x):
    out = (x * x).sum()
    out.register_hook(lambda g: g * 3)
    return out


def two_hooks_in_order(x):
    h = x.sin()
    h.register_hook(lambda g: g * 2)
    h.register_hook(lambda g: g + 1)  # runs after the first, on what it returned
    return (h * 3).sum()


def the_first_of_two_removed(x):
    h = x.sin()
    first = h.register_hook(lambda g: g * 2)
    h.register_hook(lambda g: g + 1)
    first.remove()
    return (h * 3).sum()


@pytest.mark.parametrize(
    "fn",
    [removed_before_backward, hook_on_the_output, two_hooks_in_order, the_first_of_two_removed],
)
def test_removed_hooks_and_hooks_on_the_output_act_as_in_eager(fn):
    x = torch.randn(5, **F64, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    fn(x).backward()
    jitted = tv.jit(fn)
    for _ in range(2):
        y.grad = None
        jitted(y).backward()
        torch.testing.assert_close(y.grad, x.grad, rtol=1e-12, atol=1e-12)


def used_then_hooked(x):
    h = x * 2
    first = h.sum()
    h.register_hook(lambda g: g * 2)
    return first + (h * h).sum()


def test_a_hook_registered_after_the_tensor_was_used_is_refused_with_its_line():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(CaptureError, match=r"after the program already used it.*before its"):
        tv.jit(used_then_hooked)(x)


class HoldingHooks(nn.Module):
    """Hooks holding a tensor of the call: the activation itself, a parameter, an argument."""

    def __init__(self, holds: str) -> None:
        super().__init__()
        self.lin, self.w, self.holds = nn.Linear(3, 3), nn.Parameter(torch.ones(3)), holds

    def forward(self, x, scale):
        h = torch.tanh(self.lin(x))
        held = {"activation": h, "parameter": self.w, "argument": scale}[self.holds]
        h.register_hook(lambda g: g * held.detach())
        return h.sum()


@pytest.mark.parametrize("holds", ["activation", "parameter", "argument"])
def test_a_hook_holding_a_tensor_of_the_call_is_refused_with_its_line(holds):
    """Every later run of the trace would hand the hook the traced call's tensor (a
    parameter's value before the optimizer stepped, the first call's argument): the
    gradients went wrong from the second call on, without a word."""
    model = HoldingHooks(holds).double()
    x, scale = torch.randn(2, 3, **F64), torch.rand(3, **F64)
    with pytest.raises(CaptureError, match=r"register_hook at .*holds a tensor of this call"):
        tv.jit(model)(x, scale)


# --- retain_grad: eager's no-op on a leaf, eager's error; on an intermediate, as eager -----
# (on one the program returns or keeps: tests/executor/test_output_hooks.py)


def retaining(x, w):
    x.retain_grad()
    w.retain_grad()
    return (x * w).sin().sum()


def test_retain_grad_on_leaf_inputs_is_eagers_no_op():
    x, w = torch.randn(3, **F64, requires_grad=True), torch.randn(3, **F64, requires_grad=True)
    tv.jit(retaining)(x, w).backward()
    got = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    retaining(x, w).backward()
    torch.testing.assert_close(got, (x.grad, w.grad), rtol=1e-12, atol=0)


def test_retain_grad_without_grad_raises_eagers_error():
    w = torch.randn(3, **F64, requires_grad=True)
    for fn in (retaining, tv.jit(retaining)):
        with pytest.raises(
            RuntimeError, match="can't retain_grad on Tensor that has requires_grad"
        ):
            fn(torch.randn(3, **F64), w)


def test_retain_grad_on_an_intermediate_kept_nowhere_changes_nothing():
    def f(x):
        h = x * 2
        h.retain_grad()
        return (h * h).sum()

    x = torch.randn(3, **F64, requires_grad=True)
    jitted = tv.jit(f)
    for _ in range(2):
        x.grad = None
        jitted(x).backward()
        got = x.grad.clone()
        x.grad = None
        f(x).backward()
        torch.testing.assert_close(got, x.grad, rtol=0, atol=0)
