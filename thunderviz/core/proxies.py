"""Proxies: named stand-ins for the values a trace computes.

A proxy carries what a reader (and the UI) needs to know about a value without holding it:
its name and, for tensors, shape, dtype, device and whether it requires grad. Names are
unique within a trace and kept by every trace derived from it, so "t12" in the forward
trace, the augmented forward and the backward is the same value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.core.plain import PLAIN
from thunderviz.core.quoting import identifier

__all__ = [
    "Proxy",
    "TensorProxy",
    "NumberProxy",
    "NameGenerator",
    "dtype_short",
    "leaves",
    "map_leaves",
    "proxies_in",
    "sanitize_name",
]

_DTYPE_SHORT = {
    torch.float64: "f64",
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "b8",
    torch.complex64: "c64",
    torch.complex128: "c128",
}


def dtype_short(dtype: torch.dtype) -> str:
    """`torch.float32` -> "f32", the notation of Thunder's shape comments."""
    return _DTYPE_SHORT.get(dtype, str(dtype).removeprefix("torch."))


def sanitize_name(name: str) -> str:
    """Turn a parameter path such as "blocks.0.attn.weight" into an identifier (NFKC form,
    so two names Python would read as one variable come out equal: see core/quoting)."""
    return identifier(name)


@dataclass(frozen=True, eq=False)
class Proxy:
    """A named value in a trace. Identity is the name: two proxies with one name are one value."""

    name: str

    def __hash__(self) -> int:
        return hash(self.name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Proxy) and other.name == self.name

    def __repr__(self) -> str:
        return self.name

    def renamed(self, name: str) -> Proxy:
        return replace(self, name=name)


@dataclass(frozen=True, eq=False)
class TensorProxy(Proxy):
    shape: tuple[int, ...] = ()
    dtype: torch.dtype = torch.float32
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    requires_grad: bool = False

    @staticmethod
    def like(name: str, t: torch.Tensor, requires_grad: bool | None = None) -> TensorProxy:
        return TensorProxy(
            name=name,
            shape=tuple(int(s) for s in t.shape),
            dtype=t.dtype,
            device=t.device,
            requires_grad=t.requires_grad if requires_grad is None else requires_grad,
        )

    def describes(self, t: torch.Tensor | TensorProxy) -> bool:
        """Whether `t` (a tensor, or another proxy) has this proxy's shape, dtype and device."""
        return (tuple(t.shape), t.dtype, t.device) == (self.shape, self.dtype, self.device)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * _itemsize(self.dtype)

    @property
    def is_float(self) -> bool:
        return self.dtype.is_floating_point or self.dtype.is_complex

    def type_string(self) -> str:
        """'cpu f32[4, 16]': the device, dtype and shape shown in trace comments and the UI."""
        dims = ", ".join(str(s) for s in self.shape)
        return f"{self.device.type} {dtype_short(self.dtype)}[{dims}]"

    def meta(self) -> torch.Tensor:
        """An empty meta tensor of this proxy's shape and dtype, for shape inference."""
        return torch.empty(self.shape, dtype=self.dtype, device="meta")


@dataclass(frozen=True, eq=False)
class NumberProxy(Proxy):
    """A Python number in a trace. `value` is the one seen when tracing (traces specialize
    on it)."""

    value: int | float | bool | None = None

    @property
    def python_type(self) -> type:
        return type(self.value)

    def type_string(self) -> str:
        return f"{self.python_type.__name__} {self.value!r}"


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype, device="meta").element_size()


# Types that are always a leaf of pytree (none is a container or registered with it): the
# hand walks below take them as they are without a call per element.
LEAF_TYPES = frozenset({TensorProxy, NumberProxy, *PLAIN})


