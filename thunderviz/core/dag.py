"""Dependency graphs over bound symbols: producers, consumers, DAG nodes and toposort.

The graph views and the passes walk traces through these, never through ad-hoc loops.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from thunderviz.core.proxies import Proxy
from thunderviz.core.symbol import BoundSymbol

__all__ = [
    "Node",
    "TOPOSORT_ORDER",
    "producers",
    "consumers",
    "bsym_list_to_dag",
    "toposort_bsym_dag",
    "is_valid_order",
]


def producers(bsyms: Iterable[BoundSymbol]) -> dict[str, BoundSymbol]:
    """Proxy name -> the bound symbol that produces it (the first one, if several)."""
    out: dict[str, BoundSymbol] = {}
    for bsym in bsyms:
        for p in bsym.flat_proxy_outs:
            out.setdefault(p.name, bsym)
    return out


def consumers(bsyms: Iterable[BoundSymbol]) -> dict[str, list[BoundSymbol]]:
    """Proxy name -> the bound symbols that read it, in order."""
    out: dict[str, list[BoundSymbol]] = {}
    for bsym in bsyms:
        for p in bsym.flat_proxy_args:
            out.setdefault(p.name, []).append(bsym)
    return out


@dataclass(eq=False)
class Node:
    """One bound symbol in a DAG, with the nodes it depends on and that depend on it."""

    bsym: BoundSymbol
    index: int
    parents: list[Node] = field(default_factory=list)
    children: list[Node] = field(default_factory=list)

    def __repr__(self) -> str:
        return f"Node({self.index}: {self.bsym.sym.id})"


def bsym_list_to_dag(bsyms: Sequence[BoundSymbol]) -> tuple[list[Node], list[Node]]:
    """Build the dependency DAG. Returns (roots, leaves): nodes with no parents / children.

    An edge a -> b exists when b reads a proxy that a produces. A bound symbol that produces
    nothing (e.g. a write-back epilogue) is kept after everything it reads.
    """
    nodes = [Node(b, i) for i, b in enumerate(bsyms)]
    made_by: dict[str, Node] = {}
    for node in nodes:
        seen: set[int] = set()
        for p in node.bsym.flat_proxy_args:
            parent = made_by.get(p.name)
            if parent is not None and parent.index not in seen:
                seen.add(parent.index)
                parent.children.append(node)
                node.parents.append(parent)
        for p in node.bsym.flat_proxy_outs:
            made_by.setdefault(p.name, node)
    roots = [n for n in nodes if not n.parents]
    leaves = [n for n in nodes if not n.children]
    return roots, leaves


class TOPOSORT_ORDER(enum.Enum):
    TOP_DOWN = "TOP_DOWN"  # from inputs to outputs
    BOTTOM_UP = "BOTTOM_UP"  # from outputs to inputs (the order a backward sweep visits)


Selector = Callable[[list[Node]], Node]


def toposort_bsym_dag(
    bsyms: Sequence[BoundSymbol],
    order: TOPOSORT_ORDER = TOPOSORT_ORDER.TOP_DOWN,
    selector: Selector | None = None,
) -> list[BoundSymbol]:
    """A topological order of `bsyms`. `selector` picks which ready node goes next (default:
    the earliest in the original order, so the sort is stable). BOTTOM_UP returns the order
    read from the outputs back, i.e. every consumer before its producers."""
    roots, leaves = bsym_list_to_dag(bsyms)
    top_down = order is TOPOSORT_ORDER.TOP_DOWN
    ready_of = (lambda n: n.children) if top_down else (lambda n: n.parents)
    waiting_on = {
        id(n): len(n.parents if top_down else n.children) for n in _all_nodes(roots, leaves)
    }
    start = roots if top_down else leaves
    out: list[BoundSymbol] = []
    if selector is None:
        key = (lambda n: n.index) if top_down else (lambda n: -n.index)
        heap = [(key(n), n.index, n) for n in start]
        heapq.heapify(heap)
        while heap:
            _, _, node = heapq.heappop(heap)
            out.append(node.bsym)
            for nxt in ready_of(node):
                waiting_on[id(nxt)] -= 1
                if waiting_on[id(nxt)] == 0:
                    heapq.heappush(heap, (key(nxt), nxt.index, nxt))
        return out
    ready = list(start)
    while ready:
        node = selector(ready)
        ready.remove(node)
        out.append(node.bsym)
        for nxt in ready_of(node):
            waiting_on[id(nxt)] -= 1
            if waiting_on[id(nxt)] == 0:
                ready.append(nxt)
    return out


def _all_nodes(roots: list[Node], leaves: list[Node]) -> list[Node]:
    seen: dict[int, Node] = {}
    stack = [*roots, *leaves]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen[id(n)] = n
        stack.extend(n.children)
        stack.extend(n.parents)
    return list(seen.values())


def is_valid_order(bsyms: Sequence[BoundSymbol], available: Iterable[Proxy | str]) -> bool:
    """True when every bound symbol reads only proxies available before it."""
    have = {p if isinstance(p, str) else p.name for p in available}
    for bsym in bsyms:
        if any(p.name not in have for p in bsym.flat_proxy_args):
            return False
        have.update(p.name for p in bsym.flat_proxy_outs)
    return True
