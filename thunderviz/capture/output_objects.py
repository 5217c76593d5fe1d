"""Dataclass instances in what a program returns (a `ModelOutput`-like result of the
program's own), opened by their fields like the containers torch's pytree knows.

pytree treats an unregistered dataclass as one opaque leaf, which a trace cannot return: its
tensors are values of the run. Registering the user's class would change pytree for the
whole process (`torch.export`, the user's own `tree_map` calls), so its instances are
wrapped in thunderviz's own node instead, `_Opened`, whose children are the fields and whose
unflattening builds the user's class again: a jitted call returns the dataclass eager
returns, each field holding this call's value.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from torch.utils import _pytree as pytree

from thunderviz.core.proxies import Proxy

__all__ = ["opened"]


class _Opened:
    """A dataclass instance for pytree: its fields' values, and a copy of it with no values
    (so a trace's output spec holds no tensor of the run) to build new ones from."""

    __slots__ = ("context", "values")

    def __init__(self, obj: Any) -> None:
        names = tuple(f.name for f in dataclasses.fields(obj))
        template = copy.copy(obj)
        for name in names:
            object.__setattr__(template, name, None)  # (frozen dataclasses too)
        self.context = (template, names)
        self.values = [opened(getattr(obj, name)) for name in names]


def _rebuilt(values: Any, context: Any) -> Any:
    template, names = context
    obj = copy.copy(template)
    for name, value in zip(names, values, strict=True):
        object.__setattr__(obj, name, value)
    return obj


pytree.register_pytree_node(
    _Opened,
    lambda node: (node.values, node.context),
    _rebuilt,
    serialized_type_name="thunderviz.capture.output_objects._Opened",
)


def _is_opaque_dataclass(x: Any) -> bool:
    return (
        dataclasses.is_dataclass(x)
        and not isinstance(x, (type, Proxy))  # (a trace's values are dataclasses too)
        and type(x) not in pytree.SUPPORTED_NODES
    )


def opened(tree: Any) -> Any:
    """`tree` with each dataclass instance pytree does not know wrapped so pytree opens it
    (flattening it gives its fields' leaves; unflattening, an instance of its class)."""
    return pytree.tree_map(lambda x: _Opened(x) if _is_opaque_dataclass(x) else x, tree)
