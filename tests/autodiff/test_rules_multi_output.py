"""Ops with several outputs, each output given a cotangent, against torch.autograd.

A rule that reads only its first output's cotangent silently drops the rest (issue 8:
`native_group_norm`'s mean and rstd). Where torch.autograd itself treats a floating output
as a constant (layer and batch norm statistics, log_sigmoid's buffer), thunderviz does not:
a gradient taken inside a traced program reads them in its backward kernels, and a gradient
of that gradient reaches them (`autodiff/inner_grad.py`). Those ops are checked against
autograd through the same values written out in differentiable ops, which finite
differences agree with. The ops are called at the ATen level so no decomposition hides the
extra outputs.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunderviz as tv
from tests.helpers import check_vjp

aten = torch.ops.aten
F64 = torch.float64


def _inputs():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 5, generator=gen, dtype=F64)
    w, b = torch.randn(6, generator=gen, dtype=F64), torch.randn(6, generator=gen, dtype=F64)
    return x, w, b


RM, RV = torch.linspace(-1, 1, 6, dtype=F64), torch.linspace(0.5, 2, 6, dtype=F64)

MULTI_OUTPUT = {
    "native_group_norm": lambda x, w, b: aten.native_group_norm(x, w, b, 4, 6, 5, 3, 1e-5),
    "native_group_norm_one_group": lambda x, w, b: aten.native_group_norm(
        x, w, b, 4, 6, 5, 1, 1e-5
    ),
    "native_layer_norm": lambda x, w, b: aten.native_layer_norm(x.transpose(1, 2), [6], w, b, 1e-5),
    "native_batch_norm_train": lambda x, w, b: aten.native_batch_norm(
        x, w, b, RM.clone(), RV.clone(), True, 0.1, 1e-5
    ),
    "native_batch_norm_eval": lambda x, w, b: aten.native_batch_norm(
        x, w, b, RM, RV, False, 0.1, 1e-5
    ),
    "batch_norm_legit_functional": lambda x, w, b: aten._native_batch_norm_legit_functional(
        x, w, b, RM, RV, True, 0.1, 1e-5
    ),
    "batch_norm_legit_no_stats": lambda x, w, b: aten._native_batch_norm_legit.no_stats(
        x, w, b, True, 0.1, 1e-5
    ),
    "batch_norm_legit_no_training": lambda x, w, b: aten._native_batch_norm_legit_no_training(
        x, w, b, RM, RV, 0.1, 1e-5
    ),
    "fused_rms_norm": lambda x, w, b: aten._fused_rms_norm(x.transpose(1, 2), [6], w, 1e-5),
    "var_mean": lambda x, w, b: torch.var_mean(x, 1),
    "std_mean": lambda x, w, b: torch.std_mean(x, (0, 2), correction=0),
    "max_dim": lambda x, w, b: torch.max(x, 1),
    "min_dim": lambda x, w, b: torch.min(x, 2, keepdim=True),
    "sort": lambda x, w, b: torch.sort(x, 1),
    "topk": lambda x, w, b: torch.topk(x, 2, 1),
    "kthvalue": lambda x, w, b: torch.kthvalue(x, 2, 0),
    "median_dim": lambda x, w, b: torch.median(x, 2),
    "aminmax": lambda x, w, b: torch.aminmax(x, dim=1),
    "log_sigmoid_forward": lambda x, w, b: aten.log_sigmoid_forward(x),
    "nll_loss_forward": lambda x, w, b: aten.nll_loss_forward(
        x[:, :, 0], torch.tensor([1, 2, 0, 3]), None, 1, -100
    ),
}


def _batch_statistics(x):
    return x.mean((0, 2)), x.var((0, 2), correction=0).add(1e-5).rsqrt()


def _layer_norm_written_out(x, w, b):
    xt = x.transpose(1, 2)
    mean = xt.mean(-1, keepdim=True)
    rstd = xt.var(-1, correction=0, keepdim=True).add(1e-5).rsqrt()
    return F.layer_norm(xt, [6], w, b, 1e-5), mean, rstd


def _batch_norm_written_out(x, w, b):
    return (F.batch_norm(x, None, None, w, b, True, 0.1, 1e-5), *_batch_statistics(x))


def _functional_batch_norm_written_out(x, w, b):
    mean = x.mean((0, 2))
    return (
        *_batch_norm_written_out(x, w, b),
        0.9 * RM + 0.1 * mean,
        0.9 * RV + 0.1 * x.var((0, 2), correction=1),
    )


# the ops whose statistics torch.autograd treats as constants, and the same values written out
WRITTEN_OUT = {
    "native_layer_norm": _layer_norm_written_out,
    "native_batch_norm_train": _batch_norm_written_out,
    "batch_norm_legit_functional": _functional_batch_norm_written_out,
    "batch_norm_legit_no_stats": _batch_norm_written_out,
    "log_sigmoid_forward": lambda x, w, b: (F.logsigmoid(x), torch.exp(-x.abs())),
}


@pytest.mark.parametrize("name", [n for n in MULTI_OUTPUT if n not in WRITTEN_OUT])
def test_every_output_cotangent_reaches_the_inputs(name):
    check_vjp(MULTI_OUTPUT[name], *_inputs())


@pytest.mark.parametrize("name", list(WRITTEN_OUT))
def test_statistics_take_their_gradients_as_written_out(name):
    args = _inputs()
    with torch.no_grad():
        outs = MULTI_OUTPUT[name](*args)
    gen = torch.Generator().manual_seed(1)
    cts = [torch.randn(o.shape, generator=gen, dtype=o.dtype) for o in outs]
    leaves = [a.clone().requires_grad_() for a in args]
    expected_outs = WRITTEN_OUT[name](*leaves)
    expected = torch.autograd.grad(expected_outs, leaves, cts, allow_unused=True)
    got_outs, got = tv.vjp(MULTI_OUTPUT[name])(args, cts)
    for o, e in zip(got_outs, expected_outs, strict=True):
        torch.testing.assert_close(o, e.detach())
    for g, e in zip(got, expected, strict=True):
        if e is None:
            assert g is None or not g.count_nonzero()
        else:
            torch.testing.assert_close(g, e)


@pytest.mark.parametrize("output", [1, 2])
def test_group_norm_statistics_alone(output):
    """A loss on mean or rstd alone. torch.autograd returns None for x here (its formula adds
    the statistics' part only when both have a cotangent), so the reference is autograd
    through the statistics written out: mean and 1/sqrt(biased var + eps) over each group."""
    x, w, b = _inputs()
    ct = torch.randn(4, 2, dtype=F64, generator=torch.Generator().manual_seed(1))

    def stats(x):
        groups = x.reshape(4, 2, -1)
        mean = groups.mean(-1)
        return (mean, groups.var(-1, correction=0).add(1e-5).rsqrt())[output - 1]

    xr = x.clone().requires_grad_()
    (expected,) = torch.autograd.grad(stats(xr), xr, ct)
    fn = lambda x, w, b: aten.native_group_norm.default(x, w, b, 4, 6, 5, 2, 1e-5)[output]  # noqa: E731
    out, (gx, gw, gb) = tv.vjp(fn)((x, w, b), ct)
    torch.testing.assert_close(out, stats(x))
    torch.testing.assert_close(gx, expected)
    assert gw is None or not gw.count_nonzero()
