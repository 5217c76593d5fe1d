"""Symbols for torch.distributed's functional collectives (`torch.ops._c10d_functional`):
how a collective is printed, keyed for grad rules and described in a trace's comments.
Recording them is capture's (`capture/collectives.py`)."""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import _resolve_process_group

from thunderviz.core.symbol import BoundSymbol, Symbol
from thunderviz.prims.aten import meta_outputs, op_id

__all__ = [
    "ALL_GATHER",
    "ALL_REDUCE",
    "ALL_TO_ALL",
    "BROADCAST",
    "REDUCE_SCATTER",
    "WAIT",
    "collective_header",
    "collective_symbol",
    "describe_group",
    "is_collective",
]

_FUNCTIONAL = torch.ops._c10d_functional


@functools.cache
def collective_symbol(op: torch._ops.OpOverload) -> Symbol:
    """The Symbol of a functional collective: printed as `torch.ops._c10d_functional.<op>`
    (runnable as it is, unlike the `aten.`-style short names), keyed as
    `_c10d_functional.<op>.default` for grad rules, shapes from the op's meta kernel."""
    packet = op._schema.name.split("::", 1)[1]
    return Symbol(
        name=f"torch.ops._c10d_functional.{packet}",
        id=op_id(op),
        fn=op,
        is_prim=True,
        meta=functools.partial(meta_outputs, op),
        label=packet,
    )


ALL_REDUCE = collective_symbol(_FUNCTIONAL.all_reduce.default)
ALL_GATHER = collective_symbol(_FUNCTIONAL.all_gather_into_tensor.default)
REDUCE_SCATTER = collective_symbol(_FUNCTIONAL.reduce_scatter_tensor.default)
BROADCAST = collective_symbol(_FUNCTIONAL.broadcast.default)
ALL_TO_ALL = collective_symbol(_FUNCTIONAL.all_to_all_single.default)
WAIT = collective_symbol(_FUNCTIONAL.wait_tensor.default)
_COLLECTIVE_IDS = {s.id for s in (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, ALL_TO_ALL)}


def is_collective(bsym: BoundSymbol) -> bool:
    """Whether a bound symbol communicates (the collective, not its wait)."""
    return bsym.sym.id in _COLLECTIVE_IDS


def describe_group(group_name: str) -> str:
    """ "process group '0' (ranks 0, 1)": what a printed collective says about its group."""
    try:
        # (torch's GroupName, a NewType of str that torch 2.9 does not have, is the str)
        group = _resolve_process_group(group_name)  # pyright: ignore[reportArgumentType]
        ranks = ", ".join(str(r) for r in dist.get_process_group_ranks(group))
    except (RuntimeError, ValueError, KeyError):  # a group name of another process
        return f"process group {group_name!r}"
    return f"process group {group_name!r} (ranks {ranks})"


def collective_header(op: torch._ops.OpOverload, args: tuple[Any, ...]) -> str:
    """ "all_reduce sum over process group '0' (ranks 0, 1)": the comment printed above a
    collective's line (empty for wait_tensor)."""
    packet = op._schema.name.split("::", 1)[1]
    if packet == "wait_tensor" or not args:
        return ""
    names = [a.name for a in op._schema.arguments]
    detail = {"reduce_op": lambda v: f"{v}", "src": lambda v: f"from group rank {v}"}
    parts = [detail[n](v) for n, v in zip(names, args, strict=False) if n in detail]
    return f"{packet}{' ' + ', '.join(parts) if parts else ''} over {describe_group(str(args[-1]))}"
