"""Grad rules for casts, copies and dropout, and the ops that carry no gradient:
comparisons, logical and bitwise ops, and factories / random draws whose output does not
depend on their input's values (`zeros_like`, `fill`, `bernoulli`).
"""

from __future__ import annotations

from thunderviz.autodiff.joint import get_grad, put_grad, requires_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import (
    pass_through,
    register,
    scaled,
    unary,
    zero_gradient,
    zeros_of,
)
from thunderviz.prims import aten
from thunderviz.prims.differentiability import NON_DIFFERENTIABLE_OUTPUTS

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
    if requires_grad(a):
        put_grad(a, zeros_of(a))  # as eager's: zeros, not none
    return out


@RULES.grad(aten.fill.Tensor)
def fill_tensor(a, value):
    # every element is `value` (0-dim): its gradient is the sum (put_grad sums)
    out = aten.fill.Tensor(a, value)
    put_grad(value, get_grad(out))
    if requires_grad(a):
        put_grad(a, zeros_of(a))  # as eager's: zeros, not none
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
    # detach, and factories: the input only gives shape, dtype and device
    *NON_DIFFERENTIABLE_OUTPUTS,
)

# Overwrites and draws in place of a tensor: the output does not depend on the input's
# values, but is differentiable in eager, whose gradient of the input is zeros, not none
# (`x.clone().fill_(1)`, `torch.bernoulli(p)`, `x.clone().uniform_()`; an optimizer steps a
# parameter whose `.grad` is zeros, and skips one whose `.grad` is None). Where eager's
# functional form has no formula (`bernoulli.p`, `normal_functional`), the trace's op is
# the in-place draw's (`bernoulli_`, `normal_`), which has.
for _op in (
    aten.fill.Scalar,
    aten.zero.default,
    aten.bernoulli.default,
    aten.bernoulli.p,
    aten.bernoulli.Tensor,
    aten.uniform.default,
    aten.normal_functional.default,
    aten.exponential.default,
    aten.geometric.default,
    aten.cauchy.default,
    aten.log_normal.default,
    aten.random.default,
    getattr(aten.random, "from"),  # (a Python keyword)
    aten.random.to,
    aten.poisson.default,
):
    zero_gradient(RULES, _op)


def _normal_rule(op) -> None:
    """`torch.normal(mean, std)`: eager's gradient of a tensor mean or std is zeros. The draw
    is not reparameterized in autograd (`mean + std * randn_like(std)` is); torch's
    decomposition is that sum, whose gradient would train where eager's does not."""

    def rule(*args, **kwargs):
        out = op(*args, **kwargs)
        for a in args:
            if requires_grad(a):
                put_grad(a, zeros_of(a))
        return out

    register(RULES, op, rule)


for _op in (aten.normal.Tensor_Tensor, aten.normal.Tensor_float, aten.normal.float_Tensor):
    _normal_rule(_op)


# Gamma(α) samples (`Gamma.rsample`, and Beta's and Dirichlet's through it): reparameterized
# in eager, by the implicit derivative of the sample as to α that `_standard_gamma_grad` gives
unary(
    RULES,
    aten._standard_gamma.default,
    lambda g, a, out: aten.mul.Tensor(g, aten._standard_gamma_grad.default(a, out)),
)
