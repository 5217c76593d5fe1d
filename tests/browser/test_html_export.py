"""The exported HTML page in Chromium, from file://, with no kernel and no network: graphs,
details and linked highlights, the recorded backward steps, collapse / expand; and a model
whose module name is markup shows that name as text, running nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from lab_server import click_node, screenshot, toggle
from playwright.sync_api import expect

from tests.widgets.models import EVIL, Hostile, mlp_inputs
from thunderviz.debug import Session
from thunderviz.widgets import export_html

pytestmark = pytest.mark.browser

GRAPH_READY = '.tv-graph-pane[data-tv-ready="true"]'
TIMEOUT = 30_000


class OfflinePage:
    """A page of the test's Chromium that records every request it makes and every dialog."""

    def __init__(self, context):
        self.page = context.new_page()
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def open(self, path: Path) -> None:
        self.page.goto(path.resolve().as_uri())
        expect(self.page.locator(GRAPH_READY).first).to_be_visible(timeout=TIMEOUT)

    def close(self) -> None:
        self.page.close()

    def network(self) -> list[str]:
        return [u for u in self.requests if not u.startswith(("file:", "blob:", "data:"))]


@pytest.fixture
def offline(browser_context):
    page = OfflinePage(browser_context)
    try:
        yield page
    finally:
        page.close()


def test_the_exported_page_works_offline(offline, tmp_path):
    model, x, target = mlp_inputs()
    session = Session(model, x, target)
    path = export_html(session, tmp_path / "mlp.html")
    doc = session.document()
    linked = {o["id"] for o in doc["traces"]["backward"]["ops"] if o["fwd_op"] == "forward:2"}
    n = len(doc["steps"])
    page = offline.page

    offline.open(path)
    forward = page.locator('.tv-graph-pane[data-tv-graph="forward"]')
    backward = page.locator('.tv-graph-pane[data-tv-graph="backward"]')
    expect(backward).to_have_attribute("data-tv-ready", "true", timeout=TIMEOUT)
    expect(page.locator(".tv-status")).to_contain_text(f"step 0 / {n}")

    # details and linked highlights
    node = forward.locator('g.node[data-tv-id="forward:2"]')
    click_node(node)
    expect(node).to_have_class(re.compile(r"\btv-selected\b"))
    expect(page.locator(".tv-details")).to_contain_text("torch.nn.functional.linear")
    lit = backward.locator("g.node.tv-highlight[data-tv-type='op']")
    expect(lit.first).to_be_visible()
    lit_ids = set(lit.evaluate_all("els => els.map(e => e.getAttribute('data-tv-id'))"))
    assert lit_ids and lit_ids <= linked, (lit_ids, linked)
    screenshot(page, "html-export-selected")

    # the recorded backward, stepped in the page
    step = page.locator('[data-tv-action="step"]')
    for i in range(1, 4):
        step.click()
        expect(page.locator(".tv-status")).to_contain_text(f"step {i} / {n}")
    expect(backward.locator("g.node.tv-current-step").first).to_have_attribute(
        "data-tv-id", doc["steps"][2]["op"]
    )
    page.locator('[data-tv-action="back"]').click()
    expect(page.locator(".tv-status")).to_contain_text(f"step 2 / {n}")
    screenshot(page, "html-export-stepped")

    # collapse and expand a module
    toggle(forward, "module:block")
    expect(forward.locator('g.node[data-tv-id="module:block"]')).to_have_count(1)
    toggle(forward, "module:block")
    expect(forward.locator('g.cluster[data-tv-id="module:block"]')).to_have_count(1)
    screenshot(page, "html-export-expanded")

    assert offline.network() == [], offline.network()
    assert not offline.errors and not offline.dialogs


def test_a_hostile_module_name_shows_as_text_in_the_page(offline, tmp_path):
    torch.manual_seed(0)
    path = export_html(Hostile(), tmp_path / "hostile.html", torch.randn(2, 4))
    page = offline.page
    offline.open(path)
    forward = page.locator('.tv-graph-pane[data-tv-graph="forward"]')
    expect(forward).to_have_attribute("data-tv-ready", "true", timeout=TIMEOUT)
    label = forward.locator(f'g.cluster[data-tv-id="module:{EVIL}"] > text')
    expect(label).to_contain_text(EVIL)
    box = label.bounding_box()
    label.click(position={"x": box["width"] - 4, "y": box["height"] / 2})
    expect(page.locator(".tv-details h3")).to_have_text(EVIL)
    page.locator('button[data-tv-tab="saved"]').click()
    expect(page.locator("table[data-tv-saved-modules]")).to_contain_text(EVIL)
    page.wait_for_timeout(500)  # an onerror handler would have fired by now
    assert not offline.dialogs, offline.dialogs
    assert page.evaluate("() => document.querySelectorAll('img').length") == 0
    screenshot(page, "html-export-hostile")
    assert offline.network() == [] and not offline.errors
