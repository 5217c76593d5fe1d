"""A tensor the program was given, whose `.grad` it reads or sets, whose `.data` it sets or
whose `requires_grad` it turns off inside a traced call.

Capture runs the program on copies whose `.grad` is None: before these were refused, a
`clip_grad_norm_` inside a jitted step clipped nothing (the user's gradient stayed 5.0
where eager's became 0.35), a branch on `p.grad is not None` took the other side (half
eager's loss), `p.grad = None` left the user's gradient in place, `p.data = ...` left the
parameter as it was (the next call computed with the old one), `requires_grad_(False)`
did not freeze it, and a hook registered on a parameter in every forward (eager: one more
each call) ran once a call. Each is now refused with the line and the way out; a tensor the program
makes keeps eager's `.grad` (None)."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv
from thunderviz.capture.errors import CaptureError


@pytest.fixture
def model():
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 2)
    m.weight.grad = torch.full_like(m.weight, 5.0)
    m.bias.grad = torch.full_like(m.bias, 5.0)
    return m


def _clipping(m):
    def step(x):
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        return m(x).sum()

    return step


def _branching(m):
    def step(x):
        if m.weight.grad is not None:
            return m(x).sum() * 2
        return m(x).sum()

    return step


def _clearing(m):
    def step(x):
        for p in m.parameters():
            p.grad = None
        return m(x).sum()

    return step


def _zeroing_through_an_optimizer(m):
    optimizer = torch.optim.SGD(m.parameters(), lr=0.1)

    def step(x):
        optimizer.zero_grad()
        return m(x).sum()

    return step


def _reading_an_argument(m):
    def step(x):
        return m(x).sum() + x.grad.sum()

    return step


def _replacing_data(m):
    def step(x):
        out = m(x).sum()
        m.weight.data = m.weight.data * 0.5
        return out

    return step


def _freezing(m):
    def step(x):
        out = m(x).sum()
        m.weight.requires_grad_(False)
        return out

    return step


def _hooking_a_parameter(m):
    def step(x):
        m.weight.register_hook(lambda g: g * 2)  # eager: one more hook on every call
        return m(x).sum()

    return step


def _hooking_after_accumulation(m):
    def step(x):
        m.weight.register_post_accumulate_grad_hook(lambda p: None)
        return m(x).sum()

    return step


PROGRAMS = {
    _clipping: "grad",
    _branching: "grad",
    _clearing: "grad",
    _zeroing_through_an_optimizer: "grad",
    _reading_an_argument: "grad",
    _replacing_data: "data",
    _freezing: "requires_grad",
    _hooking_a_parameter: "register_hook",
    _hooking_after_accumulation: "register_post_accumulate_grad_hook",
}


@pytest.mark.parametrize("make", PROGRAMS, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("entry", ["jit", "trace"])
def test_what_a_trace_would_not_carry_is_refused_with_the_line_and_nothing_changes(
    model, make, entry
):
    x = torch.randn(4, 3, requires_grad=True)
    x.grad = torch.ones_like(x)
    weight = model.weight.detach().clone()
    program = make(model)
    attribute = PROGRAMS[make]
    if attribute.startswith("register") and entry == "trace":
        pytest.skip("tv.trace reads a closure's module as constants: its hooks are eager's")
    line = rf"Tensor\.{attribute} at .*test_given_tensors\.py"
    with pytest.raises(CaptureError, match=line) as e:
        if entry == "jit":
            tv.jit(program)(x)
        else:
            tv.trace(program, x)
    assert e.value.op == f"torch.Tensor.{attribute}"
    assert "outside the traced call" in str(e.value)
    assert torch.equal(model.weight.grad, torch.full_like(model.weight, 5.0))
    assert torch.equal(model.weight, weight) and model.weight.requires_grad
    assert torch.equal(x.grad, torch.ones_like(x))


def test_a_tensor_the_program_makes_has_eagers_grad(model):
    """A tensor made inside has no gradient but what the program gives it: read as eager."""

    def step(x):
        h = model(x)
        leaf = torch.zeros(2, requires_grad=True)
        leaf.grad = torch.ones(2)
        missing = h.grad is None  # (a non-leaf: None; eager warns, the trace's copy does not)
        return h.sum() * (2 if missing else 3) + leaf.grad.sum()

    x = torch.randn(4, 3)
    with pytest.warns(UserWarning, match="non-leaf"):
        want = step(x)
    torch.testing.assert_close(tv.jit(step)(x), want)
