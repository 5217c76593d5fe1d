"""Symbols for ATen operators, with shape inference through torch's meta kernels."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.core.proxies import TensorProxy, leaves
from thunderviz.core.symbol import Symbol
from thunderviz.prims.missing_meta import gradient_kernel, recorded_call

__all__ = ["aten", "aten_symbol", "is_core_aten", "meta_outputs", "infer_device", "op_id"]

_OpOverload = torch._ops.OpOverload


def is_core_aten(op: _OpOverload) -> bool:
    return torch.Tag.core in op.tags


def _printed_name(op: _OpOverload) -> str:
    """'aten.mm' when the packet has one overload (unambiguous), else 'aten.sum.dim_IntList'.
    Ops of torch's own prims namespace (inside some decompositions) print as 'prims.var'."""
    packet_name = op._schema.name.split("::", 1)[1]
    packet = getattr(getattr(torch.ops, op.namespace), packet_name)
    if len(packet.overloads()) == 1:
        return f"{op.namespace}.{packet_name}"
    return f"{op.namespace}.{packet_name}.{op._overloadname}"


def op_id(op: _OpOverload) -> str:
    """The stable key of an overload: 'aten.add.Tensor', 'prims.var.default'."""
    return f"{op.namespace}.{op._schema.name.split('::', 1)[1]}.{op._overloadname}"


@functools.cache
def aten_symbol(op: _OpOverload) -> Symbol:
    packet_name = op._schema.name.split("::", 1)[1]
    return Symbol(
        name=_printed_name(op),
        id=op_id(op),
        fn=op,
        is_prim=is_core_aten(op),
        meta=functools.partial(meta_outputs, op),
        label=packet_name,
    )


def infer_device(args: Any, kwargs: dict[str, Any]) -> torch.device:
    """The device an ATen op's result lives on: that of its first non-scalar tensor input.

    0-dim CPU tensors mix freely with tensors on other devices (as in eager), so they only
    decide when nothing else does; factory ops name theirs in `device=`.
    """
    tensors = [x for x in leaves((args, kwargs), []) if isinstance(x, TensorProxy)]
    for t in tensors:
        if t.ndim > 0:
            return t.device
    if tensors:
        return tensors[0].device
    dev = kwargs.get("device")
    return torch.device(dev) if dev is not None else torch.device("cpu")


def meta_outputs(op: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """Run `op` on meta tensors standing in for the proxies; returns (meta results, device).

    Results are cached by the call's signature (tensor shapes and dtypes, other argument
    values): the meta kernels behind many ops are Python reference implementations, and a
    model repeats the same few dozen signatures layer after layer."""
    key = (op, _call_signature(args), _call_signature(kwargs))
    device = infer_device(args, kwargs)
    cached = _META_CACHE.get(key)
    if cached is None:
        # A rule re-emitting the call it differentiates: the trace has its outputs. Many meta
        # kernels are torch's Python references, run per new signature: BatchNorm's was 10 ms
        # a shape in a fresh process. (Not cached: a recorded call's outputs are not this
        # signature's for all, where they depend on values.)
        recorded = recorded_call(op, args, kwargs)
        if recorded is not None:
            return recorded, device
        cached = gradient_kernel(op, args)  # (prims/missing_meta.py: shaped by hand)
        if cached is None:
            leaves, spec = pytree.tree_flatten((args, kwargs))
            meta_leaves = [x.meta() if isinstance(x, TensorProxy) else x for x in leaves]
            meta_args, meta_kwargs = pytree.tree_unflatten(meta_leaves, spec)
            if "device" in meta_kwargs:
                meta_kwargs["device"] = torch.device("meta")
            cached = op(*meta_args, **meta_kwargs)
        if len(_META_CACHE) > 20_000:  # bounded: one process may trace many models
            _META_CACHE.clear()
        _META_CACHE[key] = cached
    return cached, device


_META_CACHE: dict[Any, Any] = {}


def _call_signature(x: Any) -> Any:
    """What a meta result depends on in an argument: its nesting (with the containers'
    types), the shape and dtype of each tensor, the value of everything else. Built by hand
    rather than through a pytree spec, whose printing was most of a cache hit's cost."""
    if isinstance(x, TensorProxy):
        return ("T", x.shape, x.dtype)
    if isinstance(x, (tuple, list)):  # mostly sizes and strides: their ints without a call
        return (
            type(x).__name__,
            *[(int, repr(v)) if type(v) is int else _call_signature(v) for v in x],
        )
    if isinstance(x, dict):
        return ("dict", *((k, _call_signature(v)) for k, v in x.items()))
    return (type(x), repr(x))


class _Packet:
    def __init__(self, name: str) -> None:
        self._name = name
        self._packet = getattr(torch.ops.aten, name)

    def __getattr__(self, overload: str) -> Symbol:
        return aten_symbol(getattr(self._packet, overload))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return aten_symbol(self._packet.default)(*args, **kwargs)

    def __repr__(self) -> str:
        return f"aten.{self._name}"


# A plain function holds the cache so that `__getattr__` keeps its signature, which is what
# tells a type checker that any attribute of `aten` is a `_Packet`.
@functools.cache
def _packet(name: str) -> _Packet:
    return _Packet(name)


class _AtenNamespace:
    """`aten.mul.Tensor` is the Symbol for `torch.ops.aten.mul.Tensor`."""

    def __getattr__(self, name: str) -> _Packet:
        if name.startswith("__"):
            raise AttributeError(name)
        return _packet(name)


aten = _AtenNamespace()
