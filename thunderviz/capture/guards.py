"""What a trace specialises on when the program reads tensor values.

A trace is one run of the program. Where that run read a tensor's value into Python
(`if x.sum() > 0:` is `Tensor.__bool__`, `.item()`, `.tolist()`, `torch.equal`) or made a
tensor whose size depends on values (`nonzero`, `masked_select`, `x[mask]`, `unique`,
tokens per expert), the trace holds what that run saw: the branch it took, the number it
baked in, the size it allocated. Capture tags those bound symbols `DATA_DEPENDENT`; the
executor turns each into a guard checked on every call (`executor/guards.py`).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = [
    "LAYOUT_READERS",
    "VALUE_READERS",
    "as_the_user_reads",
    "has_data_dependent_size",
    "reads_values",
]

# Torch-level calls that hand a tensor's layout to Python, which jit does not key its calls
# by (it keys sizes, dtype, device and whether contiguous): `if x.stride(0) == 1:` on a
# transposed input and on a sliced one took the first call's branch for both, silently.
# What a copy capture runs on does not keep (its storage offset, conjugate and negative
# bits, address) is read from the user's tensor it stands for (`SameViewInputs.users`).
LAYOUT_READERS = frozenset(
    {
        torch.Tensor.stride,
        torch.Tensor.storage_offset,
        torch.Tensor.is_conj,
        torch.Tensor.is_neg,
        torch.Tensor.data_ptr,
        torch.Tensor.is_inference,  # (made under inference_mode: a copy is not)
    }
)
# Torch-level calls that hand a tensor's values to Python without an ATen op the dispatch
# mode would see (`tolist` copies in C++; `equal` returns a bool, not a tensor), and the
# layout readers: each is guarded where the trace runs.
VALUE_READERS = frozenset({torch.Tensor.tolist, torch.equal, torch.Tensor.equal}) | LAYOUT_READERS


def as_the_user_reads(
    users: dict[int, torch.Tensor], func: Any, args: tuple[Any, ...]
) -> tuple[Any, ...]:
    """`func`'s arguments, but a layout reader's on the user's tensor where the first is a
    copy of one."""
    if func not in LAYOUT_READERS:
        return args
    user = users.get(id(args[0])) if args else None
    return args if user is None else (user, *args[1:])


_DYNAMIC = (torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output)
_INDEX = torch.ops.aten.index.Tensor


def reads_values(func: Any) -> bool:
    """A torch-level call whose Python result is read from tensor values."""
    return func in VALUE_READERS


@functools.cache
def _dynamic_output_size(func: Any) -> bool:
    """Whether torch tags the op's output shape as depending on data (asked per ATen call)."""
    tags = getattr(func, "tags", ())
    return any(t in tags for t in _DYNAMIC)


def has_data_dependent_size(func: Any, args: tuple[Any, ...]) -> bool:
    """An ATen op whose output size depends on its inputs' values, not only their shapes."""
    if not _dynamic_output_size(func):
        return False
    if func is _INDEX:
        # `x[idx]` with integer indices has the indices' shape; only a mask is data-dependent
        indices = args[1] if len(args) > 1 else ()
        return any(
            isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices
        )
    return True
