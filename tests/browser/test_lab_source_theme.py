"""The viewer inside JupyterLab (the thunderviz extension, a real JupyterLab and Chromium):

- the source path in the details panel opens the file in JupyterLab's editor with the
  cursor on the op's line (the extension's open-source plugin);
- switching JupyterLab's theme keeps the selection, and the graph's colours follow it.
"""

from __future__ import annotations

import re

import pytest
from lab_server import click_node
from playwright.sync_api import expect

import thunderviz

pytestmark = pytest.mark.browser

TIMEOUT = 30_000
GRAPH_READY = '.tv-graph-pane[data-tv-graph="forward"][data-tv-ready="true"]'
SELECTED = re.compile(r"\btv-selected\b")


@pytest.fixture
def mlp_tvz(real_program_file, lab_dir):
    """The document of REAL_PROGRAM run from a file under the server root, saved as mlp.tvz:
    (its path relative to the root, the program file's, the program, the document read back)."""
    module, program_path, program = real_program_file
    folder, relative = lab_dir
    thunderviz.save(module.document, folder / "mlp.tvz")
    return f"{relative}/mlp.tvz", program_path, program, thunderviz.load(folder / "mlp.tvz")


def forward_op(document, name):
    ops = document["traces"]["forward"]["ops"]
    return next(op for op in ops if op["parent"] is None and op["name"] == name)


def select(viewer, op_id):
    node = viewer.locator(f'{GRAPH_READY} g.node[data-tv-id="{op_id}"]')
    click_node(node)
    expect(node).to_have_class(SELECTED, timeout=5_000)
    return node


def test_the_source_path_opens_the_file_at_its_line(thunderviz_lab, lab_page, mlp_tvz):
    path, program_path, program, document = mlp_tvz
    op = forward_op(document, "torch.tanh")
    code = next(c for c in program.splitlines() if "torch.tanh(" in c)
    line = program.splitlines().index(code) + 1
    assert op["source"]["line"] == line, op["source"]  # the recorded line, before the click
    panel = lab_page.open(path)
    viewer = panel.locator(".tv-jl-viewer")
    expect(viewer.locator(GRAPH_READY)).to_be_visible(timeout=TIMEOUT)
    select(viewer, op["id"])

    link = viewer.locator('.tv-details [data-tv-action="source-link"]')
    expect(link).to_have_text(re.compile(rf"real_program\.py:{line}$"))
    expect(link).to_have_attribute("title", re.compile(r"^Open "))
    link.click()

    page = lab_page.page
    page.wait_for_function(
        "path => window.jupyterapp.shell.currentWidget?.context?.path === path",
        arg=program_path,
        timeout=TIMEOUT,
    )
    editor = page.wait_for_function(
        """() => {
             const w = window.jupyterapp.shell.currentWidget;
             const editor = w.content && w.content.editor;
             return editor && editor.model.sharedModel.getSource().length > 0
               && {cursor: editor.getCursorPosition(), factory: w.content.constructor.name,
                   line: editor.getLine(editor.getCursorPosition().line)};
           }""",
        timeout=TIMEOUT,
    ).json_value()
    assert editor["cursor"] == {"line": line - 1, "column": 0}, editor
    assert editor["line"] == code, editor
    assert link.get_attribute("data-tv-copied") is None  # opened, not copied
    lab_page.screenshot("opened")


def test_switching_the_theme_keeps_the_selection_and_the_colours_follow(
    thunderviz_lab, lab_page, mlp_tvz
):
    path, _, _, document = mlp_tvz
    page = lab_page.page
    panel = lab_page.open(path)
    viewer = panel.locator(".tv-jl-viewer")
    expect(viewer.locator(GRAPH_READY)).to_be_visible(timeout=TIMEOUT)
    op = forward_op(document, "torch.tanh")
    node = select(viewer, op["id"])
    other = viewer.locator(f'{GRAPH_READY} g.node[data-tv-type="op"]:not(.tv-selected)').first

    def colours():
        return {
            "selected": node.locator("polygon, path, ellipse").first.evaluate(
                "e => getComputedStyle(e).fill"
            ),
            "other": other.locator("polygon, path, ellipse").first.evaluate(
                "e => getComputedStyle(e).fill"
            ),
            "text": viewer.locator(".tv-details").evaluate("e => getComputedStyle(e).color"),
        }

    def switch(theme):
        page.evaluate(
            "theme => window.jupyterapp.commands.execute('apputils:change-theme', {theme})", theme
        )
        page.wait_for_function(
            "want => document.body.dataset.jpThemeLight === want",
            arg="true" if theme == "JupyterLab Light" else "false",
            timeout=TIMEOUT,
        )

    switch("JupyterLab Light")
    before = colours()
    switch("JupyterLab Dark")
    page.wait_for_function(
        "([e, was]) => getComputedStyle(e).fill !== was",
        arg=[other.element_handle(), before["other"]],
        timeout=TIMEOUT,
    )
    after = colours()
    lab_page.screenshot("dark")

    # the selection survived: the same node is marked and the details still describe it
    expect(node).to_have_class(SELECTED)
    expect(viewer.locator(".tv-details")).to_contain_text(op["id"])
    # and the colours switched to dark: fills and text went the other way in brightness
    assert luminance(after["other"]) < luminance(before["other"]), (before, after)
    assert after["selected"] != after["other"], after  # still drawn as selected
    assert luminance(after["text"]) > luminance(before["text"]), (before, after)
    assert not lab_page.errors, lab_page.errors


def luminance(css_colour: str) -> float:
    """Relative brightness of an `rgb(...)` / `rgba(...)` colour, 0 (black) to 1 (white)."""
    r, g, b = (float(x) / 255 for x in re.findall(r"[\d.]+", css_colour)[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b
