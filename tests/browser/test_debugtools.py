"""The debugging tab in Chromium: an exported page (no kernel) of a session whose backward
has a NaN/Inf born and healed and one intervention lists both, and a ledger row selects its
op in the backward graph."""

from __future__ import annotations

import re

import pytest
import torch
from playwright.sync_api import expect

from tests.debug.models import SqrtOfRelu
from thunderviz.debug import Session
from thunderviz.widgets import export_html

pytestmark = pytest.mark.browser

TIMEOUT = 30_000
SELECTED = re.compile(r"\btv-selected\b")


def _session() -> Session:
    torch.manual_seed(0)
    model = SqrtOfRelu().double()
    with torch.no_grad():  # exact zeros out of the relu: sqrt's gradient there is inf
        model.fc.bias.copy_(torch.tensor([-50.0, 0.0, 0.3, 0.0, 50.0, 0.1], dtype=torch.float64))
        model.fc.weight[1].zero_()
        model.fc.weight[3].zero_()
    s = Session(model, torch.randn(5, 4, dtype=torch.float64))
    s.record_backward()
    s.intervene("out", ("scale", 0.5))
    return s


def test_the_ledger_and_interventions_tab_in_an_exported_page(browser_context, tmp_path):
    s = _session()
    healed = next(e for e in s.nan_ledger() if e.status == "healed")
    path = export_html(s, tmp_path / "nan.html")
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(path.resolve().as_uri())
        page.locator('button[data-tv-tab="debugging"]').click()
        ledger = page.locator("table[data-tv-ledger]")
        expect(ledger).to_contain_text("born", timeout=TIMEOUT)
        expect(ledger).to_contain_text("healed")
        expect(page.locator("table[data-tv-interventions]")).to_contain_text("scale(0.5)")
        expect(page.locator("[data-tv-intervene-controls]")).to_have_count(0)  # no kernel
        row = page.locator(f'[data-tv-ledger-op="{healed.op_id}"]')
        row.click()
        expect(row).to_have_class(SELECTED)
        page.locator('button[data-tv-tab="forward_backward"]').click()
        node = page.locator(
            f'.tv-graph-pane[data-tv-graph="backward"] g.node[data-tv-id="{healed.op_id}"]'
        )
        expect(node).to_have_class(SELECTED, timeout=TIMEOUT)
        assert not errors, errors
    finally:
        page.close()


def _stroke(page, pane: str, op_id: str) -> str:
    shape = f'.tv-graph-pane[data-tv-graph="{pane}"] g.node[data-tv-id="{op_id}"] > :is(polygon, path, ellipse)'
    return page.locator(shape).first.evaluate(
        "el => getComputedStyle(el).stroke + ' ' + getComputedStyle(el).strokeDasharray"
    )


def test_the_ledger_marks_born_and_healed_ops_on_both_graphs(browser_context, tmp_path):
    s = _session()
    ledger = s.nan_ledger()
    born = next(e for e in ledger if e.status == "born")
    healed = next(e for e in ledger if e.status == "healed")
    assert "sqrt" in born.forward_op and "relu" in healed.forward_op, (born, healed)
    path = export_html(s, tmp_path / "marks.html")
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(path.resolve().as_uri())
        for pane, entry_ids in (
            ("backward", (born.op_id, healed.op_id)),
            ("forward", (born.forward_op_id, healed.forward_op_id)),
        ):
            for entry_id, status in zip(entry_ids, ("born", "healed")):
                node = page.locator(
                    f'.tv-graph-pane[data-tv-graph="{pane}"] g.node[data-tv-id="{entry_id}"]'
                )
                expect(node).to_have_class(re.compile(rf"\btv-ledger-{status}\b"), timeout=TIMEOUT)

        # drawn differently from each other and from an unmarked op
        def drawn(e):
            pane = '.tv-graph-pane[data-tv-graph="backward"]'
            return page.locator(f'{pane} g.node[data-tv-id="{e.op_id}"]').count() > 0

        clean = next(e for e in ledger if e.status == "clean" and drawn(e))
        looks = {
            _stroke(page, "backward", born.op_id),
            _stroke(page, "backward", healed.op_id),
            _stroke(page, "backward", clean.op_id),
        }
        assert len(looks) == 3, looks
        key = page.locator('.tv-graph-pane[data-tv-graph="backward"] [data-tv-graph-action="key"]')
        key.locator("summary").click()
        expect(key).to_contain_text("NaN/Inf born here")
        expect(key).to_contain_text("NaN/Inf healed here")
        # the exported picture keeps the marks (its own style block: the page's CSS stays behind)
        with page.expect_download() as info:
            page.locator(
                '.tv-graph-pane[data-tv-graph="backward"] [data-tv-graph-action="export-svg"]'
            ).click()
        info.value.save_as(tmp_path / "b.svg")
        text = (tmp_path / "b.svg").read_text()
        assert re.search(r"\.tv-ledger-born (>|&gt;) [^{]*\{ stroke: #c026d3", text), text[:2000]
        assert f'data-tv-id="{born.op_id}"' in text and "tv-ledger-born" in text
        assert not errors, errors
    finally:
        page.close()
