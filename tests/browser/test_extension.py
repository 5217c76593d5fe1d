"""The thunderviz JupyterLab extension in a real JupyterLab and a real Chromium.

What a user does: double-click a `.tvz` in the file browser and get the interactive viewer
(no kernel); reopen a saved notebook and see its thunderviz outputs as interactive views
without running anything; open a broken or too-new `.tvz` and read why it cannot be shown.
"""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

MIME_TYPE = "application/vnd.thunderviz.view+json"

# How the shared viewer (frontend/src) marks up what the tests look for.
GRAPH_READY = '.tv-graph-pane[data-tv-ready="true"]'  # a graph pane once laid out
GRAPH_NODE = "g.node[data-tv-id]"  # a graph node; data-tv-id holds the op (or module) id
SELECTED = "tv-selected"  # class of the selected node
DETAILS = ".tv-details"  # the panel that describes the selection

# The extension's own markup (extension/src/renderer.ts).
RENDERER = ".tv-jl-renderer"
VIEWER = ".tv-jl-renderer .tv-jl-viewer"
ERROR = ".tv-jl-renderer .tv-error"

VIEW_TIMEOUT_MS = 30_000


def top_level_ops(document: dict) -> list[dict]:
    """Top-level ops of the document's first trace (forward first when there is one)."""
    traces = document["traces"]
    trace = traces.get("forward") or next(iter(traces.values()))
    return [op for op in trace["ops"] if op["parent"] is None]


def click_an_op_and_check_details(container, document: dict) -> dict:
    """Click the graph node of one of the document's ops; check the details describe it."""
    expect(container.locator(GRAPH_READY).first).to_be_visible(timeout=VIEW_TIMEOUT_MS)
    # JupyterLab lets the layout run in its Web Worker (blob: URL), off the page's thread
    expect(container.locator(GRAPH_READY).first).to_have_attribute("data-tv-layout-where", "worker")
    nodes = container.locator(f"{GRAPH_READY} {GRAPH_NODE}")
    expect(nodes.first).to_be_visible()
    drawn = set(nodes.evaluate_all("els => els.map(e => e.getAttribute('data-tv-id'))"))
    ops = [op for op in top_level_ops(document) if op["id"] in drawn]
    assert ops, f"none of the document's top-level ops is drawn; drawn: {sorted(drawn)[:20]}"
    op = ops[len(ops) // 2]  # not the first one: the click must select what it hits

    node = container.locator(f'{GRAPH_NODE}[data-tv-id="{op["id"]}"]').first
    node.scroll_into_view_if_needed()
    node.click()
    expect(node).to_have_class(re.compile(rf"\b{SELECTED}\b"), timeout=5_000)
    details = container.locator(DETAILS)
    expect(details).to_be_visible()
    expect(details).to_contain_text(op["name"])
    expect(details).to_contain_text(op["id"])
    return op


def test_tvz_opens_in_the_viewer_from_the_file_browser(thunderviz_lab, lab_page, real_tvz):
    path, document = real_tvz

    panel = lab_page.open(path)

    widget = lab_page.current_widget()
    assert widget["defaultFactory"] == "thunderviz viewer", widget
    assert "jp-MimeDocument" in widget["contentClassName"], widget
    viewer = panel.locator(VIEWER)
    expect(viewer).to_be_visible(timeout=VIEW_TIMEOUT_MS)
    expect(panel.locator(ERROR)).to_have_count(0)
    box = viewer.bounding_box()
    assert box and box["width"] > 300 and box["height"] > 300, f"viewer squashed: {box}"

    click_an_op_and_check_details(viewer, document)
    lab_page.screenshot("viewer")

    # No kernel was needed, and none was started for the file.
    sessions = thunderviz_lab.api("api/sessions")
    assert not [s for s in sessions if s["path"] == path], sessions
    assert not lab_page.errors, lab_page.errors


def test_saved_notebook_shows_the_view_without_running(thunderviz_lab, lab_page, real_notebook):
    path, notebook = real_notebook
    outputs = [
        output
        for cell in notebook.cells
        for output in cell.get("outputs", [])
        if MIME_TYPE in output.get("data", {})
    ]
    assert outputs, "the executed notebook has no output with the thunderviz MIME type"
    document = outputs[0]["data"][MIME_TYPE]
    saved_counts = [cell.get("execution_count") for cell in notebook.cells]

    panel = lab_page.open(path)

    output = panel.locator(f".jp-OutputArea {VIEWER}")
    expect(output.first).to_be_visible(timeout=VIEW_TIMEOUT_MS)
    click_an_op_and_check_details(output.first, document)
    lab_page.screenshot("notebook")

    # Shown from the saved outputs: nothing ran, and the notebook is not trusted (nobody
    # signed it), so the renderer is one JupyterLab lets show untrusted outputs.
    state = lab_page.page.evaluate(
        """() => {
            const cells = window.jupyterapp.shell.currentWidget.content.model.cells;
            const out = [];
            for (let i = 0; i < cells.length; i++) {
                const cell = cells.get(i);
                out.push({count: cell.executionCount ?? null, trusted: cell.trusted});
            }
            return out;
        }"""
    )
    assert [cell["count"] for cell in state] == saved_counts
    assert not any(cell["trusted"] for cell in state)
    assert not lab_page.errors, lab_page.errors


NOT_JSON = '{"format": "thunderviz", "version": 1, "traces": {'  # cut off mid-file
NOT_THUNDERVIZ = json.dumps({"cells": [], "metadata": {}, "nbformat": 4})
NEWER_VERSION = json.dumps(
    {
        "format": "thunderviz",
        "version": 2,  # one past the format this viewer reads (docs/view-format.md: 1)
        "title": "from the future",
        "created_by": "thunderviz 9.0.0",
        "traces": {"forward": {"kind": "forward", "layout": "something new"}},
    }
)
DAMAGED = json.dumps({"format": "thunderviz", "version": 1, "title": "no traces"})


@pytest.mark.parametrize(
    ("name", "text", "title", "detail"),
    [
        ("not-json.tvz", NOT_JSON, "This is not a thunderviz view", "not valid JSON"),
        ("empty.tvz", "", "This is not a thunderviz view", "The file is empty"),
        (
            "not-thunderviz.tvz",
            NOT_THUNDERVIZ,
            "This is not a thunderviz view",
            'no "format" field',
        ),
        (
            "newer.tvz",
            NEWER_VERSION,
            "This view needs a newer thunderviz",
            "format version 2",
        ),
        ("damaged.tvz", DAMAGED, "This thunderviz view is damaged", ""),
    ],
    ids=["not-json", "empty", "not-thunderviz", "newer-version", "damaged"],
)
def test_bad_tvz_shows_a_clear_error_in_the_panel(
    thunderviz_lab, lab_page, lab_dir, name, text, title, detail
):
    folder, relative = lab_dir
    (folder / name).write_text(text, encoding="utf-8")

    panel = lab_page.open(f"{relative}/{name}")

    error = panel.locator(ERROR)
    expect(error).to_be_visible(timeout=VIEW_TIMEOUT_MS)
    expect(error).to_contain_text(title)
    expect(error).to_contain_text(detail)
    expect(panel.locator(VIEWER)).to_have_count(0)
    lab_page.screenshot()

    # The message is in the tab, which stays open; no dialog, nothing thrown in the page.
    assert lab_page.current_widget()["label"] == name
    expect(lab_page.page.locator(".jp-Dialog")).to_have_count(0)
    assert not [e for e in lab_page.errors if e.startswith("uncaught")], lab_page.errors
