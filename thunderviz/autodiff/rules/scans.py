"""Grad rules for the scans torch has no decomposition for here: cummax, cummin and
logcumsumexp. (cumsum and cumprod live with the reductions.)"""

from __future__ import annotations

import torch

from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import conj, register
from thunderviz.prims import aten

RULES = RuleSet("scans")


def _running_extreme(op) -> None:
    """cummax / cummin: each output is the input element its index names, so the cotangents
    are added back at those places (one element may be the running extreme many times)."""

    def rule(a, dim):
        values, indices = op(a, dim)
        g = get_grad(values)
        if a.ndim == 0:
            put_grad(a, g)
        else:
            put_grad(
                a,
                aten.scatter_add.default(aten.new_zeros.default(g, list(a.shape)), dim, indices, g),
            )
        return values, indices

    register(RULES, op, rule)


_running_extreme(aten.cummax.default)
_running_extreme(aten.cummin.default)


def _reversed_logcumsumexp(t, dim):
    return aten.flip.default(aten.logcumsumexp.default(aten.flip.default(t, [dim]), dim), [dim])


@RULES.grad(aten.logcumsumexp.default, supports_complex=True)
def logcumsumexp(a, dim):
    """out_j = log sum_{i<=j} exp(a_i), so da_i = sum_{j>=i} g_j exp(a_i - out_j). The sum is
    taken in log space, the positive and negative parts of g apart (log of a negative
    cotangent does not exist), so large a does not overflow. Complex: analytic, so torch's
    g·conj(f') is conj of the same sum taken with conj(g), in one log-space sum (every
    complex number has a log)."""
    out = aten.logcumsumexp.default(a, dim)
    g = get_grad(out)
    assert g is not None  # out is a tensor
    if a.ndim == 0:
        put_grad(a, g)
        return out
    if a.dtype.is_complex:
        log_g = aten.log.default(conj(g))
        summed = _reversed_logcumsumexp(aten.sub.Tensor(log_g, out), dim)
        put_grad(a, conj(aten.exp.default(aten.add.Tensor(summed, a))))
        return out
    # eager's: the parts' logs are the dtype's lowest finite value where they are empty, and
    # where every input so far is -inf (so is the output) the gradient is nan, as eager's
    lowest = aten.scalar_tensor.default(torch.finfo(g.dtype).min, dtype=g.dtype, device=g.device)
    parts = []
    for sign_g in (g, aten.neg.default(g)):
        log_part = aten.where.self(aten.gt.Scalar(sign_g, 0), aten.log.default(sign_g), lowest)
        parts.append(
            aten.exp.default(
                aten.add.Tensor(_reversed_logcumsumexp(aten.sub.Tensor(log_part, out), dim), a)
            )
        )
    put_grad(a, aten.sub.Tensor(*parts))
    return out
