"""Rewriting bound symbols for block stamping, and their fingerprints.

Renaming walks the containers torch passes (tuples, lists, dicts) by hand and hands anything
else to pytree (`core/proxies.map_proxies`, which `BoundSymbol.rename` uses too); `relocated`
also gives each bound symbol another origin, and `rewritten` moves module paths from a
recorded block to the one it is stamped for. A trace says which of its blocks were written
out so (`WrittenOut`, in `trace.meta["written_out"]`): autodiff's block sweep takes from it
what it would otherwise find by walking each block.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch.utils import _pytree as pytree

from thunderviz.core.proxies import NameGenerator, Proxy, TensorProxy, map_proxies, proxies_in
from thunderviz.core.symbol import BoundSymbol, Origin

__all__ = [
    "WrittenOut",
    "rewritten",
    "relocated",
    "swap",
    "fingerprints",
    "proxies_in",
    "drawn_since",
    "proxy_meta",
    "map_proxies",
]


@dataclass(frozen=True, eq=False)
class WrittenOut:
    """Top-level bound symbols of a trace that are one recording of a repeated block written
    out (capture/stamping.py): the recording's bound symbols, each proxy renamed by
    `renaming` (the recorded proxy's name -> this block's proxy, for every proxy they
    mention) and module paths moved to `path`. The recording itself, once proven, counts as
    written out with its own names. Two write-outs of one recording are the same code on
    other proxies; `bsyms` are compared by identity, so a pass that replaced any of them
    leaves a stale entry that matches nothing."""

    recording: object  # compared by identity
    path: str
    bsyms: tuple[BoundSymbol, ...]
    renaming: Mapping[str, Proxy]


def rewritten(b: BoundSymbol, mapping: dict[str, Proxy], cut: int, path: str) -> BoundSymbol:
    """`b.rename(mapping)` with its module paths moved from the recorded block to `path`
    (the first `cut` characters replaced), in one pass; its subsymbols when first read
    (`mapping` must not change afterwards)."""
    return relocated(b, mapping, lambda x: Origin(x.source, path + x.module_path[cut:]))


def relocated(
    b: BoundSymbol, mapping: dict[str, Proxy], origin_of: Callable[[BoundSymbol], Origin]
) -> BoundSymbol:
    """`b.rename(mapping)` with each bound symbol's origin made `origin_of(it)`, in one pass;
    its subsymbols when first read (`mapping` must not change afterwards)."""
    return b.with_mapped_subsymbols(
        lambda s: relocated(s, mapping, origin_of),
        args=swap(b.args, mapping),
        kwargs=swap(b.kwargs, mapping),
        output=swap(b.output, mapping),
        origin=origin_of(b),
    )


def swap(x: Any, mapping: dict[str, Proxy]) -> Any:
    """`x` with every proxy replaced by `mapping[proxy.name]` where it has one."""
    return map_proxies(x, lambda p: mapping.get(p.name, p))


def drawn_since(
    names: NameGenerator, taken: set[str], counters: dict[str, int]
) -> dict[str, list[str]] | None:
    """The fresh names drawn since the snapshot (`taken`, `counters`), per prefix in the
    order drawn; None if a name was claimed rather than drawn (not ours to repeat)."""
    drawn: dict[str, list[str]] = {}
    for prefix, end in names._counters.items():
        start = counters.get(prefix, 0)
        if end != start:
            drawn[prefix] = [
                f"{prefix}{n}" for n in range(start, end) if f"{prefix}{n}" not in taken
            ]
    every = {n for v in drawn.values() for n in v}
    return drawn if every == names.taken - taken else None


# --- fingerprints: everything about a bound symbol a trace can show -------------------------
def fingerprints(bsyms: list[BoundSymbol]) -> list[Any]:
    return [_fingerprint(b) for b in bsyms]


def _fingerprint(b: BoundSymbol) -> tuple[Any, ...]:
    return (
        b.sym.id,
        b.sym.name,
        repr(_described(b.args)),
        repr(_described(b.kwargs)),
        repr(_described(b.output)),
        repr(b.source),
        b.module_path,
        sorted(t.name for t in b.tags),
        b.header,
        [_fingerprint(s) for s in b.subsymbols],
    )


def _described(x: Any) -> Any:
    """`pytree.tree_map(_describe, x)`, walking plain containers by hand."""
    kind = type(x)
    if kind is tuple or kind is list:
        return kind(_described(v) for v in x)
    if kind is dict:
        return {k: _described(v) for k, v in x.items()}
    if isinstance(x, (tuple, list, dict)):
        return pytree.tree_map(_describe, x)
    return _describe(x)


def _describe(x: Any) -> Any:
    if isinstance(x, TensorProxy):
        return ("T", x.name, x.shape, x.dtype, x.device, x.requires_grad)
    if isinstance(x, Proxy):
        return (type(x).__name__, x.name, repr(getattr(x, "value", None)))
    return x


def proxy_meta(p: Proxy) -> tuple[Any, ...]:
    """What a fingerprint shows of a proxy, but its name."""
    described = _describe(p)
    return (described[0], *described[2:])
