"""Symbols for the torch-level calls a TorchFunctionMode sees (what the user wrote)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from thunderviz.core.symbol import Symbol, SymbolKind
from thunderviz.prims.aten import meta_outputs

__all__ = ["torch_symbol", "named_torch_symbol", "functional_method_name"]

# Namespaces searched, in order, for the public name of a torch function.
_NAMESPACES = ("torch.nn.functional", "torch", "torch.special", "torch.linalg", "torch.fft")
_PROPERTIES_THAT_COMPUTE = {"T", "mT", "H", "mH", "real", "imag"}


@functools.cache
def _public_names() -> dict[int, str]:
    names: dict[int, str] = {}
    for ns_name in _NAMESPACES:
        ns = eval(ns_name, {"torch": torch})  # noqa: S307 - a fixed list of torch namespaces
        for attr in dir(ns):
            if attr.startswith("_"):
                continue
            obj = getattr(ns, attr, None)
            if callable(obj):
                names.setdefault(id(obj), f"{ns_name}.{attr}")
    return names


def _tensor_attr_name(func: Callable[..., Any]) -> str | None:
    name = getattr(func, "__name__", None)
    if name and getattr(torch.Tensor, name, None) is func:
        return name
    return None


@functools.cache
def torch_symbol(func: Callable[..., Any]) -> Symbol | None:
    """The Symbol for a torch-level callable, or None when it has no printable public name
    (its ATen subsymbols then stand in for it).

    Its `meta` runs `func` itself on meta tensors standing in for the proxies, so grad rules
    can call torch-level symbols (e.g. `scaled_dot_product_attention`) while building traces.
    """
    meta = functools.partial(meta_outputs, func)
    method = _tensor_attr_name(func)
    if method is not None:
        if method.startswith("__") and method.endswith("__") and method != "__setitem__":
            return Symbol(
                name=f"torch.Tensor.{method}",
                id=f"torch.Tensor.{method}",
                fn=func,
                kind=SymbolKind.OPERATOR,
                operator=method.strip("_"),
                label=method.strip("_"),
                meta=meta,
            )
        return Symbol(
            name=method, id=f"torch.Tensor.{method}", fn=func, kind=SymbolKind.METHOD, meta=meta
        )
    if getattr(func, "__name__", None) == "__get__" and hasattr(func, "__self__"):
        prop = getattr(getattr(func, "__self__", None), "__name__", None)
        if prop in _PROPERTIES_THAT_COMPUTE:
            return Symbol(
                name=prop, id=f"torch.Tensor.{prop}", fn=func, kind=SymbolKind.ATTRIBUTE, meta=meta
            )
        return None
    public = _public_names().get(id(func))
    if public is not None:
        return Symbol(name=public, id=public, fn=func, meta=meta)
    return None


def named_torch_symbol(func: Callable[..., Any]) -> Symbol:
    """`torch_symbol` of a function known to have a public name (the calls rules make)."""
    sym = torch_symbol(func)
    if sym is None:
        raise ValueError(f"{func!r} has no public torch name to call it by")
    return sym


def is_property_read(func: Callable[..., Any]) -> bool:
    """`x.shape`, `x.dtype`, ...: reads metadata, never computes."""
    return getattr(func, "__name__", None) == "__get__" and torch_symbol(func) is None


# Methods whose name without the `_` is no functional twin: `Tensor.resize` is an autograd
# Function that keeps the element count (an observer's `min_val.resize_((4,))` from empty
# would raise in it); their ATen ops are the code
_NO_TWIN = frozenset({"resize_", "resize_as_"})


def functional_method_name(sym: Symbol) -> str | None:
    """'add' for the in-place method 'add_' when torch.Tensor has a functional twin."""
    if sym.kind is not SymbolKind.METHOD or not sym.name.endswith("_") or sym.name.endswith("__"):
        return None
    if sym.name in _NO_TWIN:
        return None
    base = sym.name[:-1]
    return base if callable(getattr(torch.Tensor, base, None)) else None
