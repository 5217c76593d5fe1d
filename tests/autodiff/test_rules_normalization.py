"""Grad rules for normalization (rules/normalization.py): batch norm in train and eval with
running statistics checked against eager, the `_native_batch_norm_legit` overloads, layer,
group and RMS norm, against torch.autograd.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from tests.autodiff.opinfo_samples import samples
from tests.helpers import check_vjp

F64 = torch.float64


def _batch_norm_cases():
    """OpInfo batch norm samples with the running statistics out of the differentiated args
    (a fresh copy each call: training updates them in place)."""
    out = []
    for i, (_, (x, rm, rv, w, b), kwargs) in enumerate(samples("nn.functional.batch_norm")):

        def fn(x, w, b, rm=rm, rv=rv, kwargs=kwargs):
            return F.batch_norm(
                x,
                None if rm is None else rm.clone(),
                None if rv is None else rv.clone(),
                w,
                b,
                **kwargs,
            )

        out.append(pytest.param(fn, (x, w, b), id=f"batch_norm-{i}"))
    return out


@pytest.mark.parametrize("fn,args", _batch_norm_cases())
def test_batch_norm_opinfo(fn, args):
    check_vjp(fn, *args)


class _Loss(nn.Module):
    """<module(x), ct>: a scalar whose gradient is the module's VJP with cotangent `ct`."""

    def __init__(self, module, ct):
        super().__init__()
        self.module, self.ct = module, ct

    def forward(self, x):
        return (self.module(x) * self.ct).sum()


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize(
    "bn_cls,shape",
    [(nn.BatchNorm1d, (6, 3)), (nn.BatchNorm2d, (4, 3, 5, 5)), (nn.BatchNorm3d, (2, 3, 3, 2, 2))],
)
def test_batch_norm_module_running_stats_and_grads(bn_cls, shape, train):
    torch.manual_seed(0)
    bn = bn_cls(3, momentum=0.3).double()
    with torch.no_grad():
        bn.weight.uniform_(0.5, 2)
        bn.bias.uniform_(-1, 1)
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    bn.train(train)
    x, ct = torch.randn(shape, dtype=F64), torch.randn(shape, dtype=F64)
    eager = copy.deepcopy(bn)
    xr = x.clone().requires_grad_()
    ref = _Loss(eager, ct)(xr)
    ref_grads = torch.autograd.grad(ref, [xr, eager.weight, eager.bias])

    ops = {b.sym.id for top in tv.trace(bn, x).bound_symbols for b in top.walk()}
    assert "aten.native_batch_norm.default" in ops
    value, grads = tv.value_and_grad(_Loss(bn, ct))(x)
    torch.testing.assert_close(value, ref.detach())
    for g, r in zip(grads[:3], ref_grads, strict=True):  # x, weight, bias
        torch.testing.assert_close(g, r)
    # buffers follow: running_mean, running_var, num_batches_tracked carry no gradient
    assert all(g is None or not g.any() for g in grads[3:])
    # running statistics updated exactly as one eager step updates them (or left alone)
    torch.testing.assert_close(bn.running_mean, eager.running_mean)
    torch.testing.assert_close(bn.running_var, eager.running_var)
    assert bn.num_batches_tracked == eager.num_batches_tracked == (1 if train else 0)


def test_batch_norm_without_running_stats_or_affine():
    x = torch.randn(5, 3, 4, dtype=F64)
    check_vjp(lambda x: F.batch_norm(x, None, None, training=True), x)
    check_vjp(
        lambda x, w: F.batch_norm(x, None, None, weight=w, training=True, eps=0.1),
        x,
        torch.rand(3, dtype=F64),
    )
    rm, rv = torch.randn(3, dtype=F64), torch.rand(3, dtype=F64) + 0.5
    check_vjp(
        lambda x, b: F.batch_norm(x, rm, rv, bias=b, training=False), x, torch.randn(3, dtype=F64)
    )


@pytest.mark.parametrize("variant", ["functional", "no_stats", "no_training"])
def test_native_batch_norm_legit_overloads(variant):
    """The overloads torch.export / functionalized graphs use, called directly."""
    aten = torch.ops.aten
    x, w, b = (
        torch.randn(6, 3, 2, dtype=F64),
        torch.rand(3, dtype=F64) + 0.5,
        torch.randn(3, dtype=F64),
    )
    rm0, rv0 = torch.randn(3, dtype=F64), torch.rand(3, dtype=F64) + 0.5

    def f(x, w, b):
        rm, rv = rm0.clone(), rv0.clone()
        if variant == "functional":
            return aten._native_batch_norm_legit(x, w, b, rm, rv, True, 0.1, 1e-5)[0]
        if variant == "no_stats":
            return aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5)[0]
        return aten._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.1, 1e-5)[0]

    want = {
        "functional": "aten._native_batch_norm_legit_functional.default",
        "no_stats": "aten._native_batch_norm_legit.no_stats",
        "no_training": "aten._native_batch_norm_legit_no_training.default",
    }[variant]
    ops = {s.sym.id for top in tv.trace(f, x, w, b).bound_symbols for s in top.walk()}
    assert want in ops
    check_vjp(f, x, w, b)


