"""Which ops draw random numbers: told by torch's own `nondeterministic_seeded` tag, the one
list of random ops that stays true as torch adds kernels (it names rrelu's noise,
`_standard_gamma` and the attention kernels that may drop out, which no word list did).

Ops that take their seed as an argument (`_philox_normal_`) are not tagged: given the same
arguments they give the same numbers, so treating them as deterministic is right.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from thunderviz.core.symbol import BoundSymbol

__all__ = ["is_random_op", "draws_random"]


def is_random_op(op: Any) -> bool:
    """An ATen overload whose result depends on the random numbers it draws (or may draw)."""
    return isinstance(op, torch._ops.OpOverload) and _seeded(op)


@functools.cache
def _seeded(op: torch._ops.OpOverload) -> bool:
    return torch.Tag.nondeterministic_seeded in op.tags


def draws_random(bsym: BoundSymbol) -> bool:
    """Whether the bound symbol, or any op nested in it, draws random numbers."""
    return any(is_random_op(b.sym.fn) for b in bsym.walk_outline())
