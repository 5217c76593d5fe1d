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

import copy
import dataclasses
import enum
import functools
import types
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.capture.attribute_reads import MODULE_INTERNALS
from thunderviz.core.dispatch_settings import dispatch_settings
from thunderviz.core.plain import SCALARS
from thunderviz.executor.dropped_outputs import DroppedOutput

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


def arguments_key(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """The call's arguments' part of jit's key: (positional, keyword). Tensors (the common
    case) are keyed inline, without a call. (A `conj()` view is keyed apart: the program sees
    it as one, and calls `resolve_conj()` on it.)"""
    inputs = tuple(
        (a.shape, a.dtype, a.device, a.requires_grad, layout_key(a), a.is_conj())
        if type(a) is torch.Tensor
        else value_key(a, f"argument {i} of the call")
        for i, a in enumerate(args)
    )
    named = tuple((k, value_key(v, f"keyword argument {k!r}")) for k, v in kwargs.items())
    return inputs, named


def changed_argument(before: tuple[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """'' where the call's arguments still have the key `before` (`arguments_key`, taken
    before the program ran), else which one the program changed, in words. Only an object
    the program gets as it is can change: a plain object (a KV cache, a config), not a
    container pytree opens, which it gets rebuilt (a dataclass's rebound field is refused by
    capture: core/dataclass_nodes.FieldsKept)."""
    try:
        after = arguments_key(args, kwargs)
    except UnkeyableArgument:  # (a KV cache the program filled: keyable before, not now)
        return "an object among its arguments"
    if after == before:
        return ""
    for i, (was, now) in enumerate(zip(before[0], after[0], strict=True)):
        if was != now:
            return f"argument {i} ({type(args[i]).__name__})"
    for (name, was), (_, now) in zip(before[1], after[1], strict=True):
        if was != now:
            return f"keyword argument {name!r} ({type(kwargs[name]).__name__})"
    return "an object among its arguments"


def layout_key(t: torch.Tensor) -> Any:
    """Whether a strided tensor is contiguous; a sparse one's layout (a CSR tensor has no
    `is_contiguous`, and a COO one's says nothing of its layout)."""
    return t.is_contiguous() if t.layout is torch.strided else t.layout


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
            layout_key(x),
            x.is_conj(),
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
    if kind is DroppedOutput:  # handed back from a jitted call's output: say what it is
        x.refuse()
    if kind.__module__ == "numpy" and kind.__name__ == "ndarray":
        return _array_key(x, where)
    if dataclasses.is_dataclass(x):
        # opened like a container where pytree opens it (core/dataclass_nodes.py): the
        # tensors of a dataclass argument are inputs; of one inside an object, constants
        return (
            kind,
            tuple(
                (f.name, value_key(getattr(x, f.name), f"{where}.{f.name}", inner, inside_object))
                for f in dataclasses.fields(x)
            ),
        )
    if type(x).__hash__ is not object.__hash__ and type(x).__hash__ is not None:
        return (kind, x)  # hashed by value by its own definition
    if isinstance(x, functools.partial):  # its function and arguments are not attributes
        parts = (x.func, x.args, x.keywords, x.__dict__)
        return (kind, value_key(parts, f"{where} (a partial)", inner, True))
    state = getattr(x, "__dict__", None)
    if state is not None and not hasattr(kind, "__slots__") and _state_is_attributes(kind):
        # a plain object: the program may read any attribute, so all of them are the key
        return (
            kind,
            tuple((k, value_key(v, f"{where}.{k}", inner, True)) for k, v in state.items()),
        )
    if kind.__module__.startswith("transformers.cache_utils"):
        raise UnkeyableArgument(
            f"thunderviz.jit: {where} is part of a Hugging Face KV cache ({kind.__qualname__}), "
            "program state that each step of generation grows in place, which no run of a "
            "trace replays. Under jit, call the model without a cache (`use_cache=False`), or "
            "run the generation steps eagerly."
        )
    raise UnkeyableArgument(
        f"thunderviz.jit: {where} is a {kind.__qualname__}, which is neither a tensor nor "
        "comparable by value, so jit cannot tell whether its trace still holds for it. Pass "
        "the values the program uses (numbers, tuples, a dataclass), or make the type "
        "hashable by value (define __eq__ and __hash__)."
    )


# The size of an instance of a class written in Python: what it holds is its __dict__. A
# larger instance keeps state in C fields its __dict__ does not show (an exception's args).
_PYTHON_INSTANCE_SIZE = type("_Plain", (), {}).__basicsize__


def _state_is_attributes(kind: type) -> bool:
    return kind.__basicsize__ <= _PYTHON_INSTANCE_SIZE


# A numpy array the program uses is a constant of its trace, keyed by its bytes: hashing
# them is cheap at this size; a larger array should come in as a tensor (an input).
_MAX_ARRAY_BYTES = 1 << 16


def _array_key(x: Any, where: str) -> Any:
    if x.nbytes > _MAX_ARRAY_BYTES or x.dtype.hasobject:
        what = "of Python objects" if x.dtype.hasobject else f"of {x.nbytes} bytes"
        raise UnkeyableArgument(
            f"thunderviz.jit: {where} is a numpy array {what}, which jit would have to "
            "compare by value on every call. Pass it as a tensor (`torch.from_numpy(a)`): a "
            "tensor is an input of the trace, not a constant."
        )
    return ("ndarray", x.dtype.str, x.shape, x.strides, x.tobytes())


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
    """Global state the recorded ops depend on: grad mode, the settings that pick a call's
    ops (core/dispatch_settings.py: the default dtype, deterministic algorithms, the kernel
    switches), and autocast (enabled, dtype) per device type, which decides the casts a
    trace holds."""
    settings = dispatch_settings()
    if not torch._C._is_any_autocast_enabled():
        return (torch.is_grad_enabled(), settings, None)
    autocast = tuple(
        (torch.get_autocast_dtype(d) if torch.is_autocast_enabled(d) else None)
        for d in _AUTOCAST_DEVICES
    )
    return (torch.is_grad_enabled(), settings, autocast)


_AMBIENT_PARTS = (
    "grad mode",
    "the default dtype, deterministic algorithms or the kernel switches",
    "autocast",
)


def ambient_change(before: tuple[Any, ...], after: tuple[Any, ...]) -> str:
    """'' where `ambient_key()` is the same after the program as before it, else what the
    program left changed, in words (`torch.set_grad_enabled(False)` or
    `torch.set_default_dtype(torch.float64)` called in it without restoring)."""
    return "; ".join(
        f"{part}: {was!r} -> {now!r}"
        for part, was, now in zip(_AMBIENT_PARTS, before, after, strict=True)
        if was != now
    )


# --- module attributes --------------------------------------------------------------------
# A module's plain attributes (`self.scale = 2.0`, Dropout's `p`, `eps`) are constants of the
# trace. Tensors held as plain attributes (not parameters or buffers) are captured by
# reference: replacing one changes what the program reads. Underscored names are a module's
# own too (`self._scale`, Hugging Face's `_attn_implementation`); only torch's bookkeeping
# (`_parameters`, the hook dicts) is left out.
_PLAIN = SCALARS


def module_attributes(submodules: list[torch.nn.Module]) -> tuple[tuple[Any, ...], ...]:
    """(path index, the module's __dict__, name, value) for each plain attribute, taken
    before tracing: what the trace specialised on."""
    out = []
    held_by_id: dict[int, HeldContents | None] = {}  # (a config the modules share: once)
    for i, m in enumerate(submodules):
        state = m.__dict__
        for name, value in state.items():
            if name in MODULE_INTERNALS or name == "training":
                continue  # torch's own bookkeeping; training flags are in the key
            kind = type(value)
            if (
                kind in _PLAIN
                or isinstance(value, torch.Tensor)
                or (kind is tuple and all(type(v) in _PLAIN for v in value))
                or _frozen_value(value)
                or isinstance(value, _BY_IDENTITY)  # `self.act = F.relu`: by identity
            ):
                out.append((i, state, name, value))
            elif isinstance(value, (*_HOLDERS, functools.partial)) or has_fields(value):
                if id(value) not in held_by_id:
                    held_by_id[id(value)] = HeldContents.of(value)
                held = held_by_id[id(value)]
                if held is not None:
                    out.append((i, state, name, held))
    return tuple(out)


def _frozen_value(value: Any) -> bool:
    """An options object a module holds and passes on (`nn.LinearCrossEntropyLoss`'s
    `options`, a frozen dataclass; an enum member): compared by value, it cannot change in
    place."""
    if isinstance(value, enum.Enum):
        return True
    params = getattr(type(value), "__dataclass_params__", None)
    return params is not None and params.frozen and params.eq and not isinstance(value, type)


# --- mutable values a module holds --------------------------------------------------------
# A list of layer indices to skip, a dict of flags, a config object (Hugging Face's modules
# each hold the model's `config`): a forward branches on what they hold, and they change in
# place (`model.skip.append(3)`, `model.config.output_hidden_states = True`). Their
# contents, taken before tracing, are compared on every call: a few microseconds for a
# config of a hundred fields. An object too large or deep to take whole is not snapshotted.
_HOLDERS = (list, dict, set, tuple)
_CONTENTS_DEPTH, _CONTENTS_ITEMS = 4, 512


class _TooLarge(Exception):
    pass


def has_fields(value: Any) -> bool:
    """A plain Python object with attributes of its own (not a module, tensor or code)."""
    return (
        hasattr(value, "__dict__")
        and _state_is_attributes(type(value))
        and not isinstance(value, (torch.nn.Module, torch.Tensor, *_BY_IDENTITY))
        and not isinstance(value, enum.Enum)
    )


def contents(value: Any) -> Any:
    """What `value` holds, as nested tuples comparable with ==: plain values by value (and
    type: 1 and True differ), containers and objects' attributes by their contents, anything
    else (tensors, code, modules) by identity. Raises _TooLarge past the bounds."""
    budget = [_CONTENTS_ITEMS]

    def walk(x: Any, depth: int) -> Any:
        budget[0] -= 1
        if budget[0] < 0 or depth > _CONTENTS_DEPTH:
            raise _TooLarge
        kind = type(x)
        if kind in _PLAIN or isinstance(x, enum.Enum):
            return (kind, x)
        if kind in (list, tuple):
            return (kind, tuple(walk(v, depth + 1) for v in x))
        if kind is dict:
            return (kind, tuple((walk(k, depth + 1), walk(v, depth + 1)) for k, v in x.items()))
        if kind in (set, frozenset):
            return (kind, frozenset(walk(v, depth + 1) for v in x))
        if isinstance(x, functools.partial):  # (its parts are not attributes)
            return (kind, walk((x.func, x.args, x.keywords), depth + 1))
        if has_fields(x):
            return (kind, walk(vars(x), depth + 1))
        return ("id", id(x))

    return walk(value, 0)


class HeldContents:
    """A snapshot entry for a mutable value: the object and what it held. Where it holds only
    plain values and containers of them (a config's fields), a deep copy of them is kept too,
    and a call compares with it in C (`==`), not by walking the object again."""

    __slots__ = ("obj", "held", "mirror")

    def __init__(self, obj: Any, held: Any, mirror: Any) -> None:
        self.obj, self.held, self.mirror = obj, held, mirror

    @staticmethod
    def of(value: Any) -> HeldContents | None:
        try:
            held = contents(value)
        except _TooLarge:
            return None
        mirror = None
        if not _holds_identities(held):
            mirror = copy.deepcopy(_fields(value))
            if mirror != _fields(value):  # (a value unequal to its copy: walk it every call)
                mirror = None
        return HeldContents(value, held, mirror)

    def changed(self, now: Any) -> bool:
        """Whether `now`, the attribute's value at a call, holds something else."""
        if now is self.obj and self.mirror is not None:
            return _fields(now) != self.mirror
        try:
            return contents(now) != self.held
        except _TooLarge:
            return True

    def __repr__(self) -> str:
        return f"{self.obj!r} (as it was then)"


def _fields(value: Any) -> Any:
    return vars(value) if has_fields(value) else value


def _holds_identities(held: Any) -> bool:
    """Whether `contents` signed anything by identity (an object compared as itself)."""
    if type(held) is tuple:
        if len(held) == 2 and held[0] == "id":
            return True
        return any(_holds_identities(x) for x in held)
    if type(held) is frozenset:
        return any(_holds_identities(x) for x in held)
    return False


MISSING = object()


class RewrittenTensor:
    """A snapshot entry for a tensor attribute the program rewrites every call without
    reading its values (a spectral_norm hook's weight): jit assigns a new tensor after every
    call, so identity says nothing. What the program could still have branched on is that
    it is a tensor (`if self.h is None`) and its metadata (`self.h.shape`)."""

    __slots__ = ("metadata",)

    def __init__(self, t: torch.Tensor) -> None:
        self.metadata = (t.shape, t.dtype, t.device)

    def changed(self, now: Any) -> bool:
        return not isinstance(now, torch.Tensor) or (now.shape, now.dtype, now.device) != (
            self.metadata
        )

    def __repr__(self) -> str:
        shape, dtype, device = self.metadata
        return f"a tensor {tuple(shape)} {dtype} on {device}"


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
    checked: dict[tuple[int, int], bool] = {}  # one check per (snapshot, object): a shared config
    for item in snapshot:
        _, state, name, value = item
        now = state.get(name, MISSING)
        if type(value) is RewrittenTensor:
            if value.changed(now):
                return item
            continue
        if type(value) is HeldContents:
            key = (id(value), id(now))
            if key not in checked:
                checked[key] = value.changed(now)
            if checked[key]:
                return item
            continue
        if now is not value and (
            type(now) is not type(value) or isinstance(value, _SNAPSHOT_IDENTITY) or now != value
        ):
            return item
    return None
