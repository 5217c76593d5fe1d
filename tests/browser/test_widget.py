"""The debugger widget in a real JupyterLab with a real kernel and Chromium.

What a user does: open the quickstart notebook, run it, click a forward op in the `%thunder`
debugger and see its details and the backward ops its grad rule made; ask Python what is
selected; step the backward from the browser; collapse and expand a module; save the
notebook and reopen it later without the widget's kernel state and still see the view. And a
model whose module name is markup shows that name as text, running nothing.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from lab_server import click_node, toggle
from playwright.sync_api import expect

pytestmark = pytest.mark.browser

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EVIL = "<img src=x onerror=alert(1)>"
TIMEOUT = 60_000

GRAPH_READY = '.tv-graph-pane[data-tv-ready="true"]'


# -- driving a notebook ---------------------------------------------------------------------


def run_all(page) -> None:
    """Run every cell of the current notebook and wait until the kernel is done."""
    page.evaluate(
        "async () => { await window.jupyterapp.commands.execute('notebook:run-all-cells'); }"
    )
    wait_idle(page)


def wait_idle(page) -> None:
    page.wait_for_function(
        """() => {
            const nb = window.jupyterapp.shell.currentWidget;
            const kernel = nb.sessionContext.session && nb.sessionContext.session.kernel;
            if (!kernel || kernel.status !== 'idle') return false;
            const cells = nb.content.model.cells;
            for (let i = 0; i < cells.length; i++) {
                const c = cells.get(i);
                if (c.type === 'code' && c.sharedModel.getSource().trim() && c.executionCount == null) return false;
            }
            return true;
        }""",
        timeout=TIMEOUT * 3,
    )


def run_cell(page, source: str) -> str:
    """Append a code cell with `source`, run it, return the text of its outputs."""
    index = page.evaluate(
        """async (source) => {
            const app = window.jupyterapp;
            const notebook = app.shell.currentWidget.content;
            notebook.activeCellIndex = notebook.widgets.length - 1;
            await app.commands.execute('notebook:insert-cell-below');
            notebook.activeCell.model.sharedModel.setSource(source);
            await app.commands.execute('notebook:run-cell');
            return notebook.activeCellIndex;
        }""",
        source,
    )
    wait_idle(page)
    return page.evaluate(
        """(index) => {
            const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
            return [...cell.node.querySelectorAll('.jp-OutputArea-output')].map(o => o.textContent).join('');
        }""",
        index,
    )


def python(page, source: str):
    """Run `source` (which prints one JSON value last) in the kernel; return the value."""
    text = run_cell(page, source)
    lines = [line for line in text.strip().splitlines() if line.strip()]
    assert lines, f"no output from {source!r}"
    return json.loads(lines[-1])


def widget_output(panel):
    """The live widget's output (the one drawing the viewer, not the extension's twin)."""
    return (
        panel.locator(".jp-OutputArea-child")
        .filter(has=panel.page.locator(".tv-root"))
        .filter(has_not=panel.page.locator(".tv-jl-renderer"))
        .last
    )


def shot(lab_page, locator, tag: str) -> None:
    """A screenshot with `locator` scrolled into view (the notebook scrolls inside itself)."""
    locator.scroll_into_view_if_needed()
    lab_page.screenshot(tag)


def open_example(lab_page, lab_dir, name: str):
    folder, relative = lab_dir
    shutil.copy(EXAMPLES / name, folder / name)
    panel = lab_page.open(f"{relative}/{name}")
    lab_page.wait_for_kernel()
    return panel, f"{relative}/{name}"


def open_new_notebook(lab_page, lab_dir, name: str, source: str):
    """Write a notebook of one code cell `source` as `name` in the lab's folder, open it and
    wait for its kernel; the notebook panel."""
    folder, relative = lab_dir
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells.append(nbformat.v4.new_code_cell(source))
    nbformat.write(nb, str(folder / name))
    panel = lab_page.open(f"{relative}/{name}")
    lab_page.wait_for_kernel()
    return panel


# -- the tests ---------------------------------------------------------------------------------


def test_thunder_magic_in_jupyterlab(thunderviz_lab, lab_page, lab_dir):
    page = lab_page.page
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    panel, path = open_example(lab_page, lab_dir, "quickstart.ipynb")
    run_all(page)

    widget = widget_output(panel)
    expect(widget.locator(GRAPH_READY).first).to_be_visible(timeout=TIMEOUT)
    # the anywidget's bundle (loaded from a string) starts its layout worker too
    expect(widget.locator(GRAPH_READY).first).to_have_attribute("data-tv-layout-where", "worker")
    # The static twin (for readers without a kernel) is in the notebook but hidden while
    # the widget is live: the view shows once.
    twin = panel.locator('.jp-OutputArea-child[data-tv-twin-hidden="true"]')
    expect(twin).to_have_count(1)
    expect(twin).to_be_hidden()
    expect(widget.locator('button[data-tv-tab="forward_backward"]')).to_have_class(
        re.compile("tv-active")
    )

    # Start from a clean position (the notebook stepped and selected from Python).
    facts = python(
        page,
        "w.reset(); w.select(None)\nimport json\n"
        "print(json.dumps({'n': len(w.steps), 'linked': [o['id'] for o in "
        "w.document['traces']['backward']['ops'] if o['fwd_op'] == 'forward:2'], "
        "'name': w.document['traces']['forward']['ops'][0]['name']}))",
    )
    n, linked = facts["n"], set(facts["linked"])
    assert linked, facts
    expect(widget.locator(".tv-status")).to_contain_text(f"step 0 / {n}")

    # Click a forward op: details, and the backward ops its grad rule made light up.
    forward = widget.locator('.tv-graph-pane[data-tv-graph="forward"]')
    node = forward.locator('g.node[data-tv-id="forward:2"]')
    click_node(node)
    expect(node).to_have_class(re.compile(r"\btv-selected\b"), timeout=10_000)
    details = widget.locator(".tv-details")
    expect(details).to_contain_text("torch.nn.functional.linear")
    expect(details).to_contain_text("forward:2")
    backward = widget.locator('.tv-graph-pane[data-tv-graph="backward"]')
    lit = backward.locator("g.node.tv-highlight[data-tv-type='op']")
    expect(lit.first).to_be_visible()
    lit_ids = set(lit.evaluate_all("els => els.map(e => e.getAttribute('data-tv-id'))"))
    assert lit_ids and lit_ids <= linked, (lit_ids, linked)
    shot(lab_page, widget, "selected")

    # Python sees the real BoundSymbol the browser selected.
    assert python(page, "import json; print(json.dumps([w.selected.sym.id, w.selected_id]))") == [
        "torch.nn.functional.linear",
        "forward:2",
    ]

    # Step the backward three times from the browser: the kernel runs each op.
    step = widget.locator('[data-tv-action="step"]')
    for i in range(1, 4):
        step.click()
        expect(widget.locator(".tv-status")).to_contain_text(f"step {i} / {n}", timeout=15_000)
    current = backward.locator("g.node.tv-current-step")
    expect(current.first).to_have_attribute("data-tv-id", "backward:2")
    assert python(
        page,
        "import json; print(json.dumps([w.stepper.index, w.current_step, w.history[-1].op_id]))",
    ) == [3, 2, "backward:2"]
    shot(lab_page, widget, "stepped")

    # Collapse and expand a module; Python sees the expansion (what is open in any pane:
    # each pane has its own, so it is closed once both panes closed it).
    cluster = forward.locator('g.cluster[data-tv-id="module:block"]')
    expect(cluster).to_have_count(1)
    toggle(forward, "module:block")
    collapsed = forward.locator('g.node[data-tv-id="module:block"]')
    expect(collapsed).to_have_count(1, timeout=15_000)
    expect(collapsed).to_contain_text("block")
    backward = widget.locator('.tv-graph-pane[data-tv-graph="backward"]')
    expect(backward.locator('g.cluster[data-tv-id="module:block"]')).to_have_count(1)  # its own
    assert python(page, "import json; print(json.dumps('block' in w.expanded))") is True
    toggle(backward, "module:block")
    expect(backward.locator('g.node[data-tv-id="module:block"]')).to_have_count(1, timeout=15_000)
    assert python(page, "import json; print(json.dumps('block' in w.expanded))") is False
    toggle(forward, "module:block")
    expect(forward.locator('g.cluster[data-tv-id="module:block"]')).to_have_count(1, timeout=15_000)
    assert python(page, "import json; print(json.dumps('block' in w.expanded))") is True
    shot(lab_page, widget, "expanded")
    assert not dialogs
    assert not [e for e in lab_page.errors if e.startswith("uncaught")], lab_page.errors

    # Save, stop the kernel, reopen: the widget model is gone (ipywidgets says so), and the
    # static twin shows the view (the thunderviz extension draws it).
    page.evaluate("async () => { await window.jupyterapp.commands.execute('docmanager:save'); }")
    for session in thunderviz_lab.api("api/sessions"):
        if session["path"].endswith(path):
            thunderviz_lab.api(f"api/sessions/{session['id']}", method="DELETE")
    page.evaluate("async () => { await window.jupyterapp.shell.currentWidget.close(); }")
    reopened = lab_page.open(path)
    view = reopened.locator(".jp-OutputArea .tv-jl-renderer .tv-jl-viewer")
    expect(view.first).to_be_visible(timeout=TIMEOUT)
    expect(view.first.locator(GRAPH_READY).first).to_be_visible(timeout=TIMEOUT)
    click_node(view.first.locator('g.node[data-tv-id="forward:2"]'))
    expect(view.first.locator(".tv-details")).to_contain_text("forward:2")
    expect(reopened.locator(".jp-OutputArea-output.jupyter-widgets")).to_contain_text(
        "model not found"
    )
    shot(lab_page, view.first, "reopened")


HOSTILE = f"""\
%load_ext thunderviz.widgets
import torch
import torch.nn as nn

