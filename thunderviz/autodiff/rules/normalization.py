"""Grad rules for normalization: layer, batch, group and RMS norm.

As in `rules/nn.py`, a rule emits the backward kernel eager autograd runs
(`native_layer_norm_backward`, `native_batch_norm_backward`, ...), so the numbers match
eager's; `F.rms_norm` is one torch-level op with a rule of its own.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderviz.autodiff.joint import get_grad, output_has_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import needs_grad_mask, put_grads, register, with_arguments
from thunderviz.prims import aten
from thunderviz.prims.torch_symbols import named_torch_symbol

RULES = RuleSet("normalization")


@RULES.grad(aten.native_layer_norm.default)
def native_layer_norm(x, normalized_shape, weight, bias, eps):
    out, mean, rstd = aten.native_layer_norm.default(x, normalized_shape, weight, bias, eps)
    g = get_grad(out)
    grads = aten.native_layer_norm_backward.default(
        g, x, normalized_shape, mean, rstd, weight, bias, needs_grad_mask(x, weight, bias)
    )
    put_grads((x, weight, bias), grads)
    if output_has_grad(1) or output_has_grad(2):
        g_mean, g_rstd = get_grad(mean), get_grad(rstd)  # (asked for even if x needs none)
        if requires_grad(x):
            n = math.prod(normalized_shape)
            put_grad(x, _statistics_grad(x, mean, rstd, g_mean, g_rstd, n))
    return out, mean, rstd


def _statistics_grad(x, mean, rstd, g_mean, g_rstd, count):
    """The gradient `x` gets through a normalization's statistics, `mean` and `rstd` (both
    already shaped to broadcast against `x`) over `count` elements each, as autograd gives
    them: d mean/dx = 1/M and d rstd/dx = -rstd^3 (x - mean) / M. Only a gradient of the
    norm's gradient reaches them (a penalty through a LayerNorm reads its backward kernel,
    which reads them), so rules add this only where one flows (`output_has_grad`)."""
    centered = aten.sub.Tensor(x, mean)
    through_rstd = aten.mul.Tensor(
        aten.mul.Tensor(g_rstd, aten.pow.Tensor_Scalar(rstd, 3)), centered
    )
    return aten.div.Tensor(aten.sub.Tensor(g_mean, through_rstd), count)


def _put_batch_norm_grads(
    outs, x, weight, bias, running_mean, running_var, training, momentum, eps
) -> None:
    """Training normalizes with the batch statistics (save_mean, save_invstd); eval with the
    running ones. The statistics, and the updated running ones a functional form returns,
    take the gradients that reach them (only a gradient of the gradient does, or a program
    that reads them; torch treats them as constants), only where one does."""
    out, save_mean, save_invstd = outs[:3]
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
        needs_grad_mask(x, weight, bias),
    )
    put_grads((x, weight, bias), grads)
    reached = [i for i in range(1, len(outs)) if output_has_grad(i)]
    if not reached:
        return
    g = {i: get_grad(outs[i]) for i in reached}  # (asked for even if x needs none)
    if not (training and requires_grad(x)):
        return
    per_channel = [1, x.shape[1]] + [1] * (len(x.shape) - 2)
    count = math.prod(size for i, size in enumerate(x.shape) if i != 1)  # per channel

    def channels(t):
        return aten.view.default(t, per_channel)

    zeros = aten.zeros_like.default(save_mean)
    g_mean, g_invstd = g.get(1, zeros), g.get(2, zeros)
    if 3 in g:  # new running mean = (1 - m) running_mean + m mean
        g_mean = aten.add.Tensor(g_mean, aten.mul.Tensor(g[3], momentum))
        put_grad(running_mean, aten.mul.Tensor(g[3], 1 - momentum))
    dx = _statistics_grad(
        x, channels(save_mean), channels(save_invstd), channels(g_mean), channels(g_invstd), count
    )
    if 4 in g:  # new running var = (1 - m) running_var + m var (unbiased)
        centered = aten.sub.Tensor(x, channels(save_mean))
        scale = aten.mul.Tensor(g[4], 2 * momentum / max(count - 1, 1))
        dx = aten.add.Tensor(dx, aten.mul.Tensor(channels(scale), centered))
        put_grad(running_var, aten.mul.Tensor(g[4], 1 - momentum))
    put_grad(x, dx)


# Batch norm's ATen forms, each as (x, weight, bias, running_mean, running_var, training, eps)
for _op in (aten.native_batch_norm.default, aten._native_batch_norm_legit_functional.default):
    with_arguments(
        RULES,
        _op,
        lambda outs, x, w, b, mean, var, training, momentum, eps: _put_batch_norm_grads(
            outs, x, w, b, mean, var, training, momentum, eps
        ),
    )
with_arguments(
    RULES,
    aten._native_batch_norm_legit.no_stats,
    lambda outs, x, w, b, _training, momentum, eps: _put_batch_norm_grads(
        outs, x, w, b, None, None, True, momentum, eps
    ),
)
with_arguments(
    RULES,
    aten._native_batch_norm_legit_no_training.default,
    lambda outs, x, w, b, mean, var, momentum, eps: _put_batch_norm_grads(
        outs, x, w, b, mean, var, False, momentum, eps
    ),
)


@RULES.grad(aten.native_group_norm.default)
def native_group_norm(x, weight, bias, N, C, HxW, group, eps):
    """mean and rstd (of shape [N, group]) are outputs with gradients too, as in autograd:
    d mean/dx = 1/M and d rstd/dx = -rstd^3 (x - mean) / M over each group's M elements."""
    out, mean, rstd = aten.native_group_norm.default(x, weight, bias, N, C, HxW, group, eps)
    g = get_grad(out)
    # The CPU kernel reads both as contiguous memory, whatever their strides (a transpose
    # after the norm hands it a transposed gradient); eager's autograd makes them so.
    grads = aten.native_group_norm_backward.default(
        aten.contiguous.default(g),
        aten.contiguous.default(x),
        mean,
        rstd,
        weight,
        N,
        C,
        HxW,
        group,
        needs_grad_mask(x, weight, bias),
    )
    put_grads((x, weight, bias), grads)
    if not (output_has_grad(1) or output_has_grad(2)):
        return out, mean, rstd
    g_mean, g_rstd = get_grad(mean), get_grad(rstd)  # (asked for even if x needs none)
    if requires_grad(x):
        per_group = [N, group, 1]
        xg = aten.reshape.default(x, [N, group, C // group * HxW])  # (-1: ambiguous if N=0)
        mean_g, rstd_g, g_mean_g, g_rstd_g = (
            aten.reshape.default(s, per_group) for s in (mean, rstd, g_mean, g_rstd)
        )
        dx = _statistics_grad(xg, mean_g, rstd_g, g_mean_g, g_rstd_g, xg.shape[-1])
        put_grad(x, aten.reshape.default(dx, list(x.shape)))
    return out, mean, rstd


@RULES.grad(aten._fused_rms_norm.default)
def fused_rms_norm(x, normalized_shape, weight, eps):
    out, rstd = aten._fused_rms_norm.default(x, normalized_shape, weight, eps)
    g = get_grad(out)
    grads = aten._fused_rms_norm_backward.default(
        g, x, normalized_shape, rstd, weight, needs_grad_mask(x, weight)
    )
    put_grads((x, weight), grads)
    return out, rstd


def _rms_norm_args(input, normalized_shape, weight=None, eps=None):  # noqa: A002 - torch's name
    return input, normalized_shape, weight, eps


def _rms_norm_rule(fn) -> None:
    """`F.rms_norm` (and `torch.rms_norm`) as one op: on CPU it would otherwise decompose
    into pow/mean/rsqrt/mul, on CUDA into `_fused_rms_norm`. The backward recomputes the
    1/rms statistic from the input instead of saving it; like eager it computes in float32
    for half-precision inputs."""
    sym = named_torch_symbol(fn)

    def rms_norm(*args, **kwargs):
        out = sym(*args, **kwargs)
        x, normalized_shape, weight, eps = _rms_norm_args(*args, **kwargs)
        g = get_grad(out)
        assert g is not None  # out is a tensor
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

    register(RULES, fn, rms_norm, name=f"rms_norm[{sym.id}]")


_rms_norm_rule(F.rms_norm)
_rms_norm_rule(torch.rms_norm)
