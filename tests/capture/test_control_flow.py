"""`torch.cond` under a trace (capture/control_flow.py): the branch its predicate picks, as
eager computes it, guarded like a Python `if` on a tensor's value. Against eager, float64,
over steps that take both branches (it was refused: "no rule registered for
HigherOrderOperator cond")."""

from __future__ import annotations

import threading

import torch
import torch.nn as nn

import thunderviz as tv
from tests.helpers import assert_same_state, jitted_twin

F64 = dict(dtype=torch.float64)


class Gated(nn.Module):
    """A branch on the data (a tensor predicate), one on a flag (a Python bool), a branch
    reading a parameter it closes over, and two outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.w = nn.Parameter(torch.randn(4))

    def forward(self, x, flag: bool):
        h = self.lin(x)
        h = torch.cond(h.sum() > 0, lambda t: t.sin(), lambda t: t.cos() * 2, (h,))
        a, b = torch.cond(
            flag, lambda t, u: (t * self.w, u), lambda t, u: (t - self.w, u * 2), [h, x]
        )
        return a.sum() + b.sum()


def test_cond_trains_like_eager_on_both_branches():
    eager, ours, jitted = jitted_twin(Gated)
    for step in range(4):
        x = torch.randn(3, 4, **F64) + (3.0 if step % 2 else -3.0)
        flag = step < 2
        got, want = jitted(x, flag), eager(x, flag)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        got.backward()
        want.backward()
        assert_same_state(ours, eager)
    # each branch of the data is a trace of its own, told apart by the predicate's guard
    assert jitted.cache_misses == 4


def test_a_branch_returning_its_operand_returns_a_copy_as_eagers_does():
    x = torch.randn(3, **F64)
    out = tv.jit(lambda x: torch.cond(x.sum() > -100, lambda t: t, lambda t: t + 1, (x,)))(x)
    assert out is not x
    torch.testing.assert_close(out, x, rtol=0, atol=0)


def test_torch_cond_is_torchs_own_outside_the_trace():
    original = torch.cond
    seen = []

    def other_thread():
        seen.append(torch.cond(False, lambda: torch.ones(1), lambda: torch.zeros(1), ()))

    def program(x):
        worker = threading.Thread(target=other_thread)
        worker.start()
        worker.join()
        return torch.cond(True, lambda t: t * 2, lambda t: t, (x,))

    tv.trace(program, torch.ones(2))
    assert torch.cond is original
    assert seen and torch.equal(seen[0], torch.zeros(1))
