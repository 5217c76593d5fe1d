"""Random draws recorded so that replaying the trace draws exactly what eager drew.

An in-place draw (`bernoulli_`, `uniform_`, `exponential_`, ...) fills its tensor element by
element in *memory* order. Its functional twin (`bernoulli.p`, ...) allocates a fresh
contiguous tensor and fills it in *logical* order. For a contiguous tensor the two agree; for
a transposed one (dropout after `x.transpose(0, 1)`: `empty_like` keeps the strides) the same
random numbers land on other elements, so the trace's dropout mask would differ from eager's.

The recorder therefore draws on the tensor permuted into memory order (contiguous, so the
twin fills it in the order eager did) and permutes the draw back.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["memory_order", "draws_in_place", "inverse"]


def draws_in_place(op: Any) -> bool:
    """An in-place ATen op that draws random numbers (`bernoulli_.float`, `uniform_`)."""
    tags = getattr(op, "tags", ())
    return torch.Tag.inplace in tags and torch.Tag.nondeterministic_seeded in tags


def memory_order(t: torch.Tensor) -> list[int] | None:
    """The permutation of `t`'s dims that lists them outermost-in-memory first, when `t` is
    not contiguous but that permutation of it is (a transposed dense tensor); else None."""
    if t.is_contiguous() or t.ndim < 2:
        return None
    order = sorted(range(t.ndim), key=lambda d: (-t.stride(d), d))
    if not t.permute(order).is_contiguous():
        return None  # overlapping or gapped: no permutation of it is contiguous
    return order


def inverse(order: list[int]) -> list[int]:
    out = [0] * len(order)
    for i, d in enumerate(order):
        out[d] = i
    return out
