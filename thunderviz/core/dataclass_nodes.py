"""Dataclass instances in what a program takes and returns (a `Batch` it is given, a
`ModelOutput`-like result of its own), opened by their fields like the containers torch's
pytree knows: the one convention every place that flattens a call's arguments or outputs
follows (capture, jit's key and its calls, the trace's inputs, the autograd reference).

pytree treats an unregistered dataclass as one opaque leaf: a trace could neither take its
tensors as inputs (jit keyed them by identity and traced every call again, and refused one
that requires grad) nor return them (the output was None). Registering the user's class would
change pytree for the whole process (`torch.export`, the user's own `tree_map` calls), so its
instances are wrapped in thunderviz's own node instead, `_Opened`, whose children are the
fields and whose unflattening builds an instance of the user's class again (a shallow copy
of the original, each field set anew).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from torch.utils import _pytree as pytree

from thunderviz.core.proxies import Proxy

__all__ = ["opened", "opened_leaves", "FieldsKept"]


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


def _with_keys(node: Any) -> tuple[list[tuple[Any, Any]], Any]:
    """The children with their key paths: a field's is its name, as an attribute (where
    in a dataclass a dropped output's place is: executor/dropped_outputs.py)."""
    names = node.context[1]
    return [
        (pytree.GetAttrKey(n), v) for n, v in zip(names, node.values, strict=True)
    ], node.context


pytree.register_pytree_node(
    _Opened,
    lambda node: (node.values, node.context),
    _rebuilt,
    serialized_type_name="thunderviz.core.dataclass_nodes._Opened",
    flatten_with_keys_fn=_with_keys,
)


def _is_opaque_dataclass(x: Any) -> bool:
    return (
        dataclasses.is_dataclass(x)
        and not isinstance(x, (type, Proxy))  # (a trace's values are dataclasses too)
        and type(x) not in pytree.SUPPORTED_NODES
    )


def opened(tree: Any) -> Any:
    """`tree` with each dataclass instance pytree does not know wrapped so pytree opens it
    (flattening it gives its fields' leaves; unflattening, an instance of its class); `tree`
    itself where it holds none."""
    leaves, spec = pytree.tree_flatten(tree)
    if not any(_is_opaque_dataclass(x) for x in leaves):
        return tree
    return pytree.tree_unflatten(
        [_Opened(x) if _is_opaque_dataclass(x) else x for x in leaves], spec
    )


def opened_leaves(tree: Any) -> list[Any]:
    """`pytree.tree_leaves(opened(tree))`, without rebuilding `tree` where it holds no such
    dataclass (the common case, on every jitted call)."""
    leaves = pytree.tree_leaves(tree)
    if any(_is_opaque_dataclass(x) for x in leaves):
        return pytree.tree_leaves(opened(tree))
    return leaves


class FieldsKept:
    """The fields of each dataclass instance in a tree (a call's arguments, as the program
    gets them), to tell afterwards whether the program rebound one. The instances it gets are
    rebuilt from the user's (`opened`), so a field it rebinds (`batch.seen = y`) would never
    reach the user's object; it is refused instead, by name (capture/api.py)."""

    def __init__(self, tree: Any) -> None:
        self._kept: list[tuple[Any, dict[str, int]]] = []
        self._walk(tree)

    def _walk(self, tree: Any) -> None:
        for x in pytree.tree_leaves(tree):
            if _is_opaque_dataclass(x):
                fields = {f.name: getattr(x, f.name) for f in dataclasses.fields(x)}
                self._kept.append((x, {n: id(v) for n, v in fields.items()}))
                self._walk(list(fields.values()))

    def rebound(self) -> str:
        """'' where every field holds what it held, else the first one rebound, in words."""
        for obj, ids in self._kept:
            for name, was in ids.items():
                if id(getattr(obj, name)) != was:
                    return f"{type(obj).__qualname__}.{name}"
        return ""
