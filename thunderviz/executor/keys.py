"""What a jit cache entry is keyed on: everything about a call that the trace cannot see
at run time and was specialised on when it was made.

Tensors are keyed by their metadata (the trace runs on any values). Everything else the
program received is a constant of the trace, so it is keyed by value: numbers, strings,
dtypes, containers and dataclasses/namedtuples by their fields, plain objects by their
attributes. A value that can be keyed neither way is refused with the argument's name:
keying it by `id()` gave stale traces when a new object reused an old one's id, or when
the object was changed in place (`cfg.scale = 3`).
"""

from __future__ import annotations

import dataclasses
import enum
import types
from typing import Any

import torch
from torch.utils import _pytree as pytree

__all__ = ["value_key", "UnkeyableArgument", "ambient_key"]

# Keyed by themselves: immutable values with value equality.
_ATOMS = (
    int,
    float,
    bool,
    str,
    bytes,
    complex,
    type(None),
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
    enum.Enum,
    type(Ellipsis),
    range,
)
# Keyed by identity (held in the key, so the id cannot be reused while the entry lives):
# code, whose behaviour is not a value the trace could have copied, and a random generator,
# which the trace draws from as the object it is (capture/generators.py).
_BY_IDENTITY = (
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    type,
    types.ModuleType,
    torch.nn.Module,
    torch.Generator,
)
_MAX_DEPTH = 6


class UnkeyableArgument(TypeError):
    """A non-tensor argument jit can neither key by value nor trust to stay the same."""


def value_key(x: Any, where: str, depth: int = 0, inside_object: bool = False) -> Any:
    """A hashable key equal for two values exactly when a trace of one is right for the other.
    A tensor inside an object pytree does not open (a dataclass, a config) is a constant of
    the trace, not an input: it is keyed by identity."""
    if isinstance(x, torch.Tensor):
        if inside_object:
            return ("C", _Identity(x))
        return (
            x.shape,
            x.dtype,
            x.device,
            x.requires_grad,
            x.is_contiguous(),
        )  # as jit's fast path
    kind = type(x)
    if isinstance(x, _ATOMS):
        if kind is float and x != x:  # nan, the one float unequal to itself
            return (float, "nan")
        return (kind, x)
    if depth > _MAX_DEPTH:
        raise UnkeyableArgument(
            f"thunderviz.jit: {where} is nested too deeply to be compared by value"
        )
    inner = depth + 1
    if isinstance(x, (tuple, list)):
        return (
            kind,
            tuple(value_key(v, f"{where}[{i}]", inner, inside_object) for i, v in enumerate(x)),
        )
    if isinstance(x, dict):
        return (
            kind,
            tuple(
                (
                    value_key(k, where, inner, inside_object),
                    value_key(v, f"{where}[{k!r}]", inner, inside_object),
                )
                for k, v in x.items()
            ),
        )
    if isinstance(x, (set, frozenset)):
        return (kind, frozenset(value_key(v, where, inner, inside_object) for v in x))
    if isinstance(x, slice):
        return (slice, value_key((x.start, x.stop, x.step), where, inner, inside_object))
    if kind in pytree.SUPPORTED_NODES:  # a registered container: its leaves are inputs
        leaves, spec = pytree.tree_flatten(x)
        return (
            spec,
            tuple(
                value_key(v, f"{where}[{i}]", inner, inside_object) for i, v in enumerate(leaves)
            ),
        )
    if isinstance(x, _BY_IDENTITY):
        return (kind, _Identity(x))
    if dataclasses.is_dataclass(x):
        return (
            kind,
            tuple(
                (f.name, value_key(getattr(x, f.name), f"{where}.{f.name}", inner, True))
                for f in dataclasses.fields(x)
            ),
        )
    if type(x).__hash__ is not object.__hash__ and type(x).__hash__ is not None:
        return (kind, x)  # hashed by value by its own definition
    state = getattr(x, "__dict__", None)
    if state is not None and not hasattr(kind, "__slots__"):
        # a plain object: the program may read any attribute, so all of them are the key
        return (
            kind,
            tuple((k, value_key(v, f"{where}.{k}", inner, True)) for k, v in state.items()),
        )
    raise UnkeyableArgument(
        f"thunderviz.jit: {where} is a {kind.__qualname__}, which is neither a tensor nor "
        "comparable by value, so jit cannot tell whether its trace still holds for it. Pass "
        "the values the program uses (numbers, tuples, a dataclass), or make the type "
        "hashable by value (define __eq__ and __hash__)."
    )


