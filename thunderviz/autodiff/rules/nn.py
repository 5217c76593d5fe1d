"""Grad rules for neural-network ops: convolution, embedding, normalization, softmax and
losses, activations, pooling, upsampling.

Where ATen has a backward kernel the rule emits it (`convolution_backward`,
`native_layer_norm_backward`, `gelu_backward`, ...): it is what eager autograd runs, so the
numbers match eager exactly and the backward trace reads like PyTorch's own. Each rule saves
only what its kernel reads (softmax saves its output, not its input).

Dropout is elementwise (`native_dropout`, or `bernoulli` + `mul` once functionalized).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import backward_kernel, unary
from thunderviz.prims import aten
from thunderviz.prims.call_args import op_args
from thunderviz.prims.torch_symbols import torch_symbol

RULES = RuleSet("nn")


def _mask(*xs) -> list[bool]:
    """The `output_mask` of a backward kernel: which inputs need a gradient."""
    return [requires_grad(x) for x in xs]


def _put_all(inputs, grads) -> None:
    for x, g in zip(inputs, grads, strict=True):
        if g is not None:
            put_grad(x, g)


# --- convolution and embedding ------------------------------------------------------------


@RULES.grad(aten.convolution.default)
def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    out = aten.convolution.default(
        x, weight, bias, stride, padding, dilation, transposed, output_padding, groups
    )
    g = get_grad(out)
    grads = aten.convolution_backward.default(
        g,
        x,
        weight,
        None if bias is None else list(bias.shape),
        stride,
        padding,
        dilation,
        transposed,
        output_padding,
        groups,
        _mask(x, weight, bias),
    )
    _put_all((x, weight, bias), grads)
    return out


# weight is the embedding's first argument, the one with a gradient
backward_kernel(
    RULES,
    aten.embedding.default,
    aten.embedding_dense_backward.default,
    lambda g, weight, indices, padding_idx, scale_grad_by_freq, _sparse: (
        g,
        indices,
        weight.shape[0],
        padding_idx,
        scale_grad_by_freq,
    ),
)


# --- normalization --------------------------------------------------------------------------


@RULES.grad(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    out, mean, rstd = aten.native_layer_norm.default(x, normalized_shape, weight, bias, eps)
    g = get_grad(out)
    grads = aten.native_layer_norm_backward.default(
        g, x, normalized_shape, mean, rstd, weight, bias, _mask(x, weight, bias)
    )
    _put_all((x, weight, bias), grads)
    return out, mean, rstd


def _batch_norm_rule(op, arguments) -> None:
    """Batch norm's ATen forms: `arguments(*the call's arguments)` gives (x, weight, bias,
    running_mean, running_var, training, eps). Training normalizes with the batch statistics
    (save_mean, save_invstd); eval with the running ones. Updated running statistics are
    outputs without gradient."""

    def batch_norm(*args, **kwargs):
        outs = op(*args, **kwargs)
        out, save_mean, save_invstd = outs[:3]
        x, weight, bias, running_mean, running_var, training, eps = arguments(
            *op_args(op, args, kwargs)
        )
        grads = aten.native_batch_norm_backward.default(
            get_grad(out),
            x,
            weight,
            None if training else running_mean,
            None if training else running_var,
            save_mean,
            save_invstd,
            training,
            eps,
            _mask(x, weight, bias),
        )
        _put_all((x, weight, bias), grads)
        return outs

    batch_norm.__name__ = batch_norm.__qualname__ = op.label
    RULES.grad(op)(batch_norm)


for _op in (aten.native_batch_norm.default, aten._native_batch_norm_legit_functional.default):
    _batch_norm_rule(
        _op,
        lambda x, w, b, mean, var, training, _momentum, eps: (x, w, b, mean, var, training, eps),
    )
_batch_norm_rule(
    aten._native_batch_norm_legit.no_stats,
    lambda x, w, b, _training, _momentum, eps: (x, w, b, None, None, True, eps),
)
_batch_norm_rule(
    aten._native_batch_norm_legit_no_training.default,
    lambda x, w, b, mean, var, _momentum, eps: (x, w, b, mean, var, False, eps),
)


@RULES.grad(aten.native_group_norm.default)
def native_group_norm(x, weight, bias, N, C, HxW, group, eps):
    """mean and rstd (of shape [N, group]) are outputs with gradients too, as in autograd:
    d mean/dx = 1/M and d rstd/dx = -rstd^3 (x - mean) / M over each group's M elements."""
    out, mean, rstd = aten.native_group_norm.default(x, weight, bias, N, C, HxW, group, eps)
    g, g_mean, g_rstd = get_grad(out), get_grad(mean), get_grad(rstd)
    grads = aten.native_group_norm_backward.default(
        g, x, mean, rstd, weight, N, C, HxW, group, _mask(x, weight, bias)
    )
    _put_all((x, weight, bias), grads)
    if requires_grad(x):
        per_group = [N, group, 1]
        xg = aten.reshape.default(x, [N, group, -1])
        centered = aten.sub.Tensor(xg, aten.reshape.default(mean, per_group))
        rstd3 = aten.pow.Tensor_Scalar(aten.reshape.default(rstd, per_group), 3)
        dx = aten.sub.Tensor(
            aten.reshape.default(g_mean, per_group),
            aten.mul.Tensor(
                aten.mul.Tensor(aten.reshape.default(g_rstd, per_group), rstd3), centered
            ),
        )
        put_grad(x, aten.reshape.default(aten.div.Tensor(dx, xg.shape[-1]), list(x.shape)))
    return out, mean, rstd


@RULES.grad(aten._fused_rms_norm.default)
def fused_rms_norm(x, normalized_shape, weight, eps):
    out, rstd = aten._fused_rms_norm.default(x, normalized_shape, weight, eps)
    g = get_grad(out)
    grads = aten._fused_rms_norm_backward.default(
        g, x, normalized_shape, rstd, weight, _mask(x, weight)
    )
    _put_all((x, weight), grads)
    return out, rstd


def _rms_norm_args(input, normalized_shape, weight=None, eps=None):  # noqa: A002 - torch's name
    return input, normalized_shape, weight, eps


def _rms_norm_rule(fn) -> None:
    """`F.rms_norm` (and `torch.rms_norm`) as one op: on CPU it would otherwise decompose
    into pow/mean/rsqrt/mul, on CUDA into `_fused_rms_norm`. The backward recomputes the
    1/rms statistic from the input instead of saving it; like eager it computes in float32
    for half-precision inputs."""
    sym = torch_symbol(fn)

    def rms_norm(*args, **kwargs):
        out = sym(*args, **kwargs)
        x, normalized_shape, weight, eps = _rms_norm_args(*args, **kwargs)
        g = get_grad(out)
        n = 1 if isinstance(normalized_shape, int) else len(normalized_shape)
        dims = list(range(x.ndim - n, x.ndim))
        compute = torch.float64 if x.dtype == torch.float64 else torch.float32
        if eps is None:
            eps = torch.finfo(compute).eps
        xc = x if x.dtype == compute else aten._to_copy.default(x, dtype=compute)
        gc = g if g.dtype == compute else aten._to_copy.default(g, dtype=compute)
        mean_sq = aten.mean.dim(aten.mul.Tensor(xc, xc), dims, True)
        rstd = aten.rsqrt.default(aten.add.Scalar(mean_sq, eps))
        normed = aten.mul.Tensor(xc, rstd)
        if requires_grad(weight):
            put_grad(weight, aten.mul.Tensor(gc, normed))  # put_grad sums the batch dims
        if requires_grad(x):
            dn = gc if weight is None else aten.mul.Tensor(gc, weight)
            proj = aten.mean.dim(aten.mul.Tensor(dn, normed), dims, True)
            dx = aten.mul.Tensor(aten.sub.Tensor(dn, aten.mul.Tensor(normed, proj)), rstd)
            put_grad(x, dx)
        return out

    rms_norm.__name__ = rms_norm.__qualname__ = f"rms_norm[{sym.id}]"
    RULES.grad(fn)(rms_norm)


_rms_norm_rule(F.rms_norm)
_rms_norm_rule(torch.rms_norm)


# --- softmax and losses -----------------------------------------------------------------------


@RULES.grad(aten._softmax.default)
def softmax(x, dim, half_to_float):
    out = aten._softmax.default(x, dim, half_to_float)
    g = get_grad(out)
    put_grad(x, aten._softmax_backward_data.default(g, out, dim, x.dtype))
    return out


@RULES.grad(aten._log_softmax.default)
def log_softmax(x, dim, half_to_float):
    out = aten._log_softmax.default(x, dim, half_to_float)
    g = get_grad(out)
    put_grad(x, aten._log_softmax_backward_data.default(g, out, dim, x.dtype))
    return out


@RULES.grad(aten._safe_softmax.default)
def safe_softmax(x, dim, **kwargs):
    """softmax that gives 0 (not nan) on rows that are all -inf; softmax's backward is 0
    there too."""
    out = aten._safe_softmax.default(x, dim, **kwargs)
    g = get_grad(out)
    put_grad(x, aten._softmax_backward_data.default(g, out, dim, out.dtype))
    return out


# (out, total_weight): the kernel takes total_weight last, after the call's arguments
backward_kernel(RULES, aten.nll_loss_forward.default, aten.nll_loss_backward.default)
backward_kernel(RULES, aten.nll_loss2d_forward.default, aten.nll_loss2d_backward.default)


@RULES.grad(aten.mse_loss.default)
def mse_loss(*args, **kwargs):
    out = aten.mse_loss.default(*args, **kwargs)
    x, target, reduction = op_args(aten.mse_loss.default, args, kwargs)
    g = get_grad(out)
    gx = aten.mse_loss_backward.default(g, x, target, reduction)
    put_grad(x, gx)
    if requires_grad(target):
        put_grad(target, aten.neg.default(gx))
    return out


# --- activations ---------------------------------------------------------------------------


@RULES.grad(aten.gelu.default)
def gelu(x, **kwargs):
    out = aten.gelu.default(x, **kwargs)
    g = get_grad(out)
    put_grad(x, aten.gelu_backward.default(g, x, approximate=kwargs.get("approximate", "none")))
    return out


# backward(g, x, *the call's other arguments): silu, mish, hardsigmoid, hardswish, softplus,
# hardtanh, glu; and log_sigmoid_forward's (out, buffer), buffer last
for _name in (
    "silu",
    "mish",
    "hardsigmoid",
    "hardswish",
    "softplus",
    "hardtanh",
    "glu",
    "log_sigmoid_forward",
):
    backward_kernel(
        RULES,
        getattr(aten, _name).default,
        getattr(aten, _name.removesuffix("_forward") + "_backward").default,
    )
backward_kernel(
    RULES,
    aten.leaky_relu.default,
    aten.leaky_relu_backward.default,
    lambda g, x, negative_slope: (g, x, negative_slope, False),
)
# elu_backward(g, alpha, scale, input_scale, is_result, self_or_result); celu is an elu
backward_kernel(
    RULES,
    aten.elu.default,
    aten.elu_backward.default,
    lambda g, x, alpha, scale, input_scale: (g, alpha, scale, input_scale, False, x),
)
backward_kernel(
    RULES,
    aten.celu.default,
    aten.elu_backward.default,
    lambda g, x, alpha: (g, alpha, 1, 1.0 / alpha, False, x),
)
backward_kernel(
    RULES,
    aten.threshold.default,
    aten.threshold_backward.default,
    lambda g, x, threshold, _value: (g, x, threshold),
)


# log(sigmoid(x))' = sigmoid(-x). (Seen inside decompositions; F.logsigmoid itself is
# `log_sigmoid_forward`.)
unary(
    RULES,
    aten.log_sigmoid.default,
    lambda g, x, out: aten.mul.Tensor(g, aten.sigmoid.default(aten.neg.default(x))),
)


@RULES.grad(aten._prelu_kernel.default)
def prelu_kernel(x, weight):
    out = aten._prelu_kernel.default(x, weight)
    g = get_grad(out)
    _put_all((x, weight), aten._prelu_kernel_backward.default(g, x, weight))
    return out


# --- pooling and upsampling --------------------------------------------------------------------


# max pooling's (out, indices) and avg pooling: backward(g, x, *the call's arguments[,
# indices]); adaptive pooling's kernels read the output size from g
for _name in ("max_pool2d_with_indices", "max_pool3d_with_indices", "avg_pool2d", "avg_pool3d"):
    backward_kernel(RULES, getattr(aten, _name).default, getattr(aten, f"{_name}_backward").default)
for _n in (2, 3):
    backward_kernel(
        RULES,
        getattr(aten, f"_adaptive_avg_pool{_n}d").default,
        getattr(aten, f"_adaptive_avg_pool{_n}d_backward").default,
        lambda g, x, _output_size: (g, x),
    )
    backward_kernel(
        RULES,
        getattr(aten, f"adaptive_max_pool{_n}d").default,
        getattr(aten, f"adaptive_max_pool{_n}d_backward").default,
        lambda g, x, _output_size, indices: (g, x, indices),
    )


# reflection / replication padding: `*_backward(g, x, padding)` folds the copied border
# values back onto the elements they came from (linear: no conjugates)
for _kind in ("reflection", "replication"):
    for _n in (1, 2, 3):
        backward_kernel(
            RULES,
            getattr(aten, f"{_kind}_pad{_n}d").default,
            getattr(aten, f"{_kind}_pad{_n}d_backward").default,
            supports_complex=True,
        )


@RULES.grad(aten.pad.default, supports_complex=True)
def pad(*args, **kwargs):
    """`aten.pad` (it appears inside decompositions, e.g. F.unfold's): constant, reflect and
    replicate modes as the ops they stand for."""
    out = aten.pad.default(*args, **kwargs)
    x, padding, mode, _value = op_args(aten.pad.default, args, kwargs)
    g = get_grad(out)
    if mode == "constant":
        put_grad(x, aten.constant_pad_nd.default(g, [-p for p in padding]))
    elif mode in ("reflect", "replicate"):
        kind = "reflection" if mode == "reflect" else "replication"
        backward = getattr(aten, f"{kind}_pad{len(padding) // 2}d_backward").default
        put_grad(x, backward(g, x, padding))
    else:
        raise AutodiffError(
            f"aten.pad with mode={mode!r} has no grad rule; F.pad with this "
            "mode differentiates through its own decomposition"
        )
    return out


# F.unfold: each column gathers one sliding block; col2im sums them back
backward_kernel(
    RULES,
    aten.im2col.default,
    aten.col2im.default,
    lambda g, x, *options: (g, list(x.shape[-2:]), *options),
    supports_complex=True,
)
# F.fold, the adjoint of F.unfold
backward_kernel(
    RULES,
    aten.col2im.default,
    aten.im2col.default,
    lambda g, x, _output_size, *options: (g, *options),
    supports_complex=True,
)


@RULES.grad(aten.grid_sampler_2d.default)
def grid_sampler_2d(x, grid, interpolation_mode, padding_mode, align_corners):
    out = aten.grid_sampler_2d.default(x, grid, interpolation_mode, padding_mode, align_corners)
    grads = aten.grid_sampler_2d_backward.default(
        get_grad(out), x, grid, interpolation_mode, padding_mode, align_corners, _mask(x, grid)
    )
    _put_all((x, grid), grads)
    return out


@RULES.grad(aten.grid_sampler_3d.default)
def grid_sampler_3d(x, grid, interpolation_mode, padding_mode, align_corners):
    out = aten.grid_sampler_3d.default(x, grid, interpolation_mode, padding_mode, align_corners)
    grads = aten.grid_sampler_3d_backward.default(
        get_grad(out), x, grid, interpolation_mode, padding_mode, align_corners, _mask(x, grid)
    )
    _put_all((x, grid), grads)
    return out


# upsample_*(x, output_size, *options) -> upsample_*_backward(g, output_size, input_size,
# *options): every interpolation mode has this shape
for _name in (
    "upsample_nearest1d",
    "upsample_nearest2d",
    "upsample_nearest3d",
    "_upsample_nearest_exact1d",
    "_upsample_nearest_exact2d",
    "_upsample_nearest_exact3d",
    "upsample_linear1d",
    "upsample_bilinear2d",
    "upsample_trilinear3d",
    "upsample_bicubic2d",
    "_upsample_bilinear2d_aa",
    "_upsample_bicubic2d_aa",
):
    backward_kernel(
        RULES,
        getattr(aten, _name).default,
        getattr(aten, f"{_name}_backward").default,
        lambda g, x, output_size, *options: (g, output_size, list(x.shape), *options),
    )