EVIL = {EVIL!r}


class Hostile(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(EVIL, nn.Sequential(nn.Linear(4, 4), nn.Tanh()))
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(getattr(self, EVIL)(x)).sum()


torch.manual_seed(0)
model = Hostile()
x = torch.randn(2, 4)
w = %thunder model(x)
w
"""


def test_a_hostile_module_name_shows_as_text_in_jupyterlab(thunderviz_lab, lab_page, lab_dir):
    page = lab_page.page
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    panel = open_new_notebook(lab_page, lab_dir, "hostile.ipynb", HOSTILE)
    run_all(page)

    widget = widget_output(panel)
    forward = widget.locator('.tv-graph-pane[data-tv-graph="forward"]')
    expect(forward).to_have_attribute("data-tv-ready", "true", timeout=TIMEOUT)
    label = forward.locator(f'g.cluster[data-tv-id="module:{EVIL}"] > text')
    expect(label).to_contain_text(EVIL)  # the name, as text
    box = label.bounding_box()  # click the name, not its ▾ glyph: selects the module
    label.click(position={"x": box["width"] - 4, "y": box["height"] / 2})
    expect(widget.locator(".tv-details h3")).to_have_text(EVIL)
    page.wait_for_timeout(500)  # an onerror handler would have fired by now
    assert not dialogs, dialogs
    assert page.evaluate("() => document.querySelectorAll('img[src=\"x\"]').length") == 0
    shot(lab_page, widget, "hostile")
    assert not [e for e in lab_page.errors if e.startswith("uncaught")], lab_page.errors