def test_layer_and_group_norm_variants():
    x = torch.randn(2, 4, 3, 5, dtype=F64)
    w, b = torch.randn(3, 5, dtype=F64), torch.randn(3, 5, dtype=F64)
    check_vjp(lambda x, w, b: F.layer_norm(x, (3, 5), w, b, eps=1e-3), x, w, b)
    check_vjp(lambda x, w: F.layer_norm(x, (3, 5), w), x, w)
    check_vjp(lambda x: F.layer_norm(x, (5,)), x)
    check_vjp(
        lambda x, w, b: F.group_norm(x, 2, w, b),
        x,
        torch.randn(4, dtype=F64),
        torch.randn(4, dtype=F64),
    )


def test_group_norm_followed_by_a_transpose_of_its_output_or_input():
    """The CPU backward kernel reads its gradient and input as contiguous memory; a transpose
    after the norm hands it a transposed gradient (found as a wrong input gradient of a
    GroupNorm then InstanceNorm over the other axis)."""
    x, w, b = torch.randn(4, 6, dtype=F64), torch.randn(6, dtype=F64), torch.randn(6, dtype=F64)
    check_vjp(lambda x, w, b: F.group_norm(x, 2, w, b).t(), x, w, b)
    check_vjp(lambda x: F.group_norm(x.t().contiguous().t(), 3).mT, x)
    y = torch.randn(2, 5, 6, dtype=F64)
    check_vjp(lambda y, w: F.group_norm(y.transpose(1, 2), 3, w).transpose(1, 2), y, w)


def test_layer_norm_saves_input_statistics_and_weights():
    x = torch.randn(4, 8, requires_grad=True)
    w, b = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    result = tv.autodiff(tv.trace(lambda x, w, b: F.layer_norm(x, (8,), w, b), x, w, b))
    assert sorted(tuple(s.shape) for s in result.saved_for_backward) == [
        (4, 1),
        (4, 1),
        (4, 8),
        (8,),
        (8,),
    ]


def test_rms_norm_is_one_op_with_its_own_rule():
    x, w = torch.randn(3, 4, 6, dtype=F64), torch.randn(4, 6, dtype=F64)
    check_vjp(lambda x, w: F.rms_norm(x, (4, 6), w), x, w)
    check_vjp(lambda x, w: F.rms_norm(x, [6], w[0], eps=1e-2), x, w)
    check_vjp(lambda x: F.rms_norm(x, (6,)), x)
    check_vjp(lambda x, w: torch.rms_norm(x, [6], w[0], 1e-3), x, w)
    result = tv.autodiff(tv.trace(lambda x: F.rms_norm(x, (6,)), x.float().requires_grad_()))
    assert "torch.nn.functional.rms_norm(x, (6,)" in result.augmented_forward.python()
    assert [s.name for s in result.saved_for_backward] == ["x"]


def test_rms_norm_in_bfloat16_computes_in_float32():
    torch.manual_seed(0)
    x, w = torch.randn(4, 16, dtype=torch.bfloat16), torch.randn(16, dtype=torch.bfloat16)
    ct = torch.randn(4, 16, dtype=torch.bfloat16)
    _, (gx, gw) = tv.vjp(lambda x, w: F.rms_norm(x, (16,), w))((x, w), ct)
    xr, wr = x.float().requires_grad_(), w.float().requires_grad_()
    rx, rw = torch.autograd.grad(F.rms_norm(xr, (16,), wr), [xr, wr], ct.float())
    assert gx.dtype == gw.dtype == torch.bfloat16
    torch.testing.assert_close(gx.float(), rx, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(gw.float(), rw, atol=5e-2, rtol=2e-2)


def test_fused_rms_norm():
    aten = torch.ops.aten
    x, w = torch.randn(3, 5, 6, dtype=F64), torch.randn(5, 6, dtype=F64)
    check_vjp(lambda x, w: aten._fused_rms_norm(x, [5, 6], w, 1e-4)[0], x, w)
    check_vjp(lambda x: aten._fused_rms_norm(x, [6], None, None)[0], x)
