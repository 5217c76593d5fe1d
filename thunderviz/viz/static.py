"""Static pictures of a view document: SVG / PNG laid out by Graphviz `dot`.

For outputs without a kernel (a saved notebook, `make demo`): the collapsed module view, as
the browser opens it. Modules are opened breadth-first, one whole depth at a time, while the
picture stays small (`collapse_above` nodes; so 12 GPT blocks look alike: all open or all
shut, and a 12-layer GPT reads embeddings -> 12 blocks -> head -> loss), and never beyond
`max_nodes`; a module whose subtree holds a single op is drawn as that op. Parameters and
buffers are not drawn as nodes: each op lists how many it reads.

Every string from the document (module names, op labels, tensor names) is written into the
DOT source through `dot_quote` only: a double-quoted DOT string with backslashes, quotes,
`&` and control characters escaped, so no user text can end the string, start an HTML-like
label, or use DOT's `\\N`-style escapes. The SVG Graphviz makes from it holds that text only
as XML character data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import graphviz

from thunderviz.viz.protocol import DEFAULT_LIMITS, module_id

__all__ = ["static_svg", "static_png", "static_dot", "dot_quote", "visible_graph"]


def dot_quote(text: Any) -> str:
    """`text` as a DOT double-quoted string that shows exactly `text`."""
    s = str(text)
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "&":
            out.append("&amp;")  # Graphviz would read "&lt;" as an entity
        elif ch == "\n":
            out.append("\\n")
        elif ord(ch) < 32 or ord(ch) == 127 or 0xD800 <= ord(ch) <= 0xDFFF or ch in "\ufffe\uffff":
            out.append(" ")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


# Graphviz refuses a quoted string longer than 16384 bytes; a label is for reading anyway.
_LABEL_CHARS = 200


def _shorten(text: Any) -> str:
    s = str(text)
    return s if len(s) <= _LABEL_CHARS else s[: _LABEL_CHARS - 1] + "…"


def _label(*lines: Any) -> str:
    """Several lines of user text as one quoted DOT label (each line escaped and shortened)."""
    inner = [dot_quote(_shorten(line))[1:-1] for line in lines if line is not None and line != ""]
    return '"' + "\\n".join(inner) + '"'


# The viewer's limits (one set: viz/protocol.py), so the picture is the browser's first view.
_MAX_NODES, _COLLAPSE_ABOVE = DEFAULT_LIMITS["maxNodes"], DEFAULT_LIMITS["collapseAbove"]


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
class _Cluster:
    label: str
    nodes: list[str] = field(default_factory=list)
    clusters: list[_Cluster] = field(default_factory=list)


@dataclass
class VisibleGraph:
    nodes: dict[str, dict[str, Any]]
    edges: list[tuple[str, str, list[str]]]
    root: _Cluster
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


# Over the complexity limit (34): left as it is until it shares the viewer's collapse logic.
def visible_graph(  # noqa: C901
    document: Mapping[str, Any],
    trace_kind: str = "forward",
    max_nodes: int = _MAX_NODES,
    collapse_above: int = _COLLAPSE_ABOVE,
) -> VisibleGraph:
    """The collapsed module view of one trace of a document (what `static_svg` draws):
    module depths open breadth-first while at most `collapse_above` nodes show, and never
    more than `max_nodes` (the ops past that, in a flat program, become one "… more" node)."""
    if max_nodes < 1:
        raise ValueError(f"max_nodes must be at least 1, got {max_nodes}")
    ix = _Index(document, trace_kind)
    expanded = fit_expanded(ix, default_expanded(ix, min(collapse_above, max_nodes)), max_nodes)
    budget = [max_nodes]
    hidden = [0]
    nodes: dict[str, dict[str, Any]] = {}
    owner: dict[str, str] = {}
    root = _Cluster("")

    def add(cluster: _Cluster, key: str, **attrs: Any) -> None:
        nodes[key] = attrs
        cluster.nodes.append(key)

    def emit_op(cluster: _Cluster, oid: str) -> None:
        if budget[0] <= 0:
            hidden[0] += 1
            return
        budget[0] -= 1
        op = ix.ops[oid]
        add(
            cluster,
            oid,
            type="op",
            label=str(op.get("label") or op.get("name") or oid),
            module=ix.module_of.get(oid, ""),
            prim=bool(op.get("is_prim")),
            params=set(),
        )
        for d in ix.descendants(oid):
            owner[d] = oid

    def emit_module(cluster: _Cluster, path: str) -> None:
        for kind, value in ix.entries(path):
            if kind == "op":
                emit_op(cluster, value)
            elif ix.trivial(value):
                for o in ix.top_ops(value):
                    emit_op(cluster, o)
            elif value in expanded:
                sub = _Cluster(value)
                cluster.clusters.append(sub)
                emit_module(sub, value)
            elif budget[0] <= 0:
                hidden[0] += ix.modules[value].total
            else:
                budget[0] -= 1
                key = module_id(value)
                add(
                    cluster,
                    key,
                    type="module",
                    label=value,
                    count=ix.modules[value].total,
                    params=set(),
                )
                for top in ix.top_ops(value):
                    for d in ix.descendants(top):
                        owner[d] = key

    emit_module(root, "")
    if hidden[0]:
        add(root, "more:", type="more", label=f"… {hidden[0]} more ops not drawn")
    edges: dict[tuple[str, str], list[str]] = {}

    def edge(a: str, b: str, tensor: str) -> None:
        names = edges.setdefault((a, b), [])
        if tensor not in names:
            names.append(tensor)

    inputs = [n for n in ix.trace.get("inputs", []) or [] if isinstance(n, str)]
    input_set = set(inputs)
    used_inputs: dict[str, set[str]] = {}
    for oid, op in ix.ops.items():
        to = owner.get(oid)
        if to is None:
            continue
        for name in op.get("inputs", []) or []:
            t = ix.tensors.get(name) or {}
            if t.get("kind") == "number":
                continue
            if t.get("kind") in ("param", "buffer"):
                nodes[to]["params"].add(name)
                continue
            prod = ix.producer.get(name)
            if prod is not None:
                frm = owner.get(prod)
                if frm is not None and frm != to:
                    edge(frm, to, name)
            elif name in input_set or t.get("kind") == "input":
                used_inputs.setdefault(name, set()).add(to)
    if len(used_inputs) > DEFAULT_LIMITS["maxInputNodes"]:
        add(root, "inputs:", type="inputs", label=f"inputs ({len(used_inputs)})")
        for name, tos in used_inputs.items():
            for to in tos:
                edge("inputs:", to, name)
    else:
        for name, tos in used_inputs.items():
            add(root, "input:" + name, type="input", label=name)
            for to in tos:
                edge("input:" + name, to, name)
    outs = [n for n in ix.trace.get("outputs", []) or [] if n in ix.producer]
    if outs:
        add(root, "output:", type="output", label="return")
        for name in outs:
            frm = owner.get(ix.producer[name])
            if frm is not None:
                edge(frm, "output:", name)
    return VisibleGraph(nodes, [(a, b, t) for (a, b), t in edges.items()], root, expanded)


# --- DOT ----------------------------------------------------------------------------------
_STYLE = {
    "op": 'shape=box style="rounded,filled" fillcolor="#eef3fb" color="#4a6fa5"',
    "prim": 'shape=box style="rounded,filled" fillcolor="#f4f4f4" color="#888888"',
    "module": 'shape=box3d style=filled fillcolor="#fff4d6" color="#b08800"',
    "input": 'shape=ellipse style=filled fillcolor="#e8f5e9" color="#2e7d32"',
    "inputs": 'shape=ellipse style=filled fillcolor="#e8f5e9" color="#2e7d32"',
    "output": 'shape=doublecircle style=filled fillcolor="#fde0dc" color="#c62828"',
    "more": 'shape=note style=filled fillcolor="#eeeeee" color="#999999"',
}


def _tensor_text(tensors: Mapping[str, Any], name: str) -> str:
    t = tensors.get(name) or {}
    shape = t.get("shape")
    if isinstance(shape, list):
        return f"{name} [{', '.join(str(s) for s in shape)}]"
    return name


def static_dot(
    document: Mapping[str, Any],
    trace_kind: str = "forward",
    max_nodes: int = _MAX_NODES,
    collapse_above: int = _COLLAPSE_ABOVE,
) -> str:
    """The DOT source of the static picture (every user string through `dot_quote`)."""
    g = visible_graph(document, trace_kind, max_nodes, collapse_above)
    tensors = (document.get("traces") or {}).get(trace_kind, {}).get("tensors") or {}
    ids = {key: f"n{i}" for i, key in enumerate(g.nodes)}
    lines = [
        "digraph G {",
        '  graph [rankdir=TB fontname="Helvetica" fontsize=11 nodesep=0.25 ranksep=0.35];',
        '  node [fontname="Helvetica" fontsize=10 height=0.3];',
        '  edge [fontname="Helvetica" fontsize=8 color="#777777" arrowsize=0.6];',
    ]
    title = document.get("title")
    if title:
        lines.append(f"  label={_label(f'{title} — {trace_kind}')} labelloc=t;")
    counter = [0]

    def node_line(key: str, pad: str) -> str:
        n = g.nodes[key]
        kind = n["type"]
        if kind == "op":
            extra = f"{len(n['params'])} params" if n["params"] else None
            label = _label(n["label"], extra)
            style = _STYLE["prim" if n.get("prim") else "op"]
        elif kind == "module":
            extra = f"{len(n['params'])} params" if n["params"] else None
            label = _label(n["label"], f"{n['count']} ops", extra)
            style = _STYLE["module"]
        elif kind == "input":
            label = _label(_tensor_text(tensors, n["label"]))
            style = _STYLE["input"]
        else:
            label = _label(n["label"])
            style = _STYLE.get(kind, _STYLE["op"])
        return f"{pad}{ids[key]} [label={label} {style}];"

    def cluster_lines(c: _Cluster, pad: str) -> None:
        for key in c.nodes:
            lines.append(node_line(key, pad))
        for sub in c.clusters:
            counter[0] += 1
            lines.append(f"{pad}subgraph cluster_{counter[0]} {{")
            lines.append(
                f'{pad}  label={_label(sub.label)} style="rounded,dashed" color="#b08800" '
                "fontsize=10;"
            )
            cluster_lines(sub, pad + "  ")
            lines.append(f"{pad}}}")

    cluster_lines(g.root, "  ")
    for a, b, names in g.edges:
        text = (
            _tensor_text(tensors, names[0]) if len(names) == 1 else f"{names[0]} +{len(names) - 1}"
        )
        lines.append(f"  {ids[a]} -> {ids[b]} [label={_label(text)}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _render(dot: str, fmt: str) -> bytes:
    try:
        return graphviz.pipe("dot", fmt, dot.encode("utf-8"))
    except graphviz.ExecutableNotFound as e:
        raise RuntimeError(
            "static pictures need Graphviz's `dot` program: install graphviz "
            "(apt-get install graphviz, brew install graphviz, conda install graphviz)"
        ) from e
    except graphviz.CalledProcessError as e:  # a picture is a convenience: say why, never crash
        raise RuntimeError(f"Graphviz could not draw this trace: {e.stderr!r:.300}") from e


def static_svg(
    document: Mapping[str, Any],
    trace_kind: str = "forward",
    max_nodes: int = _MAX_NODES,
    collapse_above: int = _COLLAPSE_ABOVE,
) -> str:
    """An SVG picture of one trace of a view document (the collapsed module view; see
    `visible_graph` for how much of it is open)."""
    return _render(static_dot(document, trace_kind, max_nodes, collapse_above), "svg").decode(
        "utf-8"
    )


def static_png(
    document: Mapping[str, Any],
    trace_kind: str = "forward",
    max_nodes: int = _MAX_NODES,
    collapse_above: int = _COLLAPSE_ABOVE,
) -> bytes:
    """The same picture as PNG bytes (`dot -Tpng`)."""
    return _render(static_dot(document, trace_kind, max_nodes, collapse_above), "png")
