"""Grad rules for fake quantization, what quantization-aware training runs in its forward
(`torch.ao.quantization.FakeQuantize`, `FusedMovingAvgObsFakeQuantize`, `prepare_qat`).

Eager's gradients (torch's derivatives.yaml): the straight-through estimator, the gradient
where the input fell inside the quantization range and zero where it was clamped, which the
ops hand over as their `mask` output (the mask is no function of anything: no gradient). The
learnable variants (LSQ, `_LearnableFakeQuantize`) also give the scale and zero point a
gradient, through eager's own backward kernel.
"""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import register
from thunderviz.prims import aten

RULES = RuleSet("quantization")


def _straight_through(op, backward):
    """`output, mask, *rest = op(x, ...)`: x's gradient is `backward(g, mask)` (g where
    mask); the rest (a functional observer's new statistics) takes none."""

    def rule(x, *args, **kwargs):
        out, mask, *rest = op(x, *args, **kwargs)
        put_grad(x, backward(get_grad(out), mask))
        return (out, mask, *rest)

    register(RULES, op, rule)


_PER_TENSOR_BACKWARD = aten.fake_quantize_per_tensor_affine_cachemask_backward.default
for _op in (
    aten.fake_quantize_per_tensor_affine_cachemask.default,
    aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default,
    # the fused observer and fake quantization: its observer writes (running min and max,
    # scale, zero point) are no function the gradient goes through
    aten._fused_moving_avg_obs_fq_helper.default,
    # its functional twin, which returns those new values rather than writing them
    aten._fused_moving_avg_obs_fq_helper_functional.default,
):
    _straight_through(_op, _PER_TENSOR_BACKWARD)


_straight_through(
    aten.fake_quantize_per_channel_affine_cachemask.default,
    aten.fake_quantize_per_channel_affine_cachemask_backward.default,
)


def _learnable(op, backward):
    """`out = op(x, scale, zero_point, *rest)` whose three gradients are eager's kernel's,
    `backward(g, x, scale, zero_point, *rest)` (the same trailing arguments)."""

    def rule(x, scale, zero_point, *rest, **kwargs):
        out = op(x, scale, zero_point, *rest, **kwargs)
        grads = backward(get_grad(out), x, scale, zero_point, *rest, **kwargs)
        for arg, grad in zip((x, scale, zero_point), grads, strict=True):
            put_grad(arg, grad)
        return out

    register(RULES, op, rule)


_learnable(
    aten._fake_quantize_learnable_per_tensor_affine.default,
    aten._fake_quantize_learnable_per_tensor_affine_backward.default,
)
_learnable(
    aten._fake_quantize_learnable_per_channel_affine.default,
    aten._fake_quantize_learnable_per_channel_affine_backward.default,
)
