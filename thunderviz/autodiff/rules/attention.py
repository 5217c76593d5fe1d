"""The grad rule of `torch.nn.functional.scaled_dot_product_attention`, as one op.

A torch-level rule. On the CPU, without a mask tensor or grouped heads, it runs the flash
kernel eager uses and that kernel's own backward (saving q, k, v, the output and the rows'
logsumexp, like eager). Elsewhere on the CPU the forward stays the user's call, and the
backward recomputes the attention probabilities from q, k and v, so only q, k, v (and a
mask) are saved, never the L x S matrix.
With P = softmax(q k^T * scale + mask):

    dv = P^T g        dP = g v^T        dS = P * (dP - rowsum(dP * P))
    dq = dS k * scale      dk = dS^T q * scale      d(float mask) = dS

With dropout (`dropout_p > 0` in training), and on a GPU, these rules step aside and the
call is differentiated through the ops eager ran for it: with dropout they draw the mask
(the same mask as eager under the same seed, and the backward multiplies by it); on a GPU
they are the fused kernel torch picked (flash, memory-efficient or cuDNN attention, below),
whose own backward kernel is eager's: one launch where recomputing P takes a dozen, which
on a GPU is what a training step of a small model waits for. (Where torch picked the math
kernel, its rule recomputes as above.)

Grouped-query attention (`enable_gqa=True`, k/v with fewer heads than q) repeats each k/v
head for its group of q heads; their gradients sum over the group.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.core.symbol import BoundSymbol
from thunderviz.prims import aten
from thunderviz.prims.aten import op_id
from thunderviz.prims.torch_symbols import named_torch_symbol

RULES = RuleSet("attention")

SDPA = named_torch_symbol(F.scaled_dot_product_attention)
MATH_ID = op_id(torch.ops.aten._scaled_dot_product_attention_math.default)
CPU_FLASH_ID = op_id(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default)


def _sdpa_args(
    query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False
):
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


def _mT(x):
    return aten.transpose.int(x, -2, -1)


def _repeat_heads(x, groups: int):
    """(..., Hk, S, E) -> (..., Hk * groups, S, E), each head repeated `groups` times in a
    row (as repeat_interleave on dim -3)."""
    *batch, hk, s, e = x.shape
    x = aten.expand.default(aten.unsqueeze.default(x, -3), [*batch, hk, groups, s, e])
    return aten.reshape.default(x, [*batch, hk * groups, s, e])


def _sum_heads(g, groups: int):
    """The gradient of `_repeat_heads`: sum each group of repeated heads."""
    *batch, h, s, e = g.shape
    g = aten.reshape.default(g, [*batch, h // groups, groups, s, e])
    return aten.sum.dim_IntList(g, [-3])


def _cpu_flash_applies(q, k, v, mask, enable_gqa) -> bool:
    """Where eager CPU attention runs its flash kernel, and its fused backward is available:
    4-D, one dtype, one head size, no mask tensor, no grouped heads."""
    return (
        q.device.type == "cpu"
        and mask is None
        and not enable_gqa
        and q.ndim == 4
        and q.dtype == k.dtype == v.dtype
        and q.dtype in (torch.float32, torch.float64, torch.bfloat16)
        and k.shape[-3] == q.shape[-3]
        and v.shape[-3] == q.shape[-3]
        and q.shape[-1] == k.shape[-1] == v.shape[-1]
    )


def _cpu_flash(q, k, v, is_causal, scale, dropout_p=0.0, attn_mask=None):
    """The CPU flash kernel and its own backward, as eager uses them: the forward also
    returns the rows' logsumexp, which is saved (B x H x L floats) instead of recomputing
    the softmax statistics; the L x S probabilities are never saved. Returns (out,
    logsumexp)."""
    mask = {} if attn_mask is None else {"attn_mask": attn_mask}  # (as the call spelled it)
    out, logsumexp = aten._scaled_dot_product_flash_attention_for_cpu.default(
        q, k, v, dropout_p, is_causal, **mask, scale=scale
    )
    g = get_grad(out)
    dq, dk, dv = aten._scaled_dot_product_flash_attention_for_cpu_backward.default(
        g, q, k, v, out, logsumexp, dropout_p, is_causal, **mask, scale=scale
    )
    put_grad(q, dq)
    put_grad(k, dk)
    put_grad(v, dv)
    return out, logsumexp


def _recompute_backward(q, k, v, mask, is_causal, scale, enable_gqa, g, g_probs=None) -> None:
    """The attention backward from q, k and v alone: recompute P = softmax(q kᵀ * scale +
    mask), then the formulas of the module docstring. `g_probs` is a cotangent of P itself,
    for the ops that also return it."""
    compute = q.dtype if q.dtype in (torch.float32, torch.float64) else torch.float32
    up = lambda x: x if x.dtype == compute else aten._to_copy.default(x, dtype=compute)  # noqa: E731
    qc, kc, vc, gc = up(q), up(k), up(v), up(g)
    groups = 1
    if enable_gqa and q.ndim >= 3 and q.shape[-3] != k.shape[-3]:
        groups = q.shape[-3] // k.shape[-3]
        kc, vc = _repeat_heads(kc, groups), _repeat_heads(vc, groups)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale

    scores = aten.mul.Tensor(aten.matmul.default(qc, _mT(kc)), scale)
    L, S = q.shape[-2], k.shape[-2]
    if is_causal:
        keep = aten.tril.default(aten.ones.default([L, S], dtype=torch.bool, device=q.device))
        scores = aten.where.ScalarOther(keep, scores, -math.inf)
    elif mask is not None and mask.dtype == torch.bool:
        scores = aten.where.ScalarOther(mask, scores, -math.inf)
    elif mask is not None:
        scores = aten.add.Tensor(scores, mask)
    if mask is None:  # no row can be masked out entirely (a causal row keeps its diagonal)
        probs = aten._softmax.default(scores, -1, False)
    else:  # a user mask may mask a whole row: its probabilities are 0, not nan
        probs = aten._safe_softmax.default(scores, -1)

    d_probs = aten.matmul.default(gc, _mT(vc))
    if g_probs is not None:
        d_probs = aten.add.Tensor(d_probs, up(g_probs))
    d_scores = aten._softmax_backward_data.default(d_probs, probs, -1, probs.dtype)
    if requires_grad(q):
        put_grad(q, aten.mul.Tensor(aten.matmul.default(d_scores, kc), scale))
    if requires_grad(k):
        dk = aten.mul.Tensor(aten.matmul.default(_mT(d_scores), qc), scale)
        put_grad(k, dk if groups == 1 else _sum_heads(dk, groups))
    if requires_grad(v):
        dv = aten.matmul.default(_mT(probs), gc)
        put_grad(v, dv if groups == 1 else _sum_heads(dv, groups))
    if requires_grad(mask):
        put_grad(mask, d_scores)  # put_grad sums over the dims the mask was broadcast along


def _recomputes(bsym: BoundSymbol) -> bool:
    """These rules are for attention without dropout, off the GPU's fused kernels. With
    dropout, the call is differentiated through its subsymbols: the ops eager ran, which
    draw the mask (on the CPU the math kernel's `bernoulli_`; on CUDA a fused kernel whose
    philox seed and offset its backward kernel takes), so the trace draws eager's mask and
    the backward uses it. On a GPU the torch-level call is differentiated through the kernel
    torch picked for it (the module docstring). So is a CPU call that would fit the flash
    kernel where eager did not run it (`sdpa_kernel(SDPBackend.MATH)`): through the math
    ops it ran, whose gradient is eager's to the last bit."""
    math = bsym.sym.id == MATH_ID
    args = (_math_args if math else _sdpa_args)(*bsym.args, **bsym.kwargs)
    if getattr(args[4], "value", args[4]):
        return False
    if math:
        return True
    q, k, v, mask, *_, enable_gqa = args
    if getattr(q, "device", torch.device("cpu")).type == "cuda":
        return False
    fits_flash = _cpu_flash_applies(q, k, v, mask, enable_gqa)
    return not fits_flash or any(s.sym.id == CPU_FLASH_ID for s in bsym.subsymbols)


