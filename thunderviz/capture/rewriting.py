"""Renaming bound symbols without pytree, and their fingerprints.

`BoundSymbol.rename` maps every argument and output through `pytree.tree_map`, which costs
more than the renaming itself; block stamping (capture/stamping.py) and the reverse sweep
(autodiff/vjp.py) rename every bound symbol they write, so they walk the containers torch
passes (tuples, lists, dicts) by hand and hand anything else to pytree as `rename` does.
The result is the same bound symbol `rename` gives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils import _pytree as pytree

from thunderviz.core.proxies import LEAF_TYPES, NameGenerator, Proxy, TensorProxy, proxies_in
from thunderviz.core.symbol import BoundSymbol, Origin

__all__ = [
    "renamed",
    "rewritten",
    "swap",
    "fingerprints",
    "proxies_in",
    "drawn_since",
    "proxy_meta",
    "map_proxies",
]


def renamed(b: BoundSymbol, mapping: dict[str, Proxy]) -> BoundSymbol:
    """`b.rename(mapping)`, in one pass without pytree."""
    if not mapping:
        return b
    return b.with_changes(
        args=swap(b.args, mapping),
        kwargs=swap(b.kwargs, mapping),
        output=swap(b.output, mapping),
        subsymbols=[renamed(s, mapping) for s in b.subsymbols],
    )


def rewritten(b: BoundSymbol, mapping: dict[str, Proxy], cut: int, path: str) -> BoundSymbol:
    """`b.rename(mapping)` with its module paths moved from the recorded block to `path`
    (the first `cut` characters replaced), in one pass."""
    return b.with_changes(
        args=swap(b.args, mapping),
        kwargs=swap(b.kwargs, mapping),
        output=swap(b.output, mapping),
        origin=Origin(b.source, path + b.module_path[cut:]),
        subsymbols=[rewritten(s, mapping, cut, path) for s in b.subsymbols],
    )


def swap(x: Any, mapping: dict[str, Proxy]) -> Any:
    """`x` with every proxy replaced by `mapping[proxy.name]` where it has one."""
    return map_proxies(x, lambda p: mapping.get(p.name, p))


def map_proxies(x: Any, fn: Callable[[Proxy], Any]) -> Any:
    """`pytree.tree_map` of `fn` over the proxies among `x`'s leaves (in pytree's order),
    walking the containers torch passes by hand."""
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
    if isinstance(x, (tuple, list, dict)):  # namedtuples, return types: as rename does
        return pytree.tree_map(lambda y: fn(y) if isinstance(y, Proxy) else y, x)
    return x


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
