"""Search and keyboard in the exported page of a real 2-layer GPT: a tensor, a module path
and a file:line are found, and choosing one opens what hid it and shows it in both panes;
n / p step, / searches, Enter opens the selected module, Esc clears."""

from __future__ import annotations

import re

import pytest
from lab_server import click_node, screenshot
from playwright.sync_api import expect
from viewer_page import export_small_gpt, open_page, pane, ready

pytestmark = pytest.mark.browser

SELECTED = re.compile(r"\btv-selected\b")
HIGHLIGHT = re.compile(r"\btv-(highlight|selected)\b")


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return export_small_gpt(tmp_path_factory.mktemp("search"))


@pytest.fixture
def page(browser_context, export):
    page = open_page(browser_context, export[0])
    yield page
    page.close()


def search_and_choose(page, query, result_id):
    box = page.locator("input[type=search][data-tv-search]")
    box.fill(query)
    result = page.locator(f'.tv-search-results li[data-tv-result="{result_id}"]').first
    expect(result).to_be_visible()
    result.click()
    ready(page)


def in_view(page, kind, locator):
    """Some element of `locator` is drawn inside the visible part of pane `kind`."""
    expect(locator.first).to_be_attached()
    return page.evaluate(
        """([els, canvas]) => { const c = canvas.getBoundingClientRect();
        return els.some((e) => { const r = e.getBoundingClientRect();
            return r.right > c.left && r.left < c.right && r.bottom > c.top && r.top < c.bottom; }); }""",
        [locator.element_handles(), pane(page, kind).locator(".tv-graph-canvas").element_handle()],
    )


def test_search_reveals_a_tensor_a_module_and_a_source_line_in_both_panes(page, export):
    _, doc = export
    ops = {op["id"]: op for t in doc["traces"].values() for op in t["ops"]}
    expanded = page.evaluate("() => window.thunderviz.handle.model.get('expanded')")
    assert "blocks.1.attn" not in expanded  # hidden at first

    # a tensor saved for backward by an op inside blocks.1.attn
    tensor = next(
        s
        for s in doc["saved"]
        if s["fwd_op"]
        and ops[s["fwd_op"]]["module_path"].startswith("blocks.1.attn")
        and ops[s["fwd_op"]]["parent"] is None
    )
    search_and_choose(page, tensor["name"], tensor["name"])
    fwd_node = pane(page, "forward").locator(f'g.node[data-tv-id="{tensor["fwd_op"]}"]')
    expect(fwd_node).to_have_class(HIGHLIGHT)
    assert in_view(page, "forward", fwd_node)
    stub = pane(page, "backward").locator(f'g.node[data-tv-id^="saved:{tensor["name"]}@"]')
    expect(stub.first).to_have_class(SELECTED)
    assert in_view(page, "backward", stub)
    screenshot(page, "search-tensor")

    # a module path
    search_and_choose(page, "blocks.0.mlp", "module:blocks.0.mlp")
    for kind in ("forward", "backward"):
        node = pane(page, kind).locator('[data-tv-id="module:blocks.0.mlp"]')
        expect(node.first).to_have_class(SELECTED)
        assert in_view(page, kind, node), kind

    # a source line: the attention's projection in block 1
    op = next(
        o
        for o in doc["traces"]["forward"]["ops"]
        if o["module_path"] == "blocks.1.attn.proj" and o["source"] and o["parent"] is None
    )
    line = f"{op['source']['file'].split('/')[-1]}:{op['source']['line']}"
    box = page.locator("input[type=search][data-tv-search]")
    box.fill(line)
    first = page.locator(".tv-search-results li").first
    expect(first).to_have_attribute("data-tv-result-kind", "line")
    box.press("Enter")
    ready(page)
    chosen = page.evaluate("() => window.thunderviz.handle.model.get('selected')")
    assert ops[chosen]["source"]["line"] == op["source"]["line"]
    expect(pane(page, "forward").locator(f'g.node[data-tv-id="{chosen}"]')).to_have_class(SELECTED)
    derived = pane(page, "backward").locator("g.node.tv-highlight")
    assert in_view(page, "backward", derived)
    screenshot(page, "search-line")


def test_keyboard_steps_searches_opens_and_clears(page, export):
    _, doc = export
    n = len(doc["steps"])
    click_node(pane(page, "forward").locator('g.node[data-tv-type="op"]').first)
    for i in range(1, 4):
        page.keyboard.press("n")
        expect(page.locator(".tv-status")).to_contain_text(f"step {i} / {n}")
    page.keyboard.press("p")
    expect(page.locator(".tv-status")).to_contain_text(f"step 2 / {n}")
    expect(pane(page, "backward").locator("g.node.tv-current-step").first).to_be_visible()

    page.keyboard.press("/")
    expect(page.locator("input[type=search][data-tv-search]")).to_be_focused()
    page.keyboard.press("Escape")

    # Tab reaches nodes; Enter selects the focused one, Enter again opens it
    module = pane(page, "forward").locator('g.node[data-tv-id="module:blocks.0.attn"]')
    module.focus()
    page.keyboard.press("Enter")
    expect(module).to_have_class(SELECTED)
    page.keyboard.press("Enter")
    ready(page)
    expect(
        pane(page, "forward").locator('g.cluster[data-tv-id="module:blocks.0.attn"]')
    ).to_have_count(1)
    page.locator(".tv-graph-pane .tv-graph-canvas").first.focus()
    page.keyboard.press("Escape")
    assert page.evaluate("() => window.thunderviz.handle.model.get('selected')") == ""
