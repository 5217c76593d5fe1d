"""Grad rules for nn ops (convolution, embedding, norms, softmax and losses, activations,
pooling, upsampling, attention), against torch.autograd; and whole models.

OpInfo samples for every op, plus hand-written cases: conv with groups/dilation/stride,
batch norm in train and eval with running statistics checked against eager, cross entropy
with ignore_index / label smoothing / weights, attention with causal / bool / float masks and
grouped-query heads, embedding with padding_idx.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from tests.autodiff.opinfo_samples import sample_params, samples
from tests.helpers import check_vjp

F64 = torch.float64


NN_OPS = [
    "nn.functional.conv1d",
    "nn.functional.conv2d",
    "nn.functional.conv3d",
    "nn.functional.conv_transpose2d",
    "nn.functional.layer_norm",
    "nn.functional.group_norm",
    "nn.functional.instance_norm",
    "nn.functional.rms_norm",
    "softmax",
    ("softmax", "with_dtype"),
    "log_softmax",
    ("log_softmax", "with_dtype"),
    "nn.functional.nll_loss",
    "nn.functional.cross_entropy",
    "nn.functional.mse_loss",
    "nn.functional.gelu",
    "nn.functional.silu",
    "nn.functional.leaky_relu",
    "nn.functional.softplus",
    "nn.functional.hardtanh",
    "nn.functional.relu6",
    "nn.functional.elu",
    "nn.functional.celu",
    "nn.functional.selu",
    "nn.functional.mish",
    "nn.functional.hardswish",
    "nn.functional.hardsigmoid",
    "nn.functional.logsigmoid",
    "nn.functional.threshold",
    "nn.functional.glu",
    "nn.functional.prelu",
    "nn.functional.max_pool1d",
    "nn.functional.max_pool2d",
    "nn.functional.max_pool3d",
    "nn.functional.avg_pool1d",
    "nn.functional.avg_pool2d",
    "nn.functional.avg_pool3d",
    "nn.functional.adaptive_avg_pool1d",
    "nn.functional.adaptive_avg_pool2d",
    "nn.functional.adaptive_avg_pool3d",
    "nn.functional.adaptive_max_pool2d",
    ("nn.functional.interpolate", "nearest"),
    ("nn.functional.interpolate", "nearest-exact"),
    ("nn.functional.interpolate", "linear"),
    ("nn.functional.interpolate", "bilinear"),
    ("nn.functional.interpolate", "bicubic"),
    ("nn.functional.interpolate", "trilinear"),
    ("nn.functional.interpolate", "area"),
    "nn.functional.pixel_shuffle",
    ("nn.functional.pad", "reflect"),
    ("nn.functional.pad", "replicate"),
    ("nn.functional.pad", "replicate_negative"),
    ("nn.functional.pad", "circular"),
    "nn.functional.unfold",
    "nn.functional.grid_sample",
    "nn.functional.binary_cross_entropy_with_logits",
]


@pytest.mark.parametrize("fn,args,kwargs", sample_params(NN_OPS, limit=6))
def test_nn_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


# max_norm renormalizes the weight in place through a detached alias: the trace moves the
# weight's proxy to the renormalized value, so its gradient does not reach the input
# (a capture matter, not the rule's).
# sparse=True: autograd returns a sparse COO gradient; ours is the same values, dense.
@pytest.mark.parametrize(
    "fn,args,kwargs",
    sample_params(
        ["nn.functional.embedding"], skip=lambda a, kw: "max_norm" in kw or kw.get("sparse")
    ),
)
def test_embedding_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


@pytest.mark.parametrize(
    "fn,args,kwargs",
    sample_params(
        ["nn.functional.scaled_dot_product_attention"], skip=lambda a, kw: kw.get("dropout_p", 0)
    ),
)
def test_sdpa_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


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


# --- convolution --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "conv,x_shape,w_shape,kw",
    [
        (F.conv1d, (2, 4, 9), (6, 2, 3), dict(stride=2, padding=1, groups=2)),
        (F.conv1d, (1, 3, 10), (2, 3, 3), dict(dilation=3, padding="same")),
        (F.conv2d, (2, 4, 7, 6), (8, 1, 3, 2), dict(groups=4, dilation=(2, 1), padding=(2, 0))),
        (F.conv2d, (1, 2, 8, 8), (3, 2, 3, 3), dict(stride=(2, 3))),
        (F.conv3d, (1, 2, 5, 5, 4), (4, 2, 3, 3, 2), dict(stride=(1, 2, 1), padding=(1, 0, 1))),
        (F.conv3d, (2, 4, 4, 4, 4), (4, 2, 2, 2, 2), dict(groups=2, dilation=2, padding=1)),
        (
            F.conv_transpose2d,
            (1, 4, 5, 5),
            (4, 3, 3, 3),
            dict(stride=2, output_padding=1, groups=2),
        ),
        (F.conv_transpose1d, (2, 2, 6), (2, 3, 3), dict(stride=3, padding=1, dilation=2)),
    ],
)
@pytest.mark.parametrize("bias", [True, False])
def test_convolutions(conv, x_shape, w_shape, kw, bias):
    x, w = torch.randn(x_shape, dtype=F64), torch.randn(w_shape, dtype=F64)
    transposed = conv in (F.conv_transpose1d, F.conv_transpose2d)
    out_channels = w_shape[1] * kw.get("groups", 1) if transposed else w_shape[0]
    if bias:
        check_vjp(lambda x, w, b: conv(x, w, b, **kw), x, w, torch.randn(out_channels, dtype=F64))
    else:
        check_vjp(lambda x, w: conv(x, w, **kw), x, w)


def test_convolution_backward_asks_only_for_needed_grads():
    x = torch.randn(1, 2, 5, 5)
    w = torch.randn(3, 2, 3, 3, requires_grad=True)
    result = tv.autodiff(tv.trace(lambda w: F.conv2d(x, w), w))
    (bwd,) = [
        b for b in result.backward.bound_symbols if b.sym.id == "aten.convolution_backward.default"
    ]
    assert bwd.args[-1] == [False, True, False]
    check_vjp(lambda w: F.conv2d(x.double(), w), w.detach().double())


# --- normalization ------------------------------------------------------------------------


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


# --- softmax and losses --------------------------------------------------------------------


def test_softmax_saves_its_output_not_its_input():
    x = torch.randn(4, 8, requires_grad=True)
    for fn in (lambda x: F.softmax(x, -1), lambda x: F.log_softmax(x, 0)):
        result = tv.autodiff(tv.trace(fn, x))
        (saved,) = result.saved_for_backward
        assert saved.producer is not None and saved.producer.sym.id in (
            "aten._softmax.default",
            "aten._log_softmax.default",
        )


def test_safe_softmax_fully_masked_rows():
    x = torch.randn(3, 5, dtype=F64)
    x[1] = -float("inf")
    check_vjp(lambda x: torch.ops.aten._safe_softmax(x, -1), x)
    check_vjp(lambda x: torch.ops.aten._safe_softmax(x[:, :4] * 2, 0), x)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(ignore_index=2),
        dict(label_smoothing=0.2),
        dict(weight=True),
        dict(weight=True, ignore_index=1, label_smoothing=0.1),
        dict(reduction="sum", label_smoothing=0.3),
        dict(reduction="none", ignore_index=0),
        dict(reduction="none", weight=True, label_smoothing=0.05),
    ],
    ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()) or "default",
)
def test_cross_entropy(kw):
    torch.manual_seed(0)
    logits, target = torch.randn(6, 5, dtype=F64), torch.tensor([0, 2, 2, 4, 1, 2])
    if kw.pop("weight", False):
        kw["weight"] = torch.rand(5, dtype=F64) + 0.2
    check_vjp(lambda x: F.cross_entropy(x, target, **kw), logits)
    # images: (N, C, H, W) logits, (N, H, W) targets: nll_loss2d
    logits2d, target2d = torch.randn(2, 5, 3, 2, dtype=F64), torch.randint(0, 5, (2, 3, 2))
    check_vjp(lambda x: F.cross_entropy(x, target2d, **kw), logits2d)


def test_cross_entropy_with_probability_targets():
    logits, probs = torch.randn(4, 6, dtype=F64), torch.softmax(torch.randn(4, 6, dtype=F64), -1)
    check_vjp(lambda x, p: F.cross_entropy(x, p), logits, probs)
    check_vjp(
        lambda x, p: F.cross_entropy(x, p, label_smoothing=0.1, reduction="sum"), logits, probs
    )


def test_nll_and_mse_losses():
    logp, target = (
        torch.log_softmax(torch.randn(5, 4, dtype=F64), -1),
        torch.tensor([3, 0, 3, 1, 2]),
    )
    w = torch.rand(4, dtype=F64) + 0.1
    for reduction in ("mean", "sum", "none"):
        check_vjp(
            lambda x, r=reduction: F.nll_loss(x, target, weight=w, reduction=r, ignore_index=3),
            logp,
        )
    a, b = torch.randn(3, 4, dtype=F64), torch.randn(3, 4, dtype=F64)
    for reduction in ("mean", "sum", "none"):
        check_vjp(lambda a, b, r=reduction: F.mse_loss(a, b, reduction=r), a, b)
    with pytest.warns(UserWarning, match="target size"):
        check_vjp(lambda a, b: F.mse_loss(a, b[0]), a, b)  # broadcast target


# --- activations, dropout -------------------------------------------------------------------


def test_activations_emit_their_backward_kernels():
    x = torch.randn(4, 5, dtype=F64) * 3
    cases = {
        "gelu_backward": lambda x: F.gelu(x, approximate="tanh"),
        "silu_backward": F.silu,
        "leaky_relu_backward": lambda x: F.leaky_relu(x, 0.2),
        "softplus_backward": lambda x: F.softplus(x, beta=2.0, threshold=1.5),
        "hardtanh_backward": lambda x: F.hardtanh(x, -0.5, 2.0),
        "elu_backward": lambda x: F.elu(x, alpha=0.7),
        "mish_backward": F.mish,
    }
    for kernel, fn in cases.items():
        check_vjp(fn, x)
        bwd = tv.autodiff(tv.trace(fn, x.clone().requires_grad_())).backward.python()
        assert f"aten.{kernel}" in bwd, kernel


def test_dropout_gradient_is_the_kept_mask_scaled():
    torch.manual_seed(0)
    x, ct = torch.randn(200, dtype=F64), torch.randn(200, dtype=F64)
    for fn in (
        lambda x: F.dropout(x, 0.25, training=True),
        lambda x: torch.ops.aten.native_dropout(x, 0.25, True)[0],
    ):
        out, (g,) = tv.vjp(fn)((x,), ct)
        kept = out != 0
        assert 0 < kept.sum() < 200
        torch.testing.assert_close(out[kept], x[kept] / 0.75)
        torch.testing.assert_close(g, torch.where(kept, ct / 0.75, 0.0))
    out, (g,) = tv.vjp(lambda x: F.dropout(x, 0.25, training=False))((x,), ct)
    assert torch.equal(out, x) and torch.equal(g, ct)


# --- embedding, pooling, upsampling -------------------------------------------------------------


def test_embedding_padding_idx_and_repeated_indices():
    w = torch.randn(6, 3, dtype=F64)
    idx = torch.tensor([[0, 2, 2, 5], [2, 1, 0, 0]])
    check_vjp(lambda w: F.embedding(idx, w), w)
    check_vjp(lambda w: F.embedding(idx, w, padding_idx=2), w)
    check_vjp(lambda w: F.embedding(idx, w, padding_idx=-1), w)
    check_vjp(lambda w: F.embedding(idx, w, scale_grad_by_freq=True), w)
    result = tv.autodiff(tv.trace(lambda w: F.embedding(idx, w), w.clone().requires_grad_()))
    assert all(not s.proxy.is_float for s in result.saved_for_backward)  # only the indices


def test_pooling_options():
    x = torch.randn(2, 3, 7, 6, dtype=F64)
    check_vjp(lambda x: F.max_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), x)
    check_vjp(lambda x: F.max_pool2d(x, (2, 3), dilation=(2, 1), return_indices=True)[0], x)
    check_vjp(lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False), x)
    check_vjp(lambda x: F.avg_pool2d(x, 2, divisor_override=3, ceil_mode=True), x)
    check_vjp(lambda x: F.adaptive_avg_pool2d(x, (4, 5)), x)
    check_vjp(lambda x: F.adaptive_max_pool2d(x, (3, 4), return_indices=True)[0], x)
    check_vjp(lambda x: F.adaptive_max_pool3d(x, (2, 3, 2)), x)
    ties = torch.zeros(1, 1, 4, 4, dtype=F64)  # every window's max is a tie: eager's pick
    check_vjp(lambda x: F.max_pool2d(x, 2), ties)


def test_fold_is_unfolds_adjoint():
    x = torch.randn(2, 3 * 2 * 2, 15, dtype=F64)
    check_vjp(
        lambda x: F.fold(x, (4, 5), kernel_size=2, dilation=(1, 2), padding=(1, 0), stride=(1, 1)),
        x,
    )
    check_vjp(lambda x: F.unfold(x, 3, padding=1, stride=2), torch.randn(1, 2, 5, 6, dtype=F64))


def test_upsampling_with_scale_factors():
    x = torch.randn(1, 2, 3, 4, dtype=F64)
    check_vjp(lambda x: F.interpolate(x, scale_factor=2.5, mode="nearest"), x)
    check_vjp(
        lambda x: F.interpolate(x, scale_factor=(1.5, 2), mode="bilinear", align_corners=True), x
    )
    check_vjp(lambda x: F.interpolate(x, size=(5, 7), mode="bicubic", antialias=True), x)
    check_vjp(lambda x: F.interpolate(x, size=(2, 3), mode="bilinear", antialias=True), x)


# --- attention ------------------------------------------------------------------------------


def _qkv(b=2, hq=4, hk=4, L=5, S=7, e=8, ev=6):
    torch.manual_seed(0)
    return (
        torch.randn(b, hq, L, e, dtype=F64),
        torch.randn(b, hk, S, e, dtype=F64),
        torch.randn(b, hk, S, ev, dtype=F64),
    )


@pytest.mark.parametrize(
    "kw", [dict(), dict(scale=0.3), dict(is_causal=True), dict(is_causal=True, scale=1.7)], ids=str
)
def test_sdpa_plain_and_causal(kw):
    q, k, v = _qkv()
    check_vjp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw), q, k, v)
    q, k, v = _qkv(L=6, S=6)
    check_vjp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kw), q, k, v)


def test_sdpa_bool_mask_broadcast_and_fully_masked_rows():
    q, k, v = _qkv()
    mask = torch.rand(5, 7) > 0.4
    mask[:, 0] = True
    check_vjp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), q, k, v)
    per_head = torch.rand(2, 1, 5, 7) > 0.3
    per_head[..., 2, :] = False  # a query that sees nothing: output 0, gradient 0
    check_vjp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=per_head), q, k, v)


def test_sdpa_float_mask_gets_a_gradient_too():
    q, k, v = _qkv()
    bias = torch.randn(1, 4, 5, 7, dtype=F64)
    check_vjp(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), q, k, v, bias
    )
    check_vjp(
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m[0, 0], scale=0.5),
        q,
        k,
        v,
        bias,
    )


@pytest.mark.parametrize("hk", [1, 2])
@pytest.mark.parametrize("is_causal", [False, True])
def test_sdpa_grouped_query_attention(hk, is_causal):
    q, k, v = _qkv(hq=4, hk=hk, L=6, S=6)
    check_vjp(
        lambda q, k, v: F.scaled_dot_product_attention(
            q, k, v, is_causal=is_causal, enable_gqa=True
        ),
        q,
        k,
        v,
    )


def test_sdpa_three_dim_inputs():
    q, k, v = (t[0] for t in _qkv())
    check_vjp(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v)


def test_sdpa_keeps_the_fused_call_and_saves_no_attention_matrix():
    q, k, v = (t.float().requires_grad_() for t in _qkv(L=16, S=16, e=4, ev=4))
    mask = torch.ones(16, 16, dtype=torch.bool).tril()
    result = tv.autodiff(
        tv.trace(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), q, k, v)
    )
    assert (
        "torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask="
        in result.augmented_forward.python()
    )
    assert sorted(s.name for s in result.saved_for_backward if s.bytes > 16 * 16) == ["k", "q", "v"]


def test_sdpa_on_cpu_uses_the_flash_kernel_and_its_backward_like_eager():
    q, k, v = (t.float().requires_grad_() for t in _qkv(L=16, S=16, e=4, ev=4))
    result = tv.autodiff(
        tv.trace(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), q, k, v)
    )
    assert "aten._scaled_dot_product_flash_attention_for_cpu(" in result.augmented_forward.python()
    assert "flash_attention_for_cpu_backward" in result.backward.python()
    saved = {s.name: s for s in result.saved_for_backward}
    assert max(s.bytes for s in saved.values()) == q.numel() * 4  # nothing L x S
    check_vjp(
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        *(t.detach().double() for t in (q, k, v)),
    )


# --- whole models ---------------------------------------------------------------------------


def _check_param_grads(model, *args, **kwargs):
    """Gradients of the loss w.r.t. every parameter, against torch.autograd (float64)."""
    model = model.double()
    params = dict(model.named_parameters())

    def loss(params, *args):
        out = torch.func.functional_call(model, params, args, kwargs)
        return out if isinstance(out, torch.Tensor) else out.loss

    value, grads = tv.value_and_grad(loss)(params, *args)
    ref = loss(params, *args)
    ref_grads = torch.autograd.grad(ref, list(params.values()), allow_unused=True)
    torch.testing.assert_close(value, ref.detach())
    for (name, _), g, r in zip(params.items(), grads[: len(params)], ref_grads, strict=True):
        if r is None:
            assert g is None or not g.any(), name
            continue
        assert g is not None, name
        # absolute tolerance relative to the gradient's scale: some exact zeros (a key bias
        # under softmax) come out as ~1e-17 either way
        torch.testing.assert_close(
            g,
            r,
            rtol=1e-6,
            atol=1e-10 * max(1.0, r.abs().max().item()),
            msg=lambda m, name=name: f"{name}: {m}",
        )


def test_mlp_and_cnn_models():
    from thunderviz.models import CNN, MLP

    torch.manual_seed(0)
    _check_param_grads(MLP(), torch.randn(4, 8, dtype=F64), torch.randint(0, 4, (4,)))
    x, y = torch.randn(2, 3, 8, 8, dtype=F64), torch.randint(0, 10, (2,))
    _check_param_grads(CNN(), x, y)
    _check_param_grads(CNN().eval(), x, y)


def test_gpt_model():
    from thunderviz.models import GPT, GPTConfig

    torch.manual_seed(0)
    ids = torch.randint(0, 50, (2, 12))
    _check_param_grads(
        GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, d_model=16)), ids, ids
    )


@pytest.mark.parametrize("arch", ["gpt2", "llama", "bert"])
def test_hugging_face_tiny_models(arch):
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    configs = {
        "gpt2": (
            transformers.GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2),
            transformers.GPT2LMHeadModel,
        ),
        "llama": (
            transformers.LlamaConfig(
                vocab_size=64,
                hidden_size=16,
                intermediate_size=32,
                num_hidden_layers=1,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=16,
            ),
            transformers.LlamaForCausalLM,
        ),
        "bert": (
            transformers.BertConfig(
                vocab_size=64,
                hidden_size=16,
                num_hidden_layers=1,
                num_attention_heads=2,
                intermediate_size=32,
                max_position_embeddings=16,
            ),
            transformers.BertForMaskedLM,
        ),
    }
    config, cls = configs[arch]
    model = cls(config).eval()  # eval: no dropout (attention dropout is not differentiable here)
    ids = torch.randint(0, 64, (2, 8))
    padding = torch.ones(2, 8, dtype=torch.long)
    padding[1, 5:] = 0  # a padded sequence: attention gets a mask
    _check_param_grads(model, ids, labels=ids)
    _check_param_grads(model, ids, labels=ids, attention_mask=padding)
