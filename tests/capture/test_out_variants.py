"""`out=` calls (`torch.add(a, b, out=buf)`, spectral norm's power iteration writing into its
`u` and `v` buffers through `F.normalize(..., out=)`) are recorded as their functional twin
plus a write into `out`, and train under jit as in eager. Compared with eager in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.utils.parametrizations as P

import thunderviz as tv
from tests.helpers import assert_same_state, jitted_twin
from thunderviz.capture.errors import CaptureError

F64 = dict(dtype=torch.float64)


def _steps_match(make, steps=3):
    eager, ours, jitted = jitted_twin(make)
    for _ in range(steps):
        x = torch.randn(4, 6, **F64)
        got, want = jitted(x), eager(x)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        got.pow(2).sum().backward()
        want.pow(2).sum().backward()
    assert_same_state(ours, eager)


def test_spectral_norm_trains_and_updates_its_vectors_like_eager():
    _steps_match(lambda: nn.Sequential(P.spectral_norm(nn.Linear(6, 5)), nn.Tanh()))


class OutArgs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)

    def forward(self, x):
        h = self.lin(x)
        d = h.detach()  # eager's autograd takes no out= call on a tensor needing grad
        buf = torch.empty_like(h)
        torch.mul(d, d, out=buf)  # into a fresh tensor
        torch.add(buf, d, alpha=2, out=buf)  # into itself
        return torch.tanh(h) * buf


def test_out_arguments_inside_the_program_give_eagers_values_and_gradients():
    _steps_match(OutArgs)


def two_outs(x):
    values, indices = torch.empty(3), torch.empty(3, dtype=torch.long)
    torch.max(x, 1, out=(values, indices))
    return values.sum()


def test_an_op_with_two_out_arguments_is_refused_with_the_way_out():
    with pytest.raises(CaptureError, match="no functional form.*out-of-place"):
        tv.trace(two_outs, torch.randn(3, 4))
