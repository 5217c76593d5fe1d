"""Quantization-aware training (rules/quantization.py and what it needs of capture): fake
quantization's straight-through gradients, the learnable scale and zero point of LSQ, and
the observers' in-place work (per-channel statistics and scales `resize_`d from empty, a
parameter's `.data` overwritten by an observer's estimate). Before, every fake-quantize op
was refused ("no grad rule"); the observers' resized buffers crashed jit's write-back; and
LSQ's scale and zero point silently got no gradient. Checked against eager: torch.autograd's
gradients and eager's buffers, float32 (the ops' own dtype), on every step of several.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.ao.quantization as Q
import torch.nn as nn
import torch.nn.functional as F
from torch.ao.quantization._learnable_fake_quantize import _LearnableFakeQuantize

import thunderviz as tv
from tests.helpers import assert_same_state


def _train_both(make, make_input, steps=3, tol=0.0):
    torch.manual_seed(0)
    eager = make()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    for module, call in ((eager, eager), (ours, jitted)):
        optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
        for step in range(steps):
            torch.manual_seed(step)
            optimizer.zero_grad()
            call(make_input()).square().sum().backward()
            if step < steps - 1:
                optimizer.step()
    assert_same_state(ours, eager, tol=tol)  # the last step's gradients, buffers, parameters


def _x() -> torch.Tensor:
    return torch.randn(3, 4)


class PerTensorAndChannel(nn.Module):
    """FakeQuantize on the activation (per tensor, tensor qparams) and the weight (per
    channel, a MovingAveragePerChannelMinMaxObserver that resizes its statistics)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = Q.FakeQuantize(
            observer=Q.MovingAverageMinMaxObserver, quant_min=0, quant_max=255
        )
        self.weight_fq = Q.FakeQuantize(
            observer=Q.MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127,
            dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0,
        )  # fmt: skip

    def forward(self, x):
        return F.linear(self.act(x), self.weight_fq(self.lin.weight), self.lin.bias).square().sum()


def test_fake_quantize_per_tensor_and_per_channel_with_observers():
    _train_both(PerTensorAndChannel, _x)


class Fused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.fq = Q.FusedMovingAvgObsFakeQuantize()

    def forward(self, x):
        return self.lin(self.fq(x)).square().sum()


def test_fused_observer_and_fake_quantize():
    _train_both(Fused, _x)


class FloatQParams(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        q = torch.fake_quantize_per_tensor_affine(self.lin(x), 0.05, 3, 0, 255)
        return q.square().sum()


def test_fake_quantize_with_number_qparams():
    _train_both(FloatQParams, _x)


class Learnable(nn.Module):
    """LSQ: the scale and zero point are parameters; the observer writes its estimate into
    them through `.data` on the first step, then they learn."""

    def __init__(self, grad_scaling: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.act = _LearnableFakeQuantize(
            observer=Q.MovingAverageMinMaxObserver, quant_min=0, quant_max=255,
            use_grad_scaling=grad_scaling,
        )  # fmt: skip
        self.weight_fq = _LearnableFakeQuantize(
            observer=Q.MovingAveragePerChannelMinMaxObserver, quant_min=-128, quant_max=127,
            dtype=torch.qint8, qscheme=torch.per_channel_symmetric, ch_axis=0, channel_len=4,
        )  # fmt: skip

    def forward(self, x):
        return F.linear(self.act(x), self.weight_fq(self.lin.weight), self.lin.bias).square().sum()


@pytest.mark.parametrize("grad_scaling", [False, True])
def test_learnable_scale_and_zero_point_get_eagers_gradients(grad_scaling):
    def make():
        m = Learnable(grad_scaling)
        m.act.toggle_observer_update(True)
        return m

    # the kernels accumulate over the batch in float32: equal to the last bits
    _train_both(make, _x, tol=1e-6)


def test_prepare_qat_with_the_default_qconfig():
    def make():
        m = nn.Sequential(
            nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 2)
        )
        m.train()
        m.qconfig = Q.get_default_qat_qconfig("x86")
        return Q.prepare_qat(m)

    _train_both(make, lambda: torch.randn(2, 3, 6, 6), tol=1e-6)


def test_an_update_through_data_reaches_the_parameter():
    """`w.data.copy_(...)` / `w.detach().mul_(...)` in a forward: eager's `w` is still the
    leaf at its new value, and gets its gradient."""

    class Rescales(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4))
            self.s = nn.Parameter(torch.ones(4))

        def forward(self, x):
            self.s.data.copy_(x.detach().abs().mean(0) + 0.5)
            self.w.detach().mul_(0.9)
            return ((x * self.s) @ self.w).square().sum()

    _train_both(Rescales, _x, tol=1e-6)
