"""`sdpa_kernel(...)` picks which attention kernel eager runs, and so what a trace records:
jit keys its cache on the switches, a call made where the program flips them runs the ops
eager ran, and the grad rule steps aside where eager did not run the CPU flash kernel.
Compared with eager, bit for bit (the math and flash kernels differ in the last bits)."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import thunderviz as tv


class Attention(nn.Module):
    def __init__(self, inner: SDPBackend | None = None) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.inner = inner  # a kernel the forward asks for itself

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 8, 3, 2, 8).permute(2, 0, 3, 1, 4)
        with sdpa_kernel(self.inner) if self.inner else contextlib.nullcontext():
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def _pair(inner=None):
    torch.manual_seed(0)
    eager = Attention(inner)
    ours = Attention(inner)
    ours.load_state_dict(eager.state_dict())
    return eager, ours, tv.jit(ours)


def _same_step(eager, ours, jitted, x):
    want, got = eager(x), jitted(x)
    assert torch.equal(got, want)
    if torch.is_grad_enabled():
        want.square().sum().backward()
        got.square().sum().backward()
        for a, b in zip(eager.parameters(), ours.parameters(), strict=True):
            assert torch.equal(b.grad, a.grad)
            a.grad = b.grad = None


def test_the_math_and_flash_kernels_really_differ_here():
    """(Else the tests below could not fail.)"""
    eager, _, _ = _pair()
    x = torch.randn(2, 8, 16)
    with sdpa_kernel(SDPBackend.MATH):
        math = eager(x)
    assert not torch.equal(math, eager(x))


@pytest.mark.parametrize("grad", [True, False])
def test_the_kernel_chosen_around_the_call_is_keyed(grad):
    eager, ours, jitted = _pair()
    with torch.set_grad_enabled(grad):
        for backend in (None, SDPBackend.MATH, None, SDPBackend.MATH, SDPBackend.FLASH_ATTENTION):
            with sdpa_kernel(backend) if backend else contextlib.nullcontext():
                for _ in range(2):
                    _same_step(eager, ours, jitted, torch.randn(2, 8, 16))
    assert jitted.cache_misses == 3  # all allowed, math only, flash only


@pytest.mark.parametrize("grad", [True, False])
def test_a_kernel_chosen_inside_the_program_is_the_one_that_runs(grad):
    eager, ours, jitted = _pair(SDPBackend.MATH)
    with torch.set_grad_enabled(grad):
        for _ in range(3):
            _same_step(eager, ours, jitted, torch.randn(2, 8, 16))
    assert jitted.cache_misses == 1
