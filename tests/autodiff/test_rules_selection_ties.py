"""Clamp, fmax and fmin at ties, bounds and NaN, against the installed torch's autograd over
every order of their operands: the subgradient there is a convention, and torch 2.14 changed
it (autodiff/rules/selection.py). Each case runs through thunderviz.vjp and torch.autograd
with the same cotangent."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from tests.helpers import check_vjp

VALUES = [0.0, 1.0, 2.0, math.nan]


def _t(*values: float) -> list[torch.Tensor]:
    return [torch.tensor([v], dtype=torch.float64) for v in values]


@pytest.mark.parametrize("a,lo,hi", list(itertools.product(VALUES, repeat=3)))
def test_clamp_with_tensor_bounds(a, lo, hi):
    check_vjp(torch.clamp, *_t(a, lo, hi))


@pytest.mark.parametrize("a,b", list(itertools.product(VALUES, repeat=2)))
def test_one_bound_fmax_and_fmin(a, b):
    x, y = _t(a, b)
    for fn in (
        lambda x, y: torch.clamp(x, min=y),
        lambda x, y: torch.clamp(x, max=y),
        torch.clamp_min,
        torch.clamp_max,
        torch.fmax,
        torch.fmin,
        torch.maximum,
        torch.minimum,
    ):
        check_vjp(fn, x, y)


@pytest.mark.parametrize("a", VALUES)
def test_number_bounds(a):
    (x,) = _t(a)
    check_vjp(lambda x: torch.clamp(x, 1.0, 2.0), x)
    check_vjp(lambda x: torch.clamp_min(x, 1.0), x)
    check_vjp(lambda x: torch.clamp_max(x, 1.0), x)