@RULES.grad(F.scaled_dot_product_attention, applies=_recomputes)
def scaled_dot_product_attention(*args, **kwargs):
    q, k, v, mask, dropout_p, is_causal, scale, enable_gqa = _sdpa_args(*args, **kwargs)
    if _cpu_flash_applies(q, k, v, mask, enable_gqa):
        return _cpu_flash(q, k, v, is_causal, scale)[0]
    out = SDPA(*args, **kwargs)
    _recompute_backward(q, k, v, mask, is_causal, scale, enable_gqa, get_grad(out))
    return out


def _math_args(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    dropout_mask=None,
    scale=None,
    enable_gqa=False,
):
    return query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa


@RULES.grad(aten._scaled_dot_product_attention_math.default, applies=_recomputes)
def scaled_dot_product_attention_math(*args, **kwargs):
    """The math kernel some callers reach directly (nn.MultiheadAttention's fast path inside
    nn.TransformerEncoderLayer): it also returns P, which may take a cotangent of its own."""
    q, k, v, mask, dropout_p, is_causal, scale, enable_gqa = _math_args(*args, **kwargs)
    out, probs = aten._scaled_dot_product_attention_math.default(*args, **kwargs)
    g, g_probs = get_grad(out), get_grad(probs)
    _recompute_backward(q, k, v, mask, is_causal, scale, enable_gqa, g, g_probs)
    return out, probs


