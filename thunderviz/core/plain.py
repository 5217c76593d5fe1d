"""The values thunderviz takes as they are: they hold no tensor, cannot change and compare by
value, so a guard keys on them by value, a recording keeps them in its key and a walk over
arguments passes them without a look inside. One owner, so that those three agree."""

from __future__ import annotations

import enum
from typing import Any

import torch

__all__ = ["PLAIN", "SCALARS", "is_immutable_value"]

# Python's numbers, strings and None
SCALARS = frozenset({int, float, bool, str, type(None)})
# ... and torch's descriptions of a tensor (`x.dtype`, `x.device`, `x.layout`)
PLAIN = SCALARS | {torch.dtype, torch.device, torch.layout}


def is_immutable_value(x: Any) -> bool:
    """A value that cannot change and holds no tensor, though it is no plain literal: an
    enum member, a `range`, `bytes`, a `complex`, a numpy scalar, a frozenset of such (what
    a program may return beside its tensors, equal on every call a trace is right for)."""
    if isinstance(x, (enum.Enum, range, bytes, complex)) or type(x) in PLAIN:
        return True
    if isinstance(x, frozenset):
        return all(is_immutable_value(v) for v in x)
    kind = type(x)  # a numpy scalar (not a 0-d array, which can be written)
    return kind.__module__ == "numpy" and kind.__name__ != "ndarray" and x.shape == ()
