"""Each graph pane has its own expansion, and "follow selection" opens the region linked to
a selection in the other pane (exported page of a real 2-layer GPT)."""

from __future__ import annotations

import re

import pytest
from lab_server import click_node, screenshot, toggle
from playwright.sync_api import expect
from viewer_page import export_small_gpt, open_page, pane, ready

pytestmark = pytest.mark.browser

SELECTED = re.compile(r"\btv-selected\b")


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    return export_small_gpt(tmp_path_factory.mktemp("panes"))


@pytest.fixture
def page(browser_context, export):
    page = open_page(browser_context, export[0])
    yield page
    page.close()


def collapsed_in_both(page):
    """Module ids drawn as a closed node in both panes."""
    ids = [
        set(
            pane(page, k)
            .locator('g.node[data-tv-type="module"]')
            .evaluate_all("els => els.map(e => e.getAttribute('data-tv-id'))")
        )
        for k in ("forward", "backward")
    ]
    return sorted(ids[0] & ids[1])


def test_each_pane_opens_and_collapses_on_its_own(page):
    forward, backward = pane(page, "forward"), pane(page, "backward")
    module = collapsed_in_both(page)[0]
    backward_layout = backward.get_attribute("data-tv-layout-ms")
    toggle(forward, module)
    ready(page)
    expect(forward.locator(f'g.cluster[data-tv-id="{module}"]')).to_have_count(1)
    expect(backward.locator(f'g.node[data-tv-id="{module}"]')).to_have_count(1)  # still shut
    assert backward.get_attribute("data-tv-layout-ms") == backward_layout

    backward.locator('[data-tv-graph-action="collapse-all"]').click()
    ready(page)
    expect(backward.locator('g.node[data-tv-id="module:blocks"]')).to_have_count(1)
    expect(forward.locator(f'g.cluster[data-tv-id="{module}"]')).to_have_count(1)  # untouched
    # the trait is the union: what Python reads still says the forward's module is open
    assert module.removeprefix("module:") in page.evaluate(
        "() => window.thunderviz.handle.model.get('expanded')"
    )


def test_follow_selection_opens_the_linked_region_in_the_other_pane(page):
    forward, backward = pane(page, "forward"), pane(page, "backward")
    page.locator('input[data-tv-action="follow"]').check()

    module = collapsed_in_both(page)[0]
    click_node(forward.locator(f'g.node[data-tv-id="{module}"]'))
    ready(page)
    expect(backward.locator(f'g.cluster[data-tv-id="{module}"]')).to_have_count(1)
    expect(forward.locator(f'g.node[data-tv-id="{module}"]')).to_have_class(
        SELECTED
    )  # not opened here
    screenshot(page, "follow-forward-to-backward")

    # and the reverse: a backward op of a module closed in the forward opens it there
    doc = page.evaluate("() => window.thunderviz.handle.model.get('document')")
    fwd_module = {o["id"]: o["module_path"] for o in doc["traces"]["forward"]["ops"]}
    closed = [
        m.removeprefix("module:")
        for m in pane(page, "forward")
        .locator('g.node[data-tv-type="module"]')
        .evaluate_all("els => els.map(e => e.getAttribute('data-tv-id'))")
    ]
    drawn = set(
        backward.locator('g.node[data-tv-type="op"]').evaluate_all(
            "els => els.map(e => e.getAttribute('data-tv-id'))"
        )
    )
    target, path = next(
        (o["id"], m)
        for o in doc["traces"]["backward"]["ops"]
        if o["id"] in drawn
        for m in closed
        if (fwd_module.get(o["fwd_op"]) or "") == m
        or (fwd_module.get(o["fwd_op"]) or "").startswith(m + ".")
    )
    click_node(backward.locator(f'g.node[data-tv-id="{target}"]'))
    ready(page)
    expect(forward.locator(f'g.cluster[data-tv-id="module:{path}"]')).to_have_count(1)
    expect(forward.locator("g.node.tv-highlight").first).to_be_visible()
