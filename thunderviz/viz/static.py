"""Static pictures of a view document: SVG / PNG laid out by Graphviz `dot`.

For outputs without a kernel (a saved notebook, `make demo`): the collapsed module view, as
the browser opens it (`visible.py`: the viewer's limits and collapse rules), in the viewer's
colours and shapes (`palette.json`).

Every string from the document (module names, op labels, tensor names) is written into the
DOT source through `dot_quote` only: a double-quoted DOT string with backslashes, quotes,
`&` and control characters escaped, so no user text can end the string, start an HTML-like
label, or use DOT's `\\N`-style escapes. The SVG Graphviz makes from it holds that text only
as XML character data.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import graphviz

from thunderviz.viz.visible import COLLAPSE_ABOVE, MAX_NODES, Cluster, visible_graph

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


# --- DOT ----------------------------------------------------------------------------------
# The viewer's colours and shapes (one set, read by the viewer's test too: see palette.json).
PALETTE: Mapping[str, Any] = json.loads(Path(__file__).with_name("palette.json").read_text())


def _node_style(entry: Mapping[str, str]) -> str:
    return (
        f'shape={entry["shape"]} style="{entry["style"]}" fillcolor="{entry["fill"]}" '
        f'color="{entry["line"]}"'
    )


_STYLE = {kind: _node_style(entry) for kind, entry in PALETTE["nodes"].items()}
# Only a static picture cuts a flat program short (the viewer collapses modules instead).
_STYLE["more"] = 'shape=note style=filled fillcolor="#eeeeee" color="#999999"'


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _notes(node: Mapping[str, Any]) -> str | None:
    """What a node reads or returns without drawn edges, as the viewer writes it."""
    notes = [_plural(len(node["params"]), "param")] if node.get("params") else []
    if node.get("returns"):
        notes.append(f"→ {len(node['returns'])} out")
    return " · ".join(notes) or None


def _tensor_text(tensors: Mapping[str, Any], name: str) -> str:
    t = tensors.get(name) or {}
    shape = t.get("shape")
    if isinstance(shape, list):
        return f"{name} [{', '.join(str(s) for s in shape)}]"
    return name


def static_dot(
    document: Mapping[str, Any],
    trace_kind: str = "forward",
    max_nodes: int = MAX_NODES,
    collapse_above: int = COLLAPSE_ABOVE,
) -> str:
    """The DOT source of the static picture (every user string through `dot_quote`)."""
    g = visible_graph(document, trace_kind, max_nodes, collapse_above)
    tensors = (document.get("traces") or {}).get(trace_kind, {}).get("tensors") or {}
    ids = {key: f"n{i}" for i, key in enumerate(g.nodes)}
    lines = [
        "digraph G {",
        '  graph [rankdir=TB fontname="Helvetica" fontsize=11 nodesep=0.25 ranksep=0.35];',
        '  node [fontname="Helvetica" fontsize=10 height=0.3];',
        '  edge [fontname="Helvetica" fontsize=8 arrowsize=0.6 '
        f'color="{PALETTE["edge"]["line"]}" fontcolor="{PALETTE["edge"]["text"]}"];',
    ]
    title = document.get("title")
    if title:
        lines.append(f"  label={_label(f'{title} — {trace_kind}')} labelloc=t;")
    counter = [0]

    def node_line(key: str, pad: str) -> str:
        n = g.nodes[key]
        kind = n["type"]
        if kind == "op":
            label = _label(n["label"], _notes(n))
            style = _STYLE["prim" if n.get("prim") else "op"]
        elif kind == "module":
            label = _label(n["label"], f"{n['count']} ops", _notes(n))
            style = _STYLE["module"]
        elif kind == "input":
            label = _label(_tensor_text(tensors, n["label"]))
            style = _STYLE["input"]
        else:
            label = _label(n["label"])
            style = _STYLE.get(kind, _STYLE["op"])
        return f"{pad}{ids[key]} [label={label} {style}];"

    def cluster_lines(c: Cluster, pad: str) -> None:
        for key in c.nodes:
            lines.append(node_line(key, pad))
        for sub in c.clusters:
            counter[0] += 1
            lines.append(f"{pad}subgraph cluster_{counter[0]} {{")
            cluster = PALETTE["clusters"]["module"]
            lines.append(
                f'{pad}  label={_label(sub.label)} style="{cluster["style"]}" '
                f'color="{cluster["line"]}" fontsize=10;'
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
    max_nodes: int = MAX_NODES,
    collapse_above: int = COLLAPSE_ABOVE,
) -> str:
    """An SVG picture of one trace of a view document (the collapsed module view; see
    `visible_graph` for how much of it is open)."""
    return _render(static_dot(document, trace_kind, max_nodes, collapse_above), "svg").decode(
        "utf-8"
    )


def static_png(
    document: Mapping[str, Any],
    trace_kind: str = "forward",
    max_nodes: int = MAX_NODES,
    collapse_above: int = COLLAPSE_ABOVE,
) -> bytes:
    """The same picture as PNG bytes (`dot -Tpng`)."""
    return _render(static_dot(document, trace_kind, max_nodes, collapse_above), "png")
