"""Building new traces by calling symbols on proxies (what grad rules and passes do)."""

from __future__ import annotations

from typing import Any

import torch

from thunderviz.core.context import pop_builder, push_builder
from thunderviz.core.proxies import NameGenerator, NumberProxy, TensorProxy, map_leaves
from thunderviz.core.symbol import NO_ORIGIN, BoundSymbol, Origin, Symbol

__all__ = ["TraceBuilder"]


class TraceBuilder:
    """Inside `with TraceBuilder(names) as b:`, calling a Symbol appends a BoundSymbol to
    `b.bound_symbols` and returns output proxies whose shapes come from the symbol's meta."""

    def __init__(self, names: NameGenerator, origin: Origin = NO_ORIGIN) -> None:
        self.names = names
        self.bound_symbols: list[BoundSymbol] = []
        self.origin = origin  # of every bound symbol it records

    def __enter__(self) -> TraceBuilder:
        push_builder(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        pop_builder(self)

    def record(self, sym: Symbol, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if sym.meta is None:
            raise TypeError(f"{sym.id} cannot be recorded: it has no meta function")
        meta_out, device = sym.meta(args, kwargs)
        output = map_leaves(meta_out, lambda x: self._proxy_for(x, device))
        self.bound_symbols.append(
            BoundSymbol(
                sym=sym,
                args=tuple(args),
                kwargs=dict(kwargs),
                output=output,
                origin=self.origin,
            )
        )
        return output

    def _proxy_for(self, x: Any, device: torch.device) -> Any:
        if isinstance(x, torch.Tensor):
            return TensorProxy(
                name=self.names.fresh(), shape=tuple(x.shape), dtype=x.dtype, device=device
            )
        if isinstance(x, (int, float, bool)):
            return NumberProxy(name=self.names.fresh("n"), value=x)
        return x
