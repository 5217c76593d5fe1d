"""What an ATen op's schema says about aliasing: which arguments it writes into, and whether
its outputs are views of its input."""

from __future__ import annotations

import functools
from typing import Any

import torch

__all__ = ["is_view_op", "mutated_arg_indices", "mutated_tensors"]

_OpOverload = torch._ops.OpOverload


@functools.cache
def mutated_arg_indices(op: _OpOverload) -> tuple[int, ...]:
    """Positions of the schema arguments this op writes to (`Tensor(a!)`)."""
    return tuple(
        i
        for i, a in enumerate(op._schema.arguments)
        if a.alias_info is not None and a.alias_info.is_write
    )


def mutated_tensors(op: _OpOverload, args: Any, kwargs: Any) -> list[torch.Tensor]:
    """The tensors a call of `op` writes into, positional or keyword."""
    schema = op._schema.arguments
    out = []
    for i in mutated_arg_indices(op):
        value = args[i] if i < len(args) else kwargs.get(schema[i].name)
        if isinstance(value, torch.Tensor):
            out.append(value)
    return out


@functools.cache
def is_view_op(op: _OpOverload) -> bool:
    """True for ops whose outputs alias their first input (view, slice, transpose, ...)."""
    if op._schema.is_mutable:
        return False
    rets = op._schema.returns
    return bool(rets) and all(r.alias_info is not None and not r.alias_info.is_write for r in rets)
