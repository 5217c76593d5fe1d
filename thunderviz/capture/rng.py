"""Random draws recorded so that replaying the trace draws exactly what eager drew.

An in-place draw (`bernoulli_`, `uniform_`, `normal_`, ...) fills its tensor in *memory*
order. Most functional twins (`uniform`, `normal_functional`, ...) allocate their result
with the input's strides and fill it the same way, so they replay eager's draw as it was.
`bernoulli.p` instead allocates a contiguous result and fills it in *logical* order: for a
transposed tensor (dropout after `x.transpose(0, 1)`, where `empty_like` keeps the strides)
the same random numbers would land on other elements, and the trace's dropout mask would
differ from eager's.

For such a twin the recorder draws on the tensor permuted into memory order (contiguous,
so the twin fills it in the order eager did) and permutes the draw back.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.prims.randomness import is_random_op

__all__ = ["draw_order", "inverse"]


def _draws_in_place(op: Any) -> bool:
    """An in-place ATen op that draws random numbers (`bernoulli_.float`, `uniform_`). Read
    off the schema (`aten::bernoulli_`, writing into its first argument): torch's own
    `Tag.inplace` is newer than torch 2.11, which has none."""
    if not is_random_op(op) or not op._schema.arguments:
        return False
    first = op._schema.arguments[0].alias_info
    return op._schema.name.endswith("_") and first is not None and first.is_write


def _memory_order(t: torch.Tensor) -> list[int] | None:
    """The permutation of `t`'s dims that lists them outermost-in-memory first, when `t` is
    not contiguous but that permutation of it is (a transposed dense tensor); else None."""
    if t.is_contiguous() or t.ndim < 2:
        return None
    order = sorted(range(t.ndim), key=lambda d: (-t.stride(d), d))
    if not t.permute(order).is_contiguous():
        return None  # overlapping or gapped: no permutation of it is contiguous
    return order


def _keeps_layout(op: Any, functional: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the functional twin returns its result in its input's strides (asked of its
    meta kernel: no values, no draws)."""

    def meta(t: torch.Tensor) -> torch.Tensor:
        return torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")

    # the dispatcher drops trailing arguments equal to their defaults (bernoulli_(0.5));
    # the twin may have none for them (bernoulli.p)
    full = list(args)
    for a in op._schema.arguments[len(full) :]:
        if a.kwarg_only or a.name in kwargs or not a.has_default_value():
            break
        full.append(a.default_value)
    m_args, m_kwargs = pytree.tree_map_only(torch.Tensor, meta, (tuple(full), kwargs))
    try:
        out = functional(*m_args, **m_kwargs)
    except Exception:  # no meta kernel: record the twin as it is
        return True
    return out.stride() == m_args[0].stride()


def draw_order(
    op: Any, functional: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> list[int] | None:
    """For an in-place random draw `op` into `args[0]`, recorded as `functional`: the
    memory order to draw in (see the module docstring), or None to record the twin as is."""
    if not _draws_in_place(op) or not args or not isinstance(args[0], torch.Tensor):
        return None
    order = _memory_order(args[0])
    if order is None or _keeps_layout(op, functional, args, kwargs):
        return None
    return order


def inverse(order: list[int]) -> list[int]:
    out = [0] * len(order)
    for i, d in enumerate(order):
        out[d] = i
    return out
