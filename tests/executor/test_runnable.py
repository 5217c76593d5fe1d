"""jit runs the backward without its reshapes to a tensor's own shape; the backward the user
sees keeps them, and gradients stay eager's, bit for bit."""

from __future__ import annotations

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from thunderviz.executor.runnable import without_identity_reshapes


class TwoLinears(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 8)
        self.fc2 = nn.Linear(8, 3)

    def forward(self, x, y):
        return F.cross_entropy(self.fc2(F.gelu(self.fc1(x))), y)


def _identity_reshapes(trace) -> int:
    return sum(
        b.sym.id == "aten.reshape.default" and tuple(b.output.shape) == tuple(b.args[0].shape)
        for b in trace.bound_symbols
    )


def test_a_small_program_runs_without_identity_reshapes_with_eager_gradients():
    torch.manual_seed(0)
    eager = TwoLinears().double()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    x, y = torch.randn(5, 6, dtype=torch.float64), torch.randint(0, 3, (5,))
    for _ in range(2):
        eager(x, y).backward()
        jitted(x, y).backward()
    for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=name)
    (shown,) = tv.last_backward_traces(jitted)
    assert _identity_reshapes(shown) >= 2  # the trace the user sees is the rule's own
    runs = without_identity_reshapes(shown)
    assert _identity_reshapes(runs) == 0
    assert len(runs.bound_symbols) == len(shown.bound_symbols) - _identity_reshapes(shown)


def _reshaped(x):
    return x.reshape(4, 3)


def test_a_reshape_that_is_a_gradient_is_kept_and_aliases_as_in_eager():
    jitted = tv.jit(_reshaped)
    for fn in (_reshaped, jitted):
        x = torch.randn(4, 3, requires_grad=True)
        g = torch.randn(4, 3)
        fn(x).backward(g)
        torch.testing.assert_close(x.grad, g, rtol=0, atol=0)
        assert x.grad.data_ptr() == g.data_ptr()  # autograd kept the cotangent's storage
    (shown,) = tv.last_backward_traces(jitted)
    assert without_identity_reshapes(shown) is shown  # its one reshape is the output
