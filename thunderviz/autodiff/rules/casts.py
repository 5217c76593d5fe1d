"""Grad rules for casts, copies and dropout, and the ops that carry no gradient:
comparisons, logical and bitwise ops, and factories / random draws whose output does not
depend on their input's values (`zeros_like`, `fill`, `bernoulli`).
"""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import pass_through, scaled, unary
from thunderviz.prims import aten

RULES = RuleSet("casts", supports_complex=True)


# --- casts, copies, dropout ----------------------------------------------------------------


# Identity on values: the gradient passes straight through (put_grad casts it back to the
# input's dtype and device, which is the whole backward of `_to_copy`). Copies (clone,
# contiguous) and aliases keep the values too.
for _op in (
    aten._to_copy.default,
    aten.clone.default,
    aten.contiguous.default,
    aten.alias.default,
    aten.lift_fresh_copy.default,
    aten.lift_fresh.default,
):
    pass_through(RULES, _op)


@RULES.grad(aten.copy.default)
def copy(a, src, non_blocking=False):
    # the result is src's values in a's shape, dtype and device: a's old values are gone
    out = aten.copy.default(a, src, non_blocking)
    put_grad(src, get_grad(out))
    return out


@RULES.grad(aten.fill.Tensor)
def fill_tensor(a, value):
    # every element is `value` (0-dim): its gradient is the sum (put_grad sums)
    out = aten.fill.Tensor(a, value)
    put_grad(value, get_grad(out))
    return out


@RULES.grad(aten.native_dropout.default)
def native_dropout(a, p, train):
    # training: out = a * mask / (1 - p); otherwise the identity (mask all true)
    out, mask = aten.native_dropout.default(a, p, train)
    g = get_grad(out)
    scale = 1.0 if not train else (0.0 if p == 1 else 1.0 / (1.0 - p))
    put_grad(a, scaled(aten.mul.Tensor(g, mask), scale))
    return out, mask


unary(RULES, aten.relu.default, lambda g, a, out: aten.threshold_backward.default(g, out, 0))


# --- no gradient ---------------------------------------------------------------------------

RULES.nondifferentiable(
    # comparisons and predicates (bool results)
    aten.eq.Tensor,
    aten.eq.Scalar,
    aten.ne.Tensor,
    aten.ne.Scalar,
    aten.lt.Tensor,
    aten.lt.Scalar,
    aten.le.Tensor,
    aten.le.Scalar,
    aten.gt.Tensor,
    aten.gt.Scalar,
    aten.ge.Tensor,
    aten.ge.Scalar,
    aten.isnan.default,
    aten.isinf.default,
    aten.isfinite.default,
    aten.isneginf.default,
    aten.isposinf.default,
    aten.signbit.default,
    aten.logical_and.default,
    aten.logical_or.default,
    aten.logical_xor.default,
    aten.logical_not.default,
    aten.bitwise_not.default,
    aten.bitwise_and.Tensor,
    aten.bitwise_and.Scalar,
    aten.bitwise_or.Tensor,
    aten.bitwise_or.Scalar,
    aten.bitwise_xor.Tensor,
    aten.bitwise_xor.Scalar,
    # a where between two constants
    aten.where.Scalar,
    # detach: no gradient by definition
    aten.detach.default,
    # factories: the input only gives shape, dtype and device
    aten.zeros_like.default,
    aten.ones_like.default,
    aten.full_like.default,
    aten.empty_like.default,
    aten.new_zeros.default,
    aten.new_ones.default,
    aten.new_full.default,
    aten.new_empty.default,
    aten.new_empty_strided.default,
    aten.fill.Scalar,
    aten.zero.default,
    # random draws
    aten.rand_like.default,
    aten.randn_like.default,
    aten.randint_like.default,
    aten.randint_like.low_dtype,
    aten.bernoulli.default,
    aten.bernoulli.p,
    aten.bernoulli.Tensor,
    aten.uniform.default,
    aten.normal_functional.default,
    aten.exponential.default,
)