class _Identity:
    """Compares by identity and keeps the object alive (its id cannot be reused meanwhile)."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __repr__(self) -> str:
        return f"<{type(self.obj).__name__} at {id(self.obj):#x}>"


_AUTOCAST_DEVICES = ("cpu", "cuda")


def ambient_key() -> tuple[Any, ...]:
    """Global state the recorded ops depend on: grad mode, the default dtype (what
    `torch.ones(3)` and `torch.tensor(0.1)` make), and autocast (enabled, dtype) per device
    type, which decides the casts a trace holds."""
    default = torch.get_default_dtype()
    if not torch._C._is_any_autocast_enabled():
        return (torch.is_grad_enabled(), default, None)
    autocast = tuple(
        (torch.get_autocast_dtype(d) if torch.is_autocast_enabled(d) else None)
        for d in _AUTOCAST_DEVICES
    )
    return (torch.is_grad_enabled(), default, autocast)


# --- module attributes --------------------------------------------------------------------
# A module's plain attributes (`self.scale = 2.0`, Dropout's `p`, `eps`) are constants of the
# trace. Tensors held as plain attributes (not parameters or buffers) are captured by
# reference: replacing one changes what the program reads.
_PLAIN = (int, float, bool, str, type(None))


def module_attributes(submodules: list[torch.nn.Module]) -> tuple[tuple[Any, ...], ...]:
    """(path index, the module's __dict__, name, value) for each plain attribute, taken
    before tracing: what the trace specialised on."""
    out = []
    for i, m in enumerate(submodules):
        state = m.__dict__
        for name, value in state.items():
            if name[0] == "_" or name == "training":
                continue  # torch's own bookkeeping; training flags are in the key
            kind = type(value)
            if (
                kind in _PLAIN
                or isinstance(value, torch.Tensor)
                or (kind is tuple and all(type(v) in _PLAIN for v in value))
                or _frozen_value(value)
            ):
                out.append((i, state, name, value))
    return tuple(out)


def _frozen_value(value: Any) -> bool:
    """An options object a module holds and passes on (`nn.LinearCrossEntropyLoss`'s
    `options`, a frozen dataclass; an enum member): compared by value, it cannot change in
    place. (A mutable object could, unseen: not snapshotted.)"""
    if isinstance(value, enum.Enum):
        return True
    params = getattr(type(value), "__dataclass_params__", None)
    return params is not None and params.frozen and params.eq and not isinstance(value, type)


MISSING = object()


def snapshot_worthy(value: Any) -> bool:
    """A value read from outside that a trace bakes in: plain values (compared by value) and
    code, classes and modules (by identity)."""
    return type(value) in _PLAIN or isinstance(value, _BY_IDENTITY)


# in a snapshot, compared by identity: code (what rebinding a name replaces) and tensors
_SNAPSHOT_IDENTITY = (torch.Tensor, *_BY_IDENTITY)


def changed_attribute(snapshot: tuple[tuple[Any, ...], ...]) -> tuple[Any, ...] | None:
    """The first attribute whose value is no longer the one in `snapshot` (None: all hold).
    Runs on every call: an identity check first, equality only when that fails, and only
    between values of one type (tensors, code and modules compare by identity)."""
    for item in snapshot:
        _, state, name, value = item
        now = state.get(name, MISSING)
        if now is not value and (
            type(now) is not type(value) or isinstance(value, _SNAPSHOT_IDENTITY) or now != value
        ):
            return item
    return None
