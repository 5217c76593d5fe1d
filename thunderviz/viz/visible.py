"""The visible graph of a view document, as the browser viewer opens it (the Python twin of
frontend/src/visible.js, for the static pictures): the collapsed module view of one trace.

Modules are opened breadth-first, one whole depth at a time, while the picture stays small
(`collapse_above` nodes; so 12 GPT blocks look alike: all open or all shut, and a 12-layer
GPT reads embeddings -> 12 blocks -> head -> loss), and never beyond `max_nodes`; a module
whose subtree holds a single op is drawn as that op. Parameters and buffers are not drawn as
nodes: each op lists how many it reads. The limits are the viewer's
(`protocol.DEFAULT_LIMITS`); frontend/test/fixtures/collapse_golden.json and
view_golden.json are checked against both implementations.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from thunderviz.viz.protocol import DEFAULT_LIMITS, module_id

__all__ = [
    "COLLAPSE_ABOVE",
    "MAX_NODES",
    "Cluster",
    "VisibleGraph",
    "default_expanded",
    "fit_expanded",
    "visible_graph",
]

# The viewer's limits (one set: viz/protocol.py), so the picture is the browser's first view.
MAX_NODES, COLLAPSE_ABOVE = DEFAULT_LIMITS["maxNodes"], DEFAULT_LIMITS["collapseAbove"]


# --- the module tree ----------------------------------------------------------------------
@dataclass
class _Module:
    path: str
    children: list[str] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)
    first: int = 1 << 60
    total: int = 0


def _parent(path: str) -> str:
    return path.rsplit(".", 1)[0] if "." in path else ""


class _Index:
    def __init__(self, doc: Mapping[str, Any], kind: str) -> None:
        traces = doc.get("traces") or {}
        if kind not in traces:
            raise ValueError(f"the document has no {kind!r} trace; it has {sorted(traces)}")
        self.trace = traces[kind]
        self.kind = kind
        self.ops: dict[str, Mapping[str, Any]] = {}
        self.children: dict[str, list[str]] = {}
        self.top: list[str] = []
        self.position: dict[str, int] = {}
        all_ops = {op["id"]: op for t in traces.values() for op in t.get("ops", [])}
        for op in self.trace.get("ops", []):
            oid = op["id"]
            self.ops[oid] = op
            self.position[oid] = len(self.position)
            parent = op.get("parent")
            if parent is not None and parent in self.ops:
                self.children.setdefault(parent, []).append(oid)
            else:
                self.top.append(oid)
        self.tensors: Mapping[str, Any] = self.trace.get("tensors") or {}
        self.modules: dict[str, _Module] = {"": _Module("")}
        self.module_of: dict[str, str] = {}
        for oid in self.top:
            op = self.ops[oid]
            path = str(op.get("module_path") or "")
            if not path and op.get("fwd_op") in all_ops:
                path = str(all_ops[op["fwd_op"]].get("module_path") or "")
            self.module_of[oid] = path
            self._ensure(path).ops.append(oid)
            prefixes = (
                [""] + [".".join(path.split(".")[: i + 1]) for i in range(len(path.split(".")))]
                if path
                else [""]
            )
            for p in prefixes:
                m = self.modules[p]
                m.total += 1
                m.first = min(m.first, self.position[oid])
        for m in self.modules.values():
            m.children.sort(key=lambda c: self.modules[c].first)
        # deepest producer of each tensor (edges attach to whatever of them is visible)
        self.producer: dict[str, str] = {}
        depth: dict[str, int] = {}
        for oid, op in self.ops.items():
            parent = op.get("parent")
            depth[oid] = depth.get(parent, -1) + 1 if parent in self.ops else 0
            for name in op.get("outputs", []) or []:
                known = self.producer.get(name)
                if known is None or depth[oid] > depth[known]:
                    self.producer[name] = oid

    def _ensure(self, path: str) -> _Module:
        m = self.modules.get(path)
        if m is None:
            m = self.modules[path] = _Module(path)
            if path:
                self._ensure(_parent(path)).children.append(path)
        return m

    def trivial(self, path: str) -> bool:
        return self.modules[path].total <= 1

    def entries(self, path: str) -> list[tuple[str, str]]:
        """("op", id) and ("module", path) entries of a module, in order of first use."""
        m = self.modules[path]
        items = [(self.position[o], "op", o) for o in m.ops]
        items += [(self.modules[c].first, "module", c) for c in m.children]
        return [(k, v) for _, k, v in sorted(items)]

    def top_ops(self, path: str) -> list[str]:
        out: list[str] = []
        stack = [path]
        while stack:
            m = self.modules[stack.pop()]
            out.extend(m.ops)
            stack.extend(m.children)
        return out

    def descendants(self, oid: str) -> list[str]:
        out, stack = [], [oid]
        while stack:
            cur = stack.pop()
            out.append(cur)
            stack.extend(self.children.get(cur, []))
        return out


def _count(ix: _Index, expanded: set[str], path: str = "") -> int:
    n = 0
    for kind, value in ix.entries(path):
        if kind == "op":
            n += 1
        elif ix.trivial(value):
            n += len(ix.top_ops(value))
        else:
            n += _count(ix, expanded, value) if value in expanded else 1
    return n


def default_expanded(ix: _Index, limit: int) -> set[str]:
    """Open the module tree a whole depth at a time while at most `limit` nodes show."""

    def openable(path: str) -> list[str]:
        return [c for c in ix.modules[path].children if not ix.trivial(c)]

    expanded: set[str] = set()
    frontier = openable("")
    while frontier:
        candidate = expanded | set(frontier)
        if _count(ix, candidate) > limit:
            break
        expanded = candidate
        frontier = [c for p in frontier for c in openable(p)]
    return expanded


# --- the visible graph --------------------------------------------------------------------
@dataclass
class Cluster:
    label: str
    nodes: list[str] = field(default_factory=list)
    clusters: list[Cluster] = field(default_factory=list)


@dataclass
class VisibleGraph:
    nodes: dict[str, dict[str, Any]]
    edges: list[tuple[str, str, list[str]]]
    root: Cluster
    expanded: set[str]


def _module_depth(path: str) -> int:
    return len(path.split(".")) if path else 0


def fit_expanded(ix: _Index, expanded: set[str], max_nodes: int) -> set[str]:
    """Close the deepest open modules until at most `max_nodes` nodes show."""
    current = set(expanded)
    while current and _count(ix, current) > max_nodes:
        deepest = max(_module_depth(p) for p in current)
        current = {p for p in current if _module_depth(p) != deepest}
    return current


class _Drawing:
    """The visible nodes of one trace's collapsed module view, then its edges, graph inputs
    and return node: what the viewer's `buildVisibleGraph` (frontend/src/visible.js) draws
    for the same expansion, without the backward's saved-tensor stubs."""

    def __init__(self, ix: _Index, expanded: set[str], max_nodes: int) -> None:
        self.ix = ix
        self.expanded = expanded
        self.budget = max_nodes
        self.hidden = 0  # ops past `max_nodes`, drawn as one "… more" node
        self.nodes: dict[str, dict[str, Any]] = {}
        self.owner: dict[str, str] = {}  # every op id (all levels) -> the node drawing it
        self.root = Cluster("")
        self.edges: dict[tuple[str, str], list[str]] = {}

    def add(self, cluster: Cluster, key: str, **attrs: Any) -> None:
        self.nodes[key] = attrs
        cluster.nodes.append(key)

    def op(self, cluster: Cluster, oid: str) -> None:
        if self.budget <= 0:
            self.hidden += 1
            return
        self.budget -= 1
        op = self.ix.ops[oid]
        label = str(op.get("label") or op.get("name") or oid)
        module = self.ix.module_of.get(oid, "")
        prim = bool(op.get("is_prim"))
        self.add(cluster, oid, type="op", label=label, module=module, prim=prim, params=set())
        for d in self.ix.descendants(oid):
            self.owner[d] = oid

    def closed_module(self, cluster: Cluster, path: str) -> None:
        total = self.ix.modules[path].total
        if self.budget <= 0:
            self.hidden += total
            return
        self.budget -= 1
        key = module_id(path)
        self.add(cluster, key, type="module", label=path, count=total, params=set())
        for top in self.ix.top_ops(path):
            for d in self.ix.descendants(top):
                self.owner[d] = key

    def module(self, cluster: Cluster, path: str) -> None:
        for kind, value in self.ix.entries(path):
            if kind == "op":
                self.op(cluster, value)
            elif self.ix.trivial(value):
                for o in self.ix.top_ops(value):
                    self.op(cluster, o)
            elif value in self.expanded:
                sub = Cluster(value)
                cluster.clusters.append(sub)
                self.module(sub, value)
            else:
                self.closed_module(cluster, value)

    def edge(self, a: str, b: str, tensor: str) -> None:
        names = self.edges.setdefault((a, b), [])
        if tensor not in names:
            names.append(tensor)

    def connect(self) -> dict[str, list[str]]:
        """Edges between drawn nodes and each node's parameters; returns the graph inputs
        read, each with the nodes reading it (first use first)."""
        ix = self.ix
        inputs = {n for n in ix.trace.get("inputs", []) or [] if isinstance(n, str)}
        used: dict[str, list[str]] = {}
        for oid, op in ix.ops.items():
            to = self.owner.get(oid)
            if to is None:
                continue
            for name in op.get("inputs", []) or []:
                t = ix.tensors.get(name) or {}
                prod = ix.producer.get(name)
                if t.get("kind") == "number":
                    continue
                if t.get("kind") in ("param", "buffer"):
                    self.nodes[to]["params"].add(name)
                elif prod is not None:
                    frm = self.owner.get(prod)
                    if frm is not None and frm != to:
                        self.edge(frm, to, name)
                elif (name in inputs or t.get("kind") == "input") and to not in used.get(name, ()):
                    used.setdefault(name, []).append(to)
        return used

    def graph_inputs(self, used: dict[str, list[str]]) -> None:
        """One node per graph input, or one "inputs (n)" node for more than the limit."""
        many = len(used) > DEFAULT_LIMITS["maxInputNodes"]
        if many:
            self.add(self.root, "inputs:", type="inputs", label=f"inputs ({len(used)})")
        for name, readers in used.items():
            key = "inputs:" if many else "input:" + name
            if not many:
                self.add(self.root, key, type="input", label=name)
            for to in readers:
                self.edge(key, to, name)

    def graph_outputs(self) -> None:
        """A "return" node, unless the outputs come from more than `maxOutputSources`
        nodes: then each of those counts what it returns."""
        sources: dict[str, list[str]] = {}
        for name in self.ix.trace.get("outputs", []) or []:
            frm = self.owner.get(self.ix.producer.get(name, ""))
            if frm is not None:
                sources.setdefault(frm, []).append(name)
        if len(sources) > DEFAULT_LIMITS["maxOutputSources"]:
            for frm, names in sources.items():
                self.nodes[frm]["returns"] = names
        elif sources:
            self.add(self.root, "output:", type="output", label="return")
            for frm, names in sources.items():
                for name in names:
                    self.edge(frm, "output:", name)


def visible_graph(
    document: Mapping[str, Any],
    trace_kind: str = "forward",
    max_nodes: int = MAX_NODES,
    collapse_above: int = COLLAPSE_ABOVE,
) -> VisibleGraph:
    """The collapsed module view of one trace of a document (what `static_svg` draws):
    module depths open breadth-first while at most `collapse_above` nodes show, and never
    more than `max_nodes` (the ops past that, in a flat program, become one "… more" node)."""
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
    ix = _Index(document, trace_kind)
    expanded = fit_expanded(ix, default_expanded(ix, min(collapse_above, max_nodes)), max_nodes)
    drawing = _Drawing(ix, expanded, max_nodes)
    drawing.module(drawing.root, "")
    if drawing.hidden:
        label = f"… {drawing.hidden} more ops not drawn"
        drawing.add(drawing.root, "more:", type="more", label=label)
    drawing.graph_inputs(drawing.connect())
    drawing.graph_outputs()
    edges = [(a, b, t) for (a, b), t in drawing.edges.items()]
    return VisibleGraph(drawing.nodes, edges, drawing.root, expanded)
