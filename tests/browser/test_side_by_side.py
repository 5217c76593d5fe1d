"""The side-by-side view in Chromium, from an exported page: two runs of a tiny GPT, the
second with one block's activation swapped (and one extra op at its embedding, so the two
sides' op ids differ), compared. The first divergence is listed at the swapped module, and
clicking an op in the left viewer selects its match in the right one. And two real gloo
ranks, one scaling its loss: the desync listed, each rank's norms, the collectives marked."""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn as nn
from lab_server import click_node, screenshot
from playwright.sync_api import expect

import thunderviz as tv
from tests.distributed import debug_checks
from thunderviz.distributed import launch
from thunderviz.models import GPT, GPTConfig
from thunderviz.widgets import export_html
from thunderviz.widgets.sidebyside import comparison_document

pytestmark = pytest.mark.browser

TIMEOUT = 30_000


class _ScaledEmbedding(nn.Embedding):
    """An embedding with one more op (a multiplication by one): the same values, every
    later op id one further on."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * 1.0


def _runs():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=2, n_head=2, d_model=16))
    idx = torch.randint(0, 64, (2, 8))
    changed = copy.deepcopy(model)
    changed.blocks[1].mlp[1] = nn.ReLU()
    embedding = _ScaledEmbedding(64, 16)
    embedding.weight = changed.wte.weight  # tied to lm_head, as in the model
    changed.wte = embedding
    return tv.Session(model, idx, idx), tv.Session(changed, idx, idx)


def test_two_runs_side_by_side(browser_context, tmp_path):
    a, b = _runs()
    path = export_html((a, b), tmp_path / "compare.html")
    doc = comparison_document(a, b)
    comparison = doc["comparison"]
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(path.resolve().as_uri())
        left = page.locator('.tv-sbs-pane[data-tv-side="0"]')
        right = page.locator('.tv-sbs-pane[data-tv-side="1"]')
        for pane in (left, right):
            expect(
                pane.locator('.tv-graph-pane[data-tv-graph="forward"][data-tv-ready="true"]')
            ).to_be_visible(timeout=TIMEOUT)

        first = page.locator(".tv-sbs-divergences li").first
        expect(first).to_contain_text("first forward difference")
        expect(first).to_contain_text("blocks.1.mlp.1")
        expect(first).to_contain_text("models.py:")
        # the collapsed module holding the swapped layer is coloured as differing
        block = left.locator(
            '.tv-graph-pane[data-tv-graph="forward"] g.node[data-tv-id="module:blocks.1.mlp"]'
        )
        fill = block.locator(":scope > :is(polygon, path, ellipse)").first.evaluate(
            "el => getComputedStyle(el).fill"
        )
        assert fill not in ("", "none") and fill != "rgb(187, 247, 208)", fill  # not "same"
        screenshot(page, "side-by-side")

        # an op of the left run whose match on the right has another id
        counterpart = {m["ops"][0]: m["ops"][1] for m in comparison["matches"]}
        left_forward = left.locator('.tv-graph-pane[data-tv-graph="forward"]')
        ids = left_forward.locator("g.node[data-tv-type='op']").evaluate_all(
            "els => els.map(e => e.getAttribute('data-tv-id'))"
        )
        op = next(i for i in ids if counterpart.get(i, i) != i)
        click_node(left_forward.locator(f'g.node[data-tv-id="{op}"]'))
        expect(left_forward.locator(f'g.node[data-tv-id="{op}"]')).to_have_class(
            re.compile(r"\btv-selected\b")
        )
        right_node = right.locator(
            f'.tv-graph-pane[data-tv-graph="forward"] g.node[data-tv-id="{counterpart[op]}"]'
        )
        expect(right_node).to_have_class(re.compile(r"\btv-selected\b"), timeout=TIMEOUT)
        expect(page.locator(".tv-sbs-selection")).to_contain_text(f"a: {op} ↔ b: {counterpart[op]}")

        # "show" on the divergence selects the swapped op on both sides (drawn inside its
        # collapsed module, which carries the selection)
        first.locator("button").click()
        selected = page.evaluate(
            "() => window.thunderviz.handle.models.map(m => m.get('selected'))"
        )
        assert selected == comparison["divergences"][0]["ops"]
        for pane in (left, right):
            expect(
                pane.locator(
                    '.tv-graph-pane[data-tv-graph="forward"] '
                    'g.node.tv-selected[data-tv-id="module:blocks.1.mlp"]'
                )
            ).to_have_count(1)
        screenshot(page, "side-by-side-divergence")
        assert not errors, errors
    finally:
        page.close()


def test_ranks_side_by_side(browser_context, tmp_path):
    ranks = launch(
        debug_checks.save_sessions, str(tmp_path), world_size=2, timeout=60, run_timeout=150
    )
    path = export_html([r["scaled_loss"] for r in ranks], tmp_path / "ranks.html")
    page = browser_context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        page.goto(path.resolve().as_uri())
        for side in (0, 1):
            expect(
                page.locator(
                    f'.tv-sbs-pane[data-tv-side="{side}"] .tv-graph-pane'
                    '[data-tv-graph="forward"][data-tv-ready="true"]'
                )
            ).to_be_visible(timeout=TIMEOUT)
        first = page.locator(".tv-sbs-divergences li").first
        expect(first).to_contain_text("first desync")
        expect(first).to_contain_text(debug_checks.SCALED_LOSS_LINE)
        expect(first).to_contain_text("rank 0 vs rank 1")
        table = page.locator(".tv-sbs-ranks table")
        expect(table.locator("th")).to_have_text(
            ["op (norm of its first output)", "rank 0", "rank 1"]
        )
        expect(table.locator("tr.tv-sbs-collective").first).to_be_visible()
        # a row of the table selects that op on every rank
        row = table.locator("tbody tr.tv-sbs-collective").first
        op = row.get_attribute("data-tv-id")
        row.click()
        expect(row).to_have_class(re.compile(r"\btv-selected\b"))
        selected = page.evaluate(
            "() => window.thunderviz.handle.models.map(m => m.get('selected'))"
        )
        assert selected[0] == op and selected[1].split(":")[0] == op.split(":")[0]
        trace = op.split(":")[0]
        expect(
            page.locator(
                f'.tv-sbs-pane[data-tv-side="1"] .tv-graph-pane[data-tv-graph="{trace}"] '
                f'g.node.tv-selected[data-tv-id="{selected[1]}"]'
            )
        ).to_have_count(1)
        screenshot(page, "side-by-side-ranks")
        assert not errors, errors
    finally:
        page.close()
