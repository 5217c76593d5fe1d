"""Saved-for-backward as first-class records: what is kept, how big, who made it, who reads it."""

from __future__ import annotations

from dataclasses import dataclass, field

from thunderviz.core.dag import consumers, producers
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol, Symbol, SymbolKind
from thunderviz.core.trace import Trace

__all__ = ["SavedTensor", "describe_saved", "UNPACK"]

# `(a, b) = saved_for_backward`: how the backward trace takes its inputs apart. Readers
# recognise it by `UNPACK.id`, never by spelling the id again.
UNPACK = Symbol(
    name="unpack",
    id="thunderviz.unpack",
    fn=None,
    kind=SymbolKind.OPERATOR,
    operator="unpack",
    label="unpack",
)


@dataclass
class SavedTensor:
    proxy: Proxy
    producer: BoundSymbol | None  # in the augmented forward; None for a trace input
    consumers: list[BoundSymbol] = field(default_factory=list)  # in the backward
    recomputed: bool = False  # rematerialized in backward instead of saved

    @property
    def name(self) -> str:
        return self.proxy.name

    @property
    def shape(self) -> tuple[int, ...]:
        return self.proxy.shape if isinstance(self.proxy, TensorProxy) else ()

    @property
    def dtype(self) -> object:
        return self.proxy.dtype if isinstance(self.proxy, TensorProxy) else None

    @property
    def bytes(self) -> int:
        return self.proxy.nbytes if isinstance(self.proxy, TensorProxy) else 0

    @property
    def fwd_bsym(self) -> BoundSymbol | None:
        """The top-level forward bound symbol this residual belongs to."""
        return self.producer.fwd_bsym or self.producer if self.producer is not None else None

    @property
    def module_path(self) -> str:
        return self.producer.module_path if self.producer is not None else ""

    def __repr__(self) -> str:
        made = self.producer.sym.id if self.producer is not None else "input"
        return f"<saved {self.name} {self.bytes} B from {made}, read by {len(self.consumers)}>"


def describe_saved(saved: list[Proxy], augmented: Trace, backward: Trace) -> list[SavedTensor]:
    made_by = producers(augmented.bound_symbols)
    read_by = consumers(backward.bound_symbols)
    return [
        SavedTensor(
            p, made_by.get(p.name), [b for b in read_by.get(p.name, []) if b.sym.id != UNPACK.id]
        )
        for p in saved
    ]
