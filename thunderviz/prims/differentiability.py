"""ATen ops whose outputs never carry a gradient in eager, whatever their inputs: capture
gives their values proxies that need none (capture/recorder_state.py), and autodiff sends
nothing back through them (autodiff/rules/casts.py).

`torch.zeros_like(x)` of an `x` that requires grad does not require grad in eager; a traced
call that said otherwise would hand the user an output that does (`.numpy()` on it raises).
Ops whose output is differentiable with a zero gradient (`fill`, `bernoulli`, `sign`) are
not here: eager's output requires grad, and its input gets zeros.
"""

from __future__ import annotations

import torch

__all__ = ["NON_DIFFERENTIABLE_OUTPUTS"]

aten = torch.ops.aten

NON_DIFFERENTIABLE_OUTPUTS = frozenset(
    {
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
        aten.rand_like.default,
        aten.randn_like.default,
        aten.randint_like.default,
        aten.randint_like.low_dtype,
    }
)
