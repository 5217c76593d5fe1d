"""Tensors the program reads from outside and writes into (a global counter, a tensor kept as
a plain module attribute, a write through a view of one): every jitted call leaves them as
eager's does, and tracing alone leaves them as they were (capture/write_backs.py). Against
eager, call by call."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from tests.helpers import jitted_twin

F64 = dict(dtype=torch.float64)
COUNTER = torch.zeros((), **F64)
WINDOW = torch.zeros(4, **F64)


def counted(x):
    COUNTER.add_(1.0)
    return (x * COUNTER).sum()


def windowed(x):
    WINDOW[1:].add_(x[:3].detach())  # through a view of the global
    return (x * WINDOW.sum()).sum()


class Steps(nn.Module):
    """A step count kept as a plain tensor attribute, not a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)
        self.steps = torch.zeros((), **F64)

    def forward(self, x):
        self.steps += 1
        return (self.lin(x) * self.steps).sum()


@pytest.mark.parametrize("fn,state", [(counted, COUNTER), (windowed, WINDOW)])
def test_a_global_written_in_place_changes_on_every_call_as_in_eager(fn, state):
    start = state.clone()
    x = torch.randn(4, **F64, requires_grad=True)
    trace = tv.trace(fn, x)
    torch.testing.assert_close(state, start, rtol=0, atol=0)  # tracing left it alone
    assert "write the new value of c0 back into it" in str(trace)
    want_values, want_grads = [], []
    for _ in range(3):
        x.grad = None
        want_values.append(fn(x))
        want_values[-1].backward()
        want_grads.append(x.grad)
    want_state = state.clone()
    state.copy_(start)
    jitted = tv.jit(fn)
    for want, want_grad in zip(want_values, want_grads, strict=True):
        x.grad = None
        got = jitted(x)
        got.backward()
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(x.grad, want_grad, rtol=0, atol=0)
    torch.testing.assert_close(state, want_state, rtol=0, atol=0)
    state.copy_(start)


def test_a_plain_tensor_attribute_written_in_place_counts_every_call():
    theirs, ours, jitted = jitted_twin(Steps)
    for _ in range(3):
        x = torch.randn(2, 4, **F64)
        torch.testing.assert_close(jitted(x), theirs(x), rtol=0, atol=0)
    assert ours.steps.item() == theirs.steps.item() == 3


def test_tracing_a_program_that_fails_after_the_write_leaves_the_global_alone():
    def fails(x):
        COUNTER.add_(1.0)
        return x @ torch.ones(5, **F64)  # shapes that do not match

    with pytest.raises(RuntimeError):
        tv.trace(fails, torch.randn(4, **F64))
    assert COUNTER.item() == 0