# --- CUDA's fused kernels (reached with dropout, when the rules above step aside) ------------
# Each draws its dropout mask from a philox seed and offset taken from the generator, and
# returns them; its backward kernel takes them and regenerates the same mask. The forward
# is asked for the logsumexp its backward needs (capture, without gradients, may not have).


def _number(x):
    return getattr(x, "value", x)  # a size the meta kernel returned as a NumberProxy


@RULES.grad(aten._scaled_dot_product_flash_attention_for_cpu.default)
def flash_attention_for_cpu(
    query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None
):
    """The CPU flash kernel where torch picked it inside another call (`nn.MultiheadAttention`
    through `multi_head_attention_forward`), mask tensor included: its own backward, as
    eager's. (torch's decomposition of it returns the probabilities where the op returns the
    logsumexp, so it is not the op: capture/decompositions.py.)"""
    if requires_grad(attn_mask):
        raise AutodiffError(
            "the CPU flash attention kernel is not differentiable in its attn_mask (eager "
            "refuses a mask that requires grad there too): detach the mask, or call "
            "torch.nn.functional.scaled_dot_product_attention, which differentiates a float "
            "mask."
        )
    return _cpu_flash(query, key, value, is_causal, scale, dropout_p, attn_mask)


@RULES.grad(aten._scaled_dot_product_efficient_attention.default)
def efficient_attention(
    query, key, value, attn_bias, compute_log_sumexp, dropout_p=0.0, is_causal=False, *, scale=None
):
    out, lse, seed, offset = aten._scaled_dot_product_efficient_attention.default(
        query, key, value, attn_bias, True, dropout_p, is_causal, scale=scale
    )
    g = get_grad(out)
    wanted = [requires_grad(x) for x in (query, key, value, attn_bias)]
    grads = aten._scaled_dot_product_efficient_attention_backward.default(
        g,
        query,
        key,
        value,
        attn_bias,
        out,
        lse,
        seed,
        offset,
        dropout_p,
        wanted,
        is_causal,
        scale=scale,
    )
    for x, dx, want in zip((query, key, value, attn_bias), grads, wanted, strict=True):
        if want:
            put_grad(x, dx)
    return out, lse, seed, offset


@RULES.grad(aten._scaled_dot_product_flash_attention.default)
def flash_attention(
    query, key, value, dropout_p=0.0, is_causal=False, return_debug_mask=False, *, scale=None
):
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug_mask = (
        aten._scaled_dot_product_flash_attention.default(
            query, key, value, dropout_p, is_causal, return_debug_mask, scale=scale
        )
    )
    max_q, max_k = _number(max_q), _number(max_k)
    g = get_grad(out)
    dq, dk, dv = aten._scaled_dot_product_flash_attention_backward.default(
        g,
        query,
        key,
        value,
        out,
        lse,
        cum_q,
        cum_k,
        max_q,
        max_k,
        dropout_p,
        is_causal,
        seed,
        offset,
        scale=scale,
    )
    put_grad(query, dq)
    put_grad(key, dk)
    put_grad(value, dv)
    return out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug_mask


@RULES.grad(aten._scaled_dot_product_cudnn_attention.default)
def cudnn_attention(
    query,
    key,
    value,
    attn_bias,
    compute_log_sumexp,
    dropout_p=0.0,
    is_causal=False,
    return_debug_mask=False,
    *,
    scale=None,
):
    """cuDNN's fused attention (what torch picks on recent GPUs, in half precision), with
    torch's own backward kernel; like torch, no gradient for the bias."""
    if attn_bias is not None and requires_grad(attn_bias):
        raise AutodiffError(
            "aten._scaled_dot_product_cudnn_attention has no gradient for its attn_mask "
            "(torch's neither): run the attention under "
            "torch.nn.attention.sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION) or the math one."
        )
    out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug_mask = (
        aten._scaled_dot_product_cudnn_attention.default(
            query, key, value, attn_bias, True, dropout_p, is_causal, return_debug_mask,
            scale=scale,
        )
    )  # fmt: skip
    dq, dk, dv = aten._scaled_dot_product_cudnn_attention_backward.default(
        get_grad(out), query, key, value, out, lse, seed, offset, attn_bias, cum_q, cum_k,
        _number(max_q), _number(max_k), dropout_p, is_causal, scale=scale,
    )  # fmt: skip
    for x, dx in ((query, dq), (key, dk), (value, dv)):
        if requires_grad(x):
            put_grad(x, dx)
    return out, lse, cum_q, cum_k, max_q, max_k, seed, offset, debug_mask
