"""A call's arguments read against its ATen schema, defaults filled in.

The dispatcher drops trailing arguments equal to their defaults, and a trace keeps a call as
it was recorded; code that reads an argument by position, or compares two calls, needs them
spelled out. This is the one place that reads a schema for that.
"""

from __future__ import annotations

from typing import Any

import torch

from thunderviz.core.symbol import Symbol
from thunderviz.prims.aten import op_id

__all__ = ["op_args"]


def op_args(
    op: Symbol | torch._ops.OpOverload,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    leading: bool = False,
) -> tuple[Any, ...]:
    """Every argument of the ATen op `op` (a Symbol or an OpOverload) in schema order, those
    the call left out at their defaults.

    With `leading=True`, only the positional ones up to the first that the call passes by
    keyword or that has no default (what a positional re-call of the op may spell out).
    """
    overload = op.fn if isinstance(op, Symbol) else op
    if not isinstance(overload, torch._ops.OpOverload):
        raise TypeError(f"{op!r} is not an ATen op overload: it has no schema to read")
    schema = overload._schema
    out = []
    for i, arg in enumerate(schema.arguments):
        if i < len(args) and not arg.kwarg_only:
            out.append(args[i])
        elif leading and (arg.kwarg_only or arg.name in kwargs or not arg.has_default_value()):
            break
        elif arg.name in kwargs:
            out.append(kwargs[arg.name])
        elif arg.has_default_value():
            out.append(arg.default_value)
        else:
            raise TypeError(f"{op_id(overload)}: missing argument {arg.name!r}")
    return tuple(out)