def leaves(x: Any, out: list[Any]) -> list[Any]:
    """`pytree.tree_leaves(x)` (appended to `out`), walking plain tuples, lists and dicts by
    hand: bound symbols' flat arguments and outputs are read all through tracing and
    autodiff, where pytree's generic flatten was a tenth of a model's first call. Any other
    container (a namedtuple, torch.Size, a registered type) is pytree's to flatten."""
    kind = type(x)
    if kind is tuple or kind is list:
        for v in x:
            if type(v) in LEAF_TYPES:  # most elements: no call for them
                out.append(v)
            else:
                leaves(v, out)
    elif kind is dict:
        for v in x.values():
            leaves(v, out)
    elif isinstance(x, (tuple, list, dict)) or kind in pytree.SUPPORTED_NODES:
        out.extend(pytree.tree_leaves(x))
    else:
        out.append(x)
    return out


def map_proxies(x: Any, fn: Callable[[Proxy], Any]) -> Any:
    """`pytree.tree_map` of `fn` over the proxies among `x`'s leaves (in pytree's order),
    walking plain tuples, lists and dicts by hand as `leaves` does (renaming bound symbols,
    `BoundSymbol.rename`, is all through tracing, autodiff and stamping)."""
    kind = type(x)
    if kind is tuple or kind is list:
        mapped = [
            (fn(v) if isinstance(v, Proxy) else v) if type(v) in LEAF_TYPES else map_proxies(v, fn)
            for v in x
        ]
        return mapped if kind is list else tuple(mapped)
    if kind is dict:
        return {k: map_proxies(v, fn) for k, v in x.items()}
    if isinstance(x, Proxy):
        return fn(x)
    if isinstance(x, (tuple, list, dict)) or kind in pytree.SUPPORTED_NODES:  # as `leaves`
        return pytree.tree_map(lambda y: fn(y) if isinstance(y, Proxy) else y, x)
    return x


def map_leaves(x: Any, fn: Callable[[Any], Any]) -> Any:
    """`pytree.tree_map(fn, x)`, walking plain tuples, lists and dicts by hand as `leaves`
    does: for trees of other leaves than proxies (a meta kernel's output, mapped to proxies
    for every symbol a grad rule calls). pytree's flatten also leaves a reference cycle
    behind on each call, for the next garbage collection to find."""
    kind = type(x)
    if kind is tuple or kind is list:
        mapped = [map_leaves(v, fn) for v in x]
        return mapped if kind is list else tuple(mapped)
    if kind is dict:
        return {k: map_leaves(v, fn) for k, v in x.items()}
    if isinstance(x, (tuple, list, dict)) or kind in pytree.SUPPORTED_NODES:  # as `leaves`
        return pytree.tree_map(fn, x)
    return fn(x)


def proxies_in(x: Any, out: list[Proxy]) -> list[Proxy]:
    """The proxies among `x`'s leaves, in pytree's order (appended to `out`)."""
    out.extend(y for y in leaves(x, []) if isinstance(y, Proxy))
    return out


class NameGenerator:
    """Hands out names unique within one trace: t0, t1, ... and keeps requested names unique."""

    def __init__(self, taken: set[str] | None = None) -> None:
        self.taken: set[str] = set(taken or ())
        self._counters: dict[str, int] = {}

    def fresh(self, prefix: str = "t") -> str:
        n = self._counters.get(prefix, 0)
        name = f"{prefix}{n}"
        while name in self.taken:
            n += 1
            name = f"{prefix}{n}"
        self._counters[prefix] = n + 1
        self.taken.add(name)
        return name

    def claim(self, wanted: str) -> str:
        """`wanted` if free, else `wanted_1`, `wanted_2`, ..."""
        base = sanitize_name(wanted)
        name, k = base, 1
        while name in self.taken or name in _RESERVED or name.startswith(_RESERVED_PREFIX):
            name = f"{base}_{k}"
            k += 1
        self.taken.add(name)
        return name


# Names the compiled twin binds operators to (core/trace.py, `_bind_ops`).
_RESERVED_PREFIX = "_op_"
# Names the printed Python needs for itself.
_RESERVED = {
    "torch",
    "aten",
    "prims",
    "F",
    "inf",
    "nan",
    "None",
    "True",
    "False",
    "def",
    "return",
    "lambda",
    "class",
    "import",
    "from",
    "in",
    "is",
    "not",
    "and",
    "or",
    "if",
    "else",
    "for",
    "while",
    "with",
    "as",
    "pass",
    "del",
    "global",
    "yield",
}
