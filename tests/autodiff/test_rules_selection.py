"""Grad rules for elementwise selection (rules/selection.py): maximum/minimum, clamp, where,
masked_fill, checked against torch.autograd at ties, bounds and nans, where autograd picks a
subgradient.
"""

from __future__ import annotations

import math

import torch

from tests.autodiff.inputs import randn, vec
from tests.helpers import check_each_output, check_vjp, thunderviz_vjp

F64 = torch.float64


def test_maximum_minimum_ties_split_the_gradient():
    a, b = vec(1.0, 2.0, 3.0, 2.0), vec(1.0, 3.0, 2.0, 2.0)
    check_each_output(
        lambda a, b: [torch.maximum(a, b), torch.minimum(a, b), torch.max(a, b)], a, b
    )
    # the check has teeth: at a tie each input gets exactly half
    ct = torch.ones(4, dtype=F64)
    _, (ga, gb) = thunderviz_vjp(torch.maximum, (a, b), [ct])
    torch.testing.assert_close(ga, vec(0.5, 0.0, 1.0, 0.5))
    torch.testing.assert_close(gb, vec(0.5, 1.0, 0.0, 0.5))


def test_nan_in_maximum_and_fmax():
    a, b = vec(1.0, math.nan, 3.0, math.nan), vec(math.nan, 1.0, 2.0, math.nan)
    check_each_output(
        lambda a, b: [torch.maximum(a, b), torch.minimum(a, b), torch.fmax(a, b), torch.fmin(a, b)],
        a,
        b,
    )


def test_clamp_at_and_between_bounds():
    x = vec(0.0, 1.0, 1.5, 2.0, 3.0)
    check_each_output(
        lambda x: [
            x.clamp(1.0, 2.0),
            torch.clamp_min(x, 1.0),
            torch.clamp_max(x, 2.0),
            x.clamp(min=1.0),
            torch.relu(x - 1.5),
        ],
        x,
    )


def test_clamp_tensor_bounds_including_min_above_max():
    x = vec(0.0, 1.0, 2.0, 3.0, 1.0, 5.0, 0.5)
    lo = vec(1.0, 1.0, 1.0, 4.0, 1.0, 0.0, 2.0)
    hi = vec(2.0, 2.0, 2.0, 2.0, 1.0, 1.0, 1.0)
    check_vjp(torch.clamp, x, lo, hi)
    check_vjp(lambda x, lo: torch.clamp(x, min=lo), x, lo)
    check_vjp(lambda x, hi: torch.clamp(x, max=hi), x, hi)
    check_vjp(lambda x, lo: torch.clamp(x, lo[:1], None), x, lo)


def test_where_and_masked_fill():
    a, b = randn(3, 1), randn(4, seed=1)
    check_vjp(lambda a, b: torch.where(torch.tensor([True, False, True, False]), a, b), a, b)
    x, v = randn(3, 4), torch.tensor(2.0, dtype=F64)
    check_vjp(lambda x, v: x.masked_fill(x > 0, v), x, v)  # the fill value's gradient is a sum
    check_vjp(lambda x: x.masked_fill(torch.tensor([True, False, False, True]), -1.0), x)
