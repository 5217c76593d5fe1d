"""The collapse golden (frontend/test/fixtures/collapse_golden.json), shared with
frontend/test/collapse_golden.test.js: the static picture opens the document as the viewer
does, with the same limits."""

from __future__ import annotations

import json
from pathlib import Path

from thunderviz.viz.static import visible_graph
from thunderviz.viz.tvz import validate

GOLDEN = (
    Path(__file__).resolve().parents[2] / "frontend" / "test" / "fixtures" / "collapse_golden.json"
)


def test_the_static_picture_opens_the_golden_document_as_the_viewer_does():
    golden = json.loads(GOLDEN.read_text())
    validate(golden["document"])
    graph = visible_graph(golden["document"], "forward")
    shown = [key for key, node in graph.nodes.items() if node["type"] in ("op", "module")]
    assert sorted(graph.expanded) == sorted(golden["expected"]["expanded"])
    assert sorted(shown) == sorted(golden["expected"]["nodes"])
