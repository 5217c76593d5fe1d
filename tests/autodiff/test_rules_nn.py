"""Grad rules for nn ops (convolution, embedding, softmax and losses, activations, pooling,
upsampling: rules/nn.py), against torch.autograd; and whole models.

OpInfo samples for every op, plus hand-written cases: conv with groups/dilation/stride,
cross entropy with ignore_index / label smoothing / weights, embedding with padding_idx.
Normalization and attention have modules of their own (test_rules_normalization.py,
test_rules_attention.py).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunderviz as tv
from tests.autodiff.opinfo_samples import sample_params
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
