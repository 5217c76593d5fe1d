"""What a jitted call returns where the program returned an object a trace cannot carry: a
Hugging Face KV cache (`DynamicCache`), program state that holds the call's own tensors.

A trace can return tensors and plain values, and jit hands back immutable values it cannot
print (an enum member, a numpy scalar) as they were; such an object would hold the tensors
of the call that was traced, not of this one. It was returned as None, and incremental decoding
then passed None back as the cache: the model took the one new token for the whole
sequence and computed other logits, without a word. Now the place holds a `DroppedOutput`,
which raises the moment it is used (an attribute, truth, length, iteration, indexing, or
as a jitted call's argument), naming what it stands for and the way out; a training loop
that never reads it pays nothing.
"""

from __future__ import annotations

from typing import Any

from torch.utils import _pytree as pytree

__all__ = ["DroppedOutput", "with_dropped"]


class DroppedOutput:
    """The place of an object the program returned that a trace cannot return."""

    __slots__ = ("_what", "_program")

    def __init__(self, what: str, program: str) -> None:
        object.__setattr__(self, "_what", what)
        object.__setattr__(self, "_program", program)

    def refuse(self) -> None:
        raise RuntimeError(
            f"thunderviz.jit({self._program}) returned this in place of the {self._what} the "
            "program returned: program state a trace cannot return (it would hold the tensors "
            "of the call that was traced, not of this one). Under jit, call the model so that "
            f"it returns none (`use_cache=False` for a Hugging Face model's cache), or run the "
            f"steps that need the {self._what} eagerly."
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # (copy, pickle and hasattr probe these)
            raise AttributeError(name)
        self.refuse()

    def __bool__(self) -> bool:
        self.refuse()
        return False

    def __len__(self) -> int:
        self.refuse()
        return 0

    def __iter__(self) -> Any:
        self.refuse()

    def __getitem__(self, key: Any) -> Any:
        self.refuse()

    def __repr__(self) -> str:
        return f"<thunderviz.jit: no {self._what} (program state a trace cannot return)>"


def with_dropped(out: Any, dropped: tuple[tuple[Any, Any], ...], program: str) -> Any:
    """`out` (a jitted call's output, None at each dropped place) with, at each of
    `dropped`'s (pytree key path, what), `what` itself where capture kept the value (an
    immutable one: an enum member, a numpy scalar), else a `DroppedOutput` for the type it
    names."""
    for path, what in dropped:
        value = DroppedOutput(what, program) if isinstance(what, str) else what
        out = _put(out, path, value)
    return out


def _put(obj: Any, path: tuple[Any, ...], value: Any) -> Any:
    """`obj` with `value` at `path` (containers rebuilt where they are immutable)."""
    if not path:
        return value
    key, rest = path[0], path[1:]
    # (the place itself is not read: a ModelOutput keeps no key whose value is None)
    child = _put(key.get(obj), rest, value) if rest else value
    if isinstance(key, pytree.SequenceKey):
        if isinstance(obj, list):
            obj[key.idx] = child
            return obj
        items = list(obj)
        items[key.idx] = child
        return type(obj)(*items) if hasattr(obj, "_fields") else type(obj)(items)
    if isinstance(key, pytree.MappingKey):
        obj[key.key] = child
        return obj
    object.__setattr__(obj, key.name, child)  # a GetAttrKey (a dataclass's field)
    return obj
