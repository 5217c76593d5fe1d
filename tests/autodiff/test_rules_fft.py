"""Grad rules for the FFT kernels (rules/fft.py) against torch.autograd in float64 on every
torch.fft OpInfo's samples: real-to-complex, complex-to-real and complex-to-complex
transforms, all normalization modes and the Hermitian variants."""

from __future__ import annotations

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_vjp

FFT_OPS = sorted({o.name for o in op_db if o.name.startswith("fft.") and o.supports_autograd})


def _as_reals(out):
    """check_vjp gives cotangents to real outputs: a complex output as (re, im) pairs."""
    return torch.view_as_real(out.resolve_conj()) if out.is_complex() else out


@pytest.mark.parametrize("fn,args,kwargs", sample_params(FFT_OPS, limit=2, spread=True))
def test_fft_opinfo(fn, args, kwargs):
    check_vjp(lambda *a: _as_reals(fn(*a, **kwargs)), *args, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("n", [7, 8])
def test_irfft_bins_standing_for_two_get_twice_the_gradient(n):
    """An odd and an even signal length: the middle bin is its own mirror only for even n."""
    r = torch.randn(3, n, dtype=torch.float64)
    check_vjp(lambda r: torch.fft.irfft(torch.fft.rfft(r), n=n, norm="ortho"), r)
    check_vjp(
        lambda r: torch.fft.irfft(
            torch.view_as_complex(torch.stack([r[:, : n // 2 + 1], r[:, -(n // 2 + 1) :]], -1)), n=n
        ),
        r,
    )
