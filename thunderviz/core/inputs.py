"""A trace's inputs, first-class: what each argument of the generated function stands for.

A trace of `fn(*args, **kwargs)` takes the leaves of the positional inputs, then (for a
module) its parameters and buffers in `named_parameters()` / `named_buffers()` order, then
the leaves of the keyword inputs. Capture records that order once, as `Trace.inputs` (like
fx's `placeholder` / `get_attr` nodes); `input_values` (and `Trace.bind_inputs`, which
splits its result as the trace's function takes it) is the one place that lines values up
with it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from thunderviz.core.dataclass_nodes import opened_leaves

__all__ = ["InputKind", "TraceInput", "input_values", "module_state"]


class InputKind(enum.Enum):
    POSITIONAL = "positional"
    PARAMETER = "parameter"
    BUFFER = "buffer"
    KEYWORD = "keyword"


@dataclass(frozen=True)
class TraceInput:
    """One argument of a trace. `path`: the parameter or buffer's path in the module
    (`fc1.weight`), or the user's argument name (`x`) or keyword; `leaf`: which leaf of that
    argument (pytree order) it is."""

    kind: InputKind
    path: str
    leaf: int = 0

    @property
    def is_state(self) -> bool:
        return self.kind in (InputKind.PARAMETER, InputKind.BUFFER)


def module_state(module: torch.nn.Module | None) -> dict[str, torch.Tensor]:
    """A module's parameters then buffers by path, each tensor once (the trace's order)."""
    if module is None:
        return {}
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def input_values(
    inputs: Sequence[TraceInput],
    state: Any,
    args: Sequence[Any],
    kwargs: Mapping[str, Any] | None = None,
) -> list[Any]:
    """The value of each of a trace's `inputs` for a call `fn(*args, **kwargs)`: `state` is
    the module `fn` (or its tensors by path, e.g. copies of them); a plain function has none."""
    if not isinstance(state, Mapping):
        state = module_state(state if isinstance(state, torch.nn.Module) else None)
    positional = iter(opened_leaves(list(args)))  # (core/dataclass_nodes.py)
    keyword = {k: opened_leaves(v) for k, v in (kwargs or {}).items()}
    values = []
    for inp in inputs:
        if inp.is_state:
            values.append(state[inp.path])
        elif inp.kind is InputKind.KEYWORD:
            values.append(keyword[inp.path][inp.leaf])
        else:
            values.append(next(positional))
    return values
