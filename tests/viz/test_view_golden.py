"""The view golden (frontend/test/fixtures/view_golden.json), shared with
frontend/test/view_golden.test.js: the static pictures' visible graph (viz/visible.py) draws
each document as the viewer does: the same nodes, edges, graph inputs, return node and
counts, with the same limits."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from thunderviz.viz.static import PALETTE, static_dot
from thunderviz.viz.tvz import validate
from thunderviz.viz.visible import VisibleGraph, visible_graph

GOLDEN = Path(__file__).resolve().parents[2] / "frontend" / "test" / "fixtures" / "view_golden.json"
CASES = json.loads(GOLDEN.read_text())["cases"]


def _drawn(g: VisibleGraph) -> dict[str, Any]:
    """The static graph in the golden's terms (node ids of inputs and the return node differ
    per side)."""
    boxes = {k for k, n in g.nodes.items() if n["type"] in ("op", "module")}

    def tensors_from(frm: str) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for a, b, names in g.edges:
            for name in names if a == frm else ():
                out.setdefault(name, []).append(b)
        return out

    def listed(key: str) -> dict[str, list[str]]:
        return {k: sorted(n[key]) for k, n in g.nodes.items() if n.get(key)}

    inputs_node = g.nodes.get("inputs:")
    return {
        "nodes": sorted(boxes),
        "edges": [[a, b, names] for a, b, names in g.edges if a in boxes and b in boxes],
        "input_nodes": {
            n["label"]: [b for a, b, _ in g.edges if a == k]
            for k, n in g.nodes.items()
            if n["type"] == "input"
        },
        "inputs_node": {"label": inputs_node["label"], "tensors": tensors_from("inputs:")}
        if inputs_node
        else None,
        "return": {a: names for a, b, names in g.edges if b == "output:"}
        if "output:" in g.nodes
        else None,
        "returns": listed("returns"),
        "params": listed("params"),
    }


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_static_picture_draws_the_golden_document_as_the_viewer_does(case):
    validate(case["document"])
    g = visible_graph(case["document"], "forward")
    expected = dict(case["expected"])
    assert sorted(g.expanded) == sorted(expected.pop("expanded"))
    assert _drawn(g) == {**expected, "nodes": sorted(expected["nodes"])}


def _attr(line: str, name: str) -> str | None:
    m = re.search(rf'\s{name}=(?:"([^"]*)"|([^\s\]]+))', line)
    return m and (m.group(1) if m.group(1) is not None else m.group(2))


def test_the_static_picture_is_drawn_in_the_palette_the_viewer_is_checked_against():
    doc = copy.deepcopy(CASES[0]["document"])  # the chain: ops, an open module, inputs, return
    doc["traces"]["forward"]["ops"][0]["is_prim"] = True
    g = visible_graph(doc, "forward")
    lines = static_dot(doc).splitlines()
    types = set()
    for i, node in enumerate(g.nodes.values()):
        kind = "prim" if node.get("prim") else node["type"]
        line = next(line for line in lines if line.lstrip().startswith(f"n{i} ["))
        got = {k: _attr(line, a) for k, a in _NODE_ATTRS.items()}
        assert got == PALETTE["nodes"][kind], kind
        types.add(kind)
    assert types == {"op", "prim", "input", "output"}
    cluster = next(line for line in lines if "label=" in line and "fontsize=10;" in line)
    assert _attr(cluster, "color") == PALETTE["clusters"]["module"]["line"]
    edge = next(line for line in lines if line.lstrip().startswith("edge ["))
    assert (_attr(edge, "color"), _attr(edge, "fontcolor")) == tuple(PALETTE["edge"].values())


_NODE_ATTRS = {"shape": "shape", "style": "style", "fill": "fillcolor", "line": "color"}
