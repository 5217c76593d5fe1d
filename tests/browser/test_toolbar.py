"""Pane toolbar and day-one behaviour in the exported page of a real 2-layer GPT: the
export-picture buttons save files, the key explains shapes and colours, a double-click
opens a module without selecting it, the widget's height can be dragged."""

from __future__ import annotations

import re

import pytest
import torch
from lab_server import click_node
from playwright.sync_api import expect
from viewer_page import pane, ready

from tests.widgets.models import mlp_inputs
from thunderviz.debug import Session
from thunderviz.models import GPT, GPTConfig
from thunderviz.widgets import export_html

pytestmark = pytest.mark.browser

CFG = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, d_model=32)
TIMEOUT = 60_000


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    torch.manual_seed(0)
    model = GPT(CFG)
    idx = torch.randint(0, CFG.vocab_size, (2, 16))
    return export_html(
        Session(model, idx, idx, record_transforms=False),
        tmp_path_factory.mktemp("toolbar") / "gpt.html",
    )


@pytest.fixture
def page(browser_context, export):
    page = browser_context.new_page()
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(export.resolve().as_uri())
    ready(page)
    yield page
    page.close()


def test_export_picture_saves_the_drawn_graph_as_svg_and_png(page, tmp_path):
    backward = pane(page, "backward")
    node = backward.locator('g.node[data-tv-type="op"]').first
    click_node(node)
    expect(node).to_have_class(re.compile(r"\btv-selected\b"))
    with page.expect_download() as info:
        backward.locator('[data-tv-graph-action="export-svg"]').click()
    assert info.value.suggested_filename == "thunderviz-backward.svg"
    svg = tmp_path / "b.svg"
    info.value.save_as(svg)
    text = svg.read_text()
    assert text.startswith("<svg") and "tv-selected" in text and "d " in text
    with page.expect_download() as info:
        backward.locator('[data-tv-graph-action="export-png"]').click()
    png = tmp_path / "b.png"
    info.value.save_as(png)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_the_key_explains_shapes_and_colours(page):
    key = pane(page, "forward").locator('[data-tv-graph-action="key"]')
    key.locator("summary").click()
    items = key.locator(".tv-key-items")
    expect(items).to_be_visible()
    expect(items).to_contain_text("saved for backward")
    expect(items).to_contain_text("current backward step")


def test_double_click_opens_a_module_without_selecting_it(page):
    forward = pane(page, "forward")
    op = forward.locator('g.node[data-tv-type="op"]').first
    click_node(op)
    selected = page.evaluate("() => window.thunderviz.handle.model.get('selected')")
    module = forward.locator('g.node[data-tv-type="module"]').first
    ident = module.get_attribute("data-tv-id")
    shape = module.locator("path, polygon").first
    box = shape.bounding_box()
    shape.dblclick(position={"x": 5, "y": box["height"] / 2})
    expect(forward.locator(f'g.cluster[data-tv-id="{ident}"]')).to_have_count(1, timeout=TIMEOUT)
    assert page.evaluate("() => window.thunderviz.handle.model.get('selected')") == selected


def test_the_viewer_height_can_be_dragged(page):
    assert (
        pane(page, "forward").evaluate("p => getComputedStyle(p.closest('.tv-root')).resize")
        == "vertical"
    )


def test_a_fake_trace_says_why_there_is_no_backward(browser_context, tmp_path):
    model, x, target = mlp_inputs()
    path = export_html(Session(model, x, target, fake=True), tmp_path / "fake.html")
    page = browser_context.new_page()
    page.goto(path.resolve().as_uri())
    expect(pane(page, "forward")).to_have_attribute("data-tv-ready", "true", timeout=TIMEOUT)
    expect(page.locator('button[data-tv-tab="backward"]')).to_have_count(0)
    expect(page.locator('.tv-note[data-tv-note="no-backward"]')).to_contain_text("fake=True")
    page.close()


def test_the_overview_of_a_graph_bigger_than_its_pane_moves_the_view(page):
    backward = pane(page, "backward")
    minimap = backward.locator("canvas.tv-minimap")
    expect(minimap).to_be_visible()
    canvas = backward.locator(".tv-graph-canvas")
    canvas.evaluate("c => { c.scrollTop = 0; }")
    box = minimap.bounding_box()
    minimap.click(position={"x": box["width"] / 2, "y": box["height"] - 3})
    assert canvas.evaluate("c => c.scrollTop") > 100
    # zoomed to fit, the graph needs no overview
    backward.locator('[data-tv-graph-action="fit"]').click()
    assert canvas.evaluate(
        "c => c.scrollHeight <= c.clientHeight + 4 && c.scrollWidth <= c.clientWidth + 4"
    )
    expect(minimap).to_be_hidden()
