"""Grad rules for composite ops recorded whole (rules/composite.py), the scans cummax /
cummin / logcumsumexp (rules/scans.py), pairwise distances (rules/distances.py) and
nanmedian, against torch.autograd in float64 on torch's OpInfo samples."""

from __future__ import annotations

import pytest
import torch

from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_vjp

F64 = torch.float64

COMPOSITE_OPS = [
    "movedim",
    "T",
    "diag",
    "diag_embed",
    "diagflat",
    "trace",
    "cross",
    "linalg.cross",
    "broadcast_tensors",
    "addr",
    "outer",
    "narrow",
    "narrow_copy",
    "native_dropout_backward",
    "nn.functional.multilabel_margin_loss",
    "take",
    "put",
    "nn.functional.bilinear",
]
SCAN_AND_DISTANCE_OPS = [
    "cummax",
    "cummin",
    "logcumsumexp",
    "nanmedian",
    "masked.median",
    "cdist",
    "nn.functional.pdist",
]


# addr with beta=0 never reads `self` (torch's decomposition drops it): thunderviz gives it
# None where autograd gives zeros, the same gradient.
@pytest.mark.parametrize(
    "fn,args,kwargs",
    sample_params(COMPOSITE_OPS, limit=4, spread=True, skip=lambda a, kw: kw.get("beta") == 0),
)
def test_composite_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


@pytest.mark.parametrize(
    "fn,args,kwargs", sample_params(SCAN_AND_DISTANCE_OPS, limit=5, spread=True)
)
def test_scan_and_distance_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs, rtol=1e-6, atol=1e-8)


def test_broadcast_tensors_of_an_input_already_broadcast():
    """The input with the broadcast shape comes back as itself: its gradient is counted
    once, whether the result or the input is used afterwards."""
    a, b = torch.randn(3, 1, dtype=F64), torch.randn(3, 4, dtype=F64)
    check_vjp(lambda a, b: [t * 2 for t in torch.broadcast_tensors(a, b)], a, b)
    check_vjp(lambda a, b: torch.broadcast_tensors(a, b)[1] * 3 + b.exp(), a, b)


def test_logcumsumexp_large_values_and_negative_cotangents():
    x = torch.tensor([[800.0, -3.0, 799.0, 1.0], [-1e3, 2.0, 0.5, -2.0]], dtype=F64)
    check_vjp(lambda x: torch.logcumsumexp(x, 1), x)
    check_vjp(lambda x: torch.logcumsumexp(x, 0), x)


def test_cummax_repeated_running_maximum_collects_every_cotangent():
    x = torch.tensor([3.0, 1.0, 2.0, 0.5, 4.0, 4.0], dtype=F64)
    check_vjp(lambda x: torch.cummax(x, 0).values, x)
    check_vjp(lambda x: torch.cummin(x, 0).values, x)
