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


@RULES.grad(aten.embedding.default)
def embedding(*args, **kwargs):
    out = aten.embedding.default(*args, **kwargs)
    weight, indices, padding_idx, scale_grad_by_freq, _sparse = op_args(
        aten.embedding.default, args, kwargs
    )
    g = get_grad(out)
    put_grad(
        weight,
        aten.embedding_dense_backward.default(
            g, indices, weight.shape[0], padding_idx, scale_grad_by_freq
        ),
    )
    return out


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


def _batch_norm_grads(
    g, x, weight, bias, running_mean, running_var, save_mean, save_invstd, training, eps
) -> None:
    """Training normalizes with the batch statistics (save_mean, save_invstd); eval with the
    running ones. Updated running statistics are outputs without gradient."""
    grads = aten.native_batch_norm_backward.default(
        g,
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


@RULES.grad(aten.native_batch_norm.default)
def native_batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    out, save_mean, save_invstd = aten.native_batch_norm.default(
        x, weight, bias, running_mean, running_var, training, momentum, eps
    )
    g = get_grad(out)
    _batch_norm_grads(
        g, x, weight, bias, running_mean, running_var, save_mean, save_invstd, training, eps
    )
    return out, save_mean, save_invstd


@RULES.grad(aten._native_batch_norm_legit_functional.default)
def native_batch_norm_legit_functional(
    x, weight, bias, running_mean, running_var, training, momentum, eps
):
    out, save_mean, save_invstd, new_mean, new_var = (
        aten._native_batch_norm_legit_functional.default(
            x, weight, bias, running_mean, running_var, training, momentum, eps
        )
    )
    g = get_grad(out)
    _batch_norm_grads(
        g, x, weight, bias, running_mean, running_var, save_mean, save_invstd, training, eps
    )
    return out, save_mean, save_invstd, new_mean, new_var


@RULES.grad(aten._native_batch_norm_legit.no_stats)
def native_batch_norm_legit_no_stats(x, weight, bias, training, momentum, eps):
    out, save_mean, save_invstd = aten._native_batch_norm_legit.no_stats(
        x, weight, bias, training, momentum, eps
    )
    g = get_grad(out)
    _batch_norm_grads(g, x, weight, bias, None, None, save_mean, save_invstd, True, eps)
    return out, save_mean, save_invstd


@RULES.grad(aten._native_batch_norm_legit_no_training.default)
def native_batch_norm_legit_no_training(x, weight, bias, running_mean, running_var, momentum, eps):
    out, save_mean, save_invstd = aten._native_batch_norm_legit_no_training.default(
        x, weight, bias, running_mean, running_var, momentum, eps
    )
    g = get_grad(out)
    _batch_norm_grads(
        g, x, weight, bias, running_mean, running_var, save_mean, save_invstd, False, eps
    )
    return out, save_mean, save_invstd


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


def _rms_norm_rule(fn):
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
    return rms_norm


rms_norm = _rms_norm_rule(F.rms_norm)
torch_rms_norm = _rms_norm_rule(torch.rms_norm)


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


@RULES.grad(aten.nll_loss_forward.default)
def nll_loss_forward(x, target, weight, reduction, ignore_index):
    out, total_weight = aten.nll_loss_forward.default(x, target, weight, reduction, ignore_index)
    g = get_grad(out)
    put_grad(
        x,
        aten.nll_loss_backward.default(g, x, target, weight, reduction, ignore_index, total_weight),
    )
    return out, total_weight


@RULES.grad(aten.nll_loss2d_forward.default)
def nll_loss2d_forward(x, target, weight, reduction, ignore_index):
    out, total_weight = aten.nll_loss2d_forward.default(x, target, weight, reduction, ignore_index)
    g = get_grad(out)
    put_grad(
        x,
        aten.nll_loss2d_backward.default(
            g, x, target, weight, reduction, ignore_index, total_weight
        ),
    )
    return out, total_weight


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


@RULES.grad(aten.silu.default)
def silu(x):
    out = aten.silu.default(x)
    put_grad(x, aten.silu_backward.default(get_grad(out), x))
    return out


@RULES.grad(aten.mish.default)
def mish(x):
    out = aten.mish.default(x)
    put_grad(x, aten.mish_backward.default(get_grad(out), x))
    return out


@RULES.grad(aten.hardsigmoid.default)
def hardsigmoid(x):
    out = aten.hardsigmoid.default(x)
    put_grad(x, aten.hardsigmoid_backward.default(get_grad(out), x))
    return out


@RULES.grad(aten.hardswish.default)
def hardswish(x):
    out = aten.hardswish.default(x)
    put_grad(x, aten.hardswish_backward.default(get_grad(out), x))
    return out


@RULES.grad(aten.leaky_relu.default)
def leaky_relu(*args, **kwargs):
    out = aten.leaky_relu.default(*args, **kwargs)
    x, negative_slope = op_args(aten.leaky_relu.default, args, kwargs)
    put_grad(x, aten.leaky_relu_backward.default(get_grad(out), x, negative_slope, False))
    return out


@RULES.grad(aten.softplus.default)
def softplus(*args, **kwargs):
    out = aten.softplus.default(*args, **kwargs)
    x, beta, threshold = op_args(aten.softplus.default, args, kwargs)
    put_grad(x, aten.softplus_backward.default(get_grad(out), x, beta, threshold))
    return out


@RULES.grad(aten.hardtanh.default)
def hardtanh(*args, **kwargs):
    out = aten.hardtanh.default(*args, **kwargs)
    x, min_val, max_val = op_args(aten.hardtanh.default, args, kwargs)
    put_grad(x, aten.hardtanh_backward.default(get_grad(out), x, min_val, max_val))
    return out


@RULES.grad(aten.elu.default)
def elu(*args, **kwargs):
    out = aten.elu.default(*args, **kwargs)
    x, alpha, scale, input_scale = op_args(aten.elu.default, args, kwargs)
    put_grad(x, aten.elu_backward.default(get_grad(out), alpha, scale, input_scale, False, x))
    return out


@RULES.grad(aten.celu.default)
def celu(*args, **kwargs):
    out = aten.celu.default(*args, **kwargs)
    x, alpha = op_args(aten.celu.default, args, kwargs)
    put_grad(x, aten.elu_backward.default(get_grad(out), alpha, 1, 1.0 / alpha, False, x))
    return out


@RULES.grad(aten.threshold.default)
def threshold(x, threshold, value):
    out = aten.threshold.default(x, threshold, value)
    put_grad(x, aten.threshold_backward.default(get_grad(out), x, threshold))
    return out


@RULES.grad(aten.glu.default)
def glu(*args, **kwargs):
    out = aten.glu.default(*args, **kwargs)
    x, dim = op_args(aten.glu.default, args, kwargs)
    put_grad(x, aten.glu_backward.default(get_grad(out), x, dim))
    return out


@RULES.grad(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(x):
    out, buffer = aten.log_sigmoid_forward.default(x)
    g = get_grad(out)
    put_grad(x, aten.log_sigmoid_backward.default(g, x, buffer))
    return out, buffer


@RULES.grad(aten.log_sigmoid.default)
def log_sigmoid(x):
    """log(sigmoid(x))' = sigmoid(-x). (Seen inside decompositions; F.logsigmoid itself is
    `log_sigmoid_forward`.)"""
    out = aten.log_sigmoid.default(x)
    put_grad(x, aten.mul.Tensor(get_grad(out), aten.sigmoid.default(aten.neg.default(x))))
    return out


@RULES.grad(aten._prelu_kernel.default)
def prelu_kernel(x, weight):
    out = aten._prelu_kernel.default(x, weight)
    g = get_grad(out)
    _put_all((x, weight), aten._prelu_kernel_backward.default(g, x, weight))
    return out


# --- pooling and upsampling --------------------------------------------------------------------


@RULES.grad(aten.max_pool2d_with_indices.default)
def max_pool2d_with_indices(*args, **kwargs):
    out, indices = aten.max_pool2d_with_indices.default(*args, **kwargs)
    x, kernel_size, stride, padding, dilation, ceil_mode = op_args(
        aten.max_pool2d_with_indices.default, args, kwargs
    )
    g = get_grad(out)
    put_grad(
        x,
        aten.max_pool2d_with_indices_backward.default(
            g, x, kernel_size, stride, padding, dilation, ceil_mode, indices
        ),
    )
    return out, indices


@RULES.grad(aten.max_pool3d_with_indices.default)
def max_pool3d_with_indices(*args, **kwargs):
    out, indices = aten.max_pool3d_with_indices.default(*args, **kwargs)
    x, kernel_size, stride, padding, dilation, ceil_mode = op_args(
        aten.max_pool3d_with_indices.default, args, kwargs
    )
    g = get_grad(out)
    put_grad(
        x,
        aten.max_pool3d_with_indices_backward.default(
            g, x, kernel_size, stride, padding, dilation, ceil_mode, indices
        ),
    )
    return out, indices


@RULES.grad(aten.avg_pool2d.default)
def avg_pool2d(*args, **kwargs):
    out = aten.avg_pool2d.default(*args, **kwargs)
    x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override = op_args(
        aten.avg_pool2d.default, args, kwargs
    )
    put_grad(
        x,
        aten.avg_pool2d_backward.default(
            get_grad(out),
            x,
            kernel_size,
            stride,
            padding,
            ceil_mode,
            count_include_pad,
            divisor_override,
        ),
    )
    return out


@RULES.grad(aten.avg_pool3d.default)
def avg_pool3d(*args, **kwargs):
    out = aten.avg_pool3d.default(*args, **kwargs)
    x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override = op_args(
        aten.avg_pool3d.default, args, kwargs
    )
    put_grad(
        x,
        aten.avg_pool3d_backward.default(
            get_grad(out),
            x,
            kernel_size,
            stride,
            padding,
            ceil_mode,
            count_include_pad,
            divisor_override,
        ),
    )
    return out


@RULES.grad(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(x, output_size):
    out = aten._adaptive_avg_pool2d.default(x, output_size)
    put_grad(x, aten._adaptive_avg_pool2d_backward.default(get_grad(out), x))
    return out


@RULES.grad(aten._adaptive_avg_pool3d.default)
def adaptive_avg_pool3d(x, output_size):
    out = aten._adaptive_avg_pool3d.default(x, output_size)
    put_grad(x, aten._adaptive_avg_pool3d_backward.default(get_grad(out), x))
    return out


@RULES.grad(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(x, output_size):
    out, indices = aten.adaptive_max_pool2d.default(x, output_size)
    put_grad(x, aten.adaptive_max_pool2d_backward.default(get_grad(out), x, indices))
    return out, indices


@RULES.grad(aten.adaptive_max_pool3d.default)
def adaptive_max_pool3d(x, output_size):
    out, indices = aten.adaptive_max_pool3d.default(x, output_size)
    put_grad(x, aten.adaptive_max_pool3d_backward.default(get_grad(out), x, indices))
    return out, indices


def _pad_rule(op, backward):
    """reflection / replication padding: `*_backward(g, x, padding)` folds the copied border
    values back onto the elements they came from."""

    def pad(x, padding):
        out = op(x, padding)
        put_grad(x, backward(get_grad(out), x, padding))
        return out

    pad.__name__ = pad.__qualname__ = op.id.split(".")[1]
    RULES.grad(op, supports_complex=True)(pad)  # linear: no conjugates


for _kind in ("reflection", "replication"):
    for _n in (1, 2, 3):
        _pad_rule(
            getattr(aten, f"{_kind}_pad{_n}d").default,
            getattr(aten, f"{_kind}_pad{_n}d_backward").default,
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


@RULES.grad(aten.im2col.default, supports_complex=True)
def im2col(x, kernel_size, dilation, padding, stride):
    """F.unfold: each column gathers one sliding block; col2im sums them back."""
    out = aten.im2col.default(x, kernel_size, dilation, padding, stride)
    put_grad(
        x,
        aten.col2im.default(
            get_grad(out), list(x.shape[-2:]), kernel_size, dilation, padding, stride
        ),
    )
    return out


@RULES.grad(aten.col2im.default, supports_complex=True)
def col2im(x, output_size, kernel_size, dilation, padding, stride):
    """F.fold, the adjoint of F.unfold."""
    out = aten.col2im.default(x, output_size, kernel_size, dilation, padding, stride)
    put_grad(x, aten.im2col.default(get_grad(out), kernel_size, dilation, padding, stride))
    return out


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


def _upsample_rule(op, backward):
    """upsample_*(x, output_size, *options) -> upsample_*_backward(g, output_size,
    input_size, *options): every interpolation mode has this shape."""

    def upsample(*args, **kwargs):
        out = op(*args, **kwargs)
        x, output_size, *options = op_args(op, args, kwargs)
        put_grad(x, backward(get_grad(out), output_size, list(x.shape), *options))
        return out

    upsample.__name__ = upsample.__qualname__ = op.id.split(".")[1]
    RULES.grad(op)(upsample)


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
    _upsample_rule(getattr(aten, _name).default, getattr(aten, f"{_name}_backward").default)
