"""Settings that pick a call's ops (core/dispatch_settings.py). `sdpa_kernel(...)` picks
which attention kernel eager runs: jit keys its cache on it, a call made where the program
flips it runs the ops eager ran, and the grad rule steps aside where eager did not run the
CPU flash kernel. A program that changes the default dtype as it runs is run again on every
call. Compared with eager, bit for bit (the math and flash kernels differ in the last
bits, float32 and float64 constants too)."""

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


class DefaultDtypeInside(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        before = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        try:  # float64 constants: what eager makes here, and no replay would
            c = torch.ones(3) / 3 + torch.arange(3) * 0.1
        finally:
            torch.set_default_dtype(before)
        return self.lin(x) * c.float()


@pytest.mark.parametrize("grad", [True, False])
def test_a_program_that_changes_the_default_dtype_as_it_runs_is_run_on_every_call(grad):
    torch.manual_seed(0)
    eager = DefaultDtypeInside()
    ours = DefaultDtypeInside()
    ours.load_state_dict(eager.state_dict())
    jitted = tv.jit(ours)
    with torch.set_grad_enabled(grad), pytest.warns(UserWarning, match="the default dtype"):
        for _ in range(3):
            _same_step(eager, ours, jitted, torch.randn(2, 3))


class ReadsPrecision(nn.Module):
    """A program that branches on the float32 matmul precision it runs under."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        y = self.lin(x)
        return y * 2 if torch.get_float32_matmul_precision() == "highest" else y


def test_the_float32_matmul_precision_is_keyed():
    torch.manual_seed(0)
    eager = ReadsPrecision()
    ours = ReadsPrecision()
    ours.load_state_dict(eager.state_dict())
    jitted = tv.jit(ours)
    before = torch.get_float32_matmul_precision()
    try:
        for precision in ("highest", "high", "highest"):
            torch.set_float32_matmul_precision(precision)
            _same_step(eager, ours, jitted, torch.randn(2, 3))
    finally:
        torch.set_float32_matmul_precision(before)
    assert jitted.cache_misses == 2
