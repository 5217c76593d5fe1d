"""Grad rules for special functions (rules/special.py) against torch.autograd in float64, on
torch's OpInfo samples."""

from __future__ import annotations

import pytest
import torch

from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_vjp

SPECIAL_OPS = [
    "lgamma",
    "digamma",
    ("polygamma", "polygamma_n_0"),
    ("polygamma", "polygamma_n_1"),
    ("polygamma", "polygamma_n_2"),
    ("polygamma", "polygamma_n_3"),
    ("polygamma", "polygamma_n_4"),
    ("mvlgamma", "mvlgamma_p_1"),
    ("mvlgamma", "mvlgamma_p_3"),
    ("mvlgamma", "mvlgamma_p_5"),
    "i0",
    "special.i0e",
    "special.i1",
    "special.i1e",
    "special.erfcx",
    "special.ndtri",
    "special.log_ndtr",
    "frexp",
    "angle",
]


@pytest.mark.parametrize("fn,args,kwargs", sample_params(SPECIAL_OPS, limit=4, spread=True))
def test_special_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs, rtol=1e-6, atol=1e-8)


def test_bessel_i1_at_zero_has_derivative_one_half():
    """i1 / i1e divide by x in their derivative: at 0 the rules (and autograd) give 1/2."""
    x = torch.tensor([0.0, 1e-20, -2.0, 3.5], dtype=torch.float64)
    check_vjp(torch.special.i1, x)
    check_vjp(torch.special.i1e, x)


def test_frexp_mantissa_only_takes_the_gradient():
    x = torch.tensor([0.3, -5.0, 1024.0, 7e-5], dtype=torch.float64)
    check_vjp(lambda x: torch.frexp(x).mantissa * 3, x)
