"""Grad rules of rules/nn_kernels.py (embedding bag, rrelu, fractional max pooling, max
pooling's double backward) and nextafter, against torch.autograd in float64."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunderviz as tv
from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_vjp

F64 = torch.float64


# embedding_bag samples include non-contiguous indices (the kernels need contiguous ones).
# max_norm renormalizes the weight in place (a capture matter, see test_rules_nn.py);
# sparse=True: autograd's gradient is a sparse tensor, ours the same values dense.
@pytest.mark.parametrize(
    "fn,args,kwargs",
    sample_params(
        ["nn.functional.embedding_bag", "max_pool2d_with_indices_backward", "nextafter"],
        limit=6,
        spread=True,
        skip=lambda a, kw: kw.get("max_norm") is not None or kw.get("sparse"),
    ),
)
def test_nn_kernel_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_modes(mode):
    weight = torch.randn(10, 3, dtype=F64)
    idx, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 3, 3, 6])
    check_vjp(lambda w: F.embedding_bag(idx, w, offsets, mode=mode), weight)
    check_vjp(lambda w: F.embedding_bag(idx.view(2, 4), w, mode=mode, padding_idx=4), weight)


def test_rrelu_in_eval_uses_the_mean_slope():
    x = torch.randn(4, 5, dtype=F64)
    check_vjp(lambda x: F.rrelu(x, 0.1, 0.3, training=False), x)


def test_rrelu_in_training_uses_the_slopes_it_drew():
    """Each negative element was scaled by a random slope: its gradient must be that slope,
    which the output reveals (out / x); positive elements pass through."""
    x = torch.randn(4, 5, dtype=F64)
    x[0, 0] = -1.0
    out, (gx,) = tv.vjp(lambda x: F.rrelu(x, 0.1, 0.3, training=True))((x,), torch.ones_like(x))
    torch.testing.assert_close(gx, torch.where(x >= 0, torch.ones_like(x), out / x))
    assert ((gx[x < 0] >= 0.1) & (gx[x < 0] <= 0.3)).all()


def test_fractional_max_pool2d_with_given_samples():
    x = torch.randn(2, 3, 7, 7, dtype=F64)
    samples = torch.rand(2, 3, 2, dtype=F64)
    check_vjp(
        lambda x: F.fractional_max_pool2d(x, 3, output_size=(4, 4), _random_samples=samples), x
    )
