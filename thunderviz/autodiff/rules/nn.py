"""Grad rules for neural-network ops: convolution, embedding, softmax and losses,
activations, pooling, padding, upsampling (normalization: `rules/normalization.py`).

Where ATen has a backward kernel the rule emits it (`convolution_backward`,
`gelu_backward`, `avg_pool2d_backward`, ...): it is what eager autograd runs, so the
numbers match eager exactly and the backward trace reads like PyTorch's own. Each rule saves
only what its kernel reads (softmax saves its output, not its input).

Dropout is elementwise (`native_dropout`, or `bernoulli` + `mul` once functionalized).
"""

from __future__ import annotations

import functools

from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import get_grad, output_has_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import (
    backward_kernel,
    needs_grad_mask,
    put_grads,
    register,
    unary,
    with_arguments,
)
from thunderviz.prims import aten
from thunderviz.prims.call_args import op_args

RULES = RuleSet("nn")


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
        needs_grad_mask(x, weight, bias),
    )
    put_grads((x, weight, bias), grads)
    return out


def _embedding_grad(out, weight, indices, padding_idx, scale_grad_by_freq, sparse) -> None:
    """The weight's gradient by eager's own kernel: a sparse one for `sparse=True`
    (`Embedding(sparse=True)`, what SparseAdam needs), a dense one otherwise."""
    kernel = (
        aten.embedding_sparse_backward.default if sparse else aten.embedding_dense_backward.default
    )
    put_grad(
        weight, kernel(get_grad(out), indices, weight.shape[0], padding_idx, scale_grad_by_freq)
    )


# weight is the embedding's first argument, the one with a gradient
with_arguments(RULES, aten.embedding.default, _embedding_grad)


# --- softmax and losses -----------------------------------------------------------------------


def _put_softmax_grad(backward, out, x, dim, _half_to_float) -> None:
    put_grad(x, backward(get_grad(out), out, dim, x.dtype))


# softmax's and log_softmax's kernels read the output, not the input
for _name in ("_softmax", "_log_softmax"):
    with_arguments(
        RULES,
        getattr(aten, _name).default,
        functools.partial(_put_softmax_grad, getattr(aten, f"{_name}_backward_data").default),
    )


@RULES.grad(aten._safe_softmax.default)
def safe_softmax(x, dim, **kwargs):
    """softmax that gives 0 (not nan) on rows that are all -inf; softmax's backward is 0
    there too."""
    out = aten._safe_softmax.default(x, dim, **kwargs)
    g = get_grad(out)
    put_grad(x, aten._softmax_backward_data.default(g, out, dim, out.dtype))
    return out


# (out, total_weight): the kernel takes total_weight last, after the call's arguments
# total_weight, which the backward reads, counts the targets' class weights: no function of x
for _op, _backward in (
    (aten.nll_loss_forward.default, aten.nll_loss_backward.default),
    (aten.nll_loss2d_forward.default, aten.nll_loss2d_backward.default),
):
    backward_kernel(RULES, _op, _backward, constant_extras=True)


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
# hardtanh, glu, hardshrink, softshrink (log_sigmoid_forward below).
# (The shrinks' decompositions would do for one backward, but their gradient would read x
# only through a mask and so carry no graph of its own under create_graph; eager's does.)
for _name in (
    "silu",
    "mish",
    "hardsigmoid",
    "hardswish",
    "softplus",
    "hardtanh",
    "glu",
    "hardshrink",
    "softshrink",
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


@RULES.grad(aten.log_sigmoid_forward.default)
def log_sigmoid_forward(x):
    """`F.logsigmoid`: (out, buffer). On the CPU the buffer holds exp(-|x|), which the
    backward kernel reads, and so does its decomposition under create_graph (a penalty on
    the kernel's gradient): a gradient reaches `x` through the buffer too, as
    d buffer/dx = -sign(x) buffer. (On a GPU the buffer is empty.)"""
    out, buffer = aten.log_sigmoid_forward.default(x)
    put_grad(x, aten.log_sigmoid_backward.default(get_grad(out), x, buffer))
    if output_has_grad(1):
        g_buffer = get_grad(buffer)
        if list(buffer.shape) == list(x.shape):
            d_buffer = aten.neg.default(aten.mul.Tensor(aten.sign.default(x), buffer))
            put_grad(x, aten.mul.Tensor(g_buffer, d_buffer))
    return out, buffer


@RULES.grad(aten._prelu_kernel.default)
def prelu_kernel(x, weight):
    out = aten._prelu_kernel.default(x, weight)
    g = get_grad(out)
    put_grads((x, weight), aten._prelu_kernel_backward.default(g, x, weight))
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


def _grid_sampler_rule(op, backward) -> None:
    def grid_sampler(x, grid, interpolation_mode, padding_mode, align_corners):
        out = op(x, grid, interpolation_mode, padding_mode, align_corners)
        grads = backward(
            get_grad(out),
            x,
            grid,
            interpolation_mode,
            padding_mode,
            align_corners,
            needs_grad_mask(x, grid),
        )
        put_grads((x, grid), grads)
        return out

    register(RULES, op, grid_sampler)


for _n in (2, 3):
    _grid_sampler_rule(
        getattr(aten, f"grid_sampler_{_n}d").default,
        getattr(aten, f"grid_sampler_{_n}d_backward").default,
    )


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
