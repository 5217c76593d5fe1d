"""The backward graph in the exported page, on a real 2-layer GPT: shaped like the forward
(backward ops inside the forward modules they came from), saved tensors as stubs beside
their readers that lead to their producers, real edge labels, readable at first sight."""

from __future__ import annotations

import re

import pytest
import torch
from lab_server import click_node, screenshot, toggle
from playwright.sync_api import expect
from viewer_page import pane, ready

from thunderviz.debug import Session
from thunderviz.models import GPT, GPTConfig
from thunderviz.widgets import export_html

pytestmark = pytest.mark.browser

CFG = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, d_model=32)
TIMEOUT = 60_000


@pytest.fixture(scope="module")
def gpt2_export(tmp_path_factory):
    torch.manual_seed(0)
    model = GPT(CFG)
    idx = torch.randint(0, CFG.vocab_size, (2, 16))
    session = Session(model, idx, idx, record_transforms=False)
    path = export_html(session, tmp_path_factory.mktemp("gpt2l") / "gpt.html")
    return path, session.document()


@pytest.fixture
def page(browser_context, gpt2_export):
    page = browser_context.new_page()
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(gpt2_export[0].resolve().as_uri())
    ready(page)
    yield page
    page.close()


def open_everything(page, doc):
    """Every module of the forward, opened with its ▸ in each pane (each has its own)."""
    paths = sorted(
        {op["module_path"] for op in doc["traces"]["forward"]["ops"] if op["module_path"]},
        key=lambda p: p.count("."),
    )
    for path in paths:
        for prefix in [".".join(path.split(".")[: i + 1]) for i in range(path.count(".") + 1)]:
            for kind in ("forward", "backward"):
                if (
                    pane(page, kind)
                    .locator(f'g.node[data-tv-id="module:{prefix}"] .tv-toggle')
                    .count()
                ):
                    toggle(pane(page, kind), f"module:{prefix}")
                    ready(page)


def test_backward_ops_sit_in_the_forward_module_they_came_from(page, gpt2_export):
    _, doc = gpt2_export
    ops = {op["id"]: op for trace in doc["traces"].values() for op in trace["ops"]}
    open_everything(page, doc)
    cluster = pane(page, "backward").locator('g.cluster[data-tv-id="module:blocks.1.attn"]')
    expect(cluster).to_have_count(1)
    # Graphviz draws clusters as siblings: a node is inside when its box is inside the cluster's
    inside = page.evaluate("""() => {
        const p = document.querySelector('.tv-graph-pane[data-tv-graph="backward"]');
        const c = p.querySelector('g.cluster[data-tv-id="module:blocks.1.attn"]').getBoundingClientRect();
        return [...p.querySelectorAll('g.node[data-tv-type="op"]')].filter((n) => {
            const r = n.getBoundingClientRect();
            return r.left >= c.left && r.right <= c.right && r.top >= c.top && r.bottom <= c.bottom;
        }).map((n) => n.getAttribute('data-tv-id'));
    }""")
    assert len(inside) >= 5, inside
    for op_id in inside:
        forward = ops[ops[op_id]["fwd_op"]]
        assert forward["module_path"].startswith("blocks.1.attn"), (op_id, forward["module_path"])
    # and they say what they are the gradient of
    labels = pane(page, "backward").locator('g.node[data-tv-type="op"] > text').all_text_contents()
    assert any(re.search(r"^▸? ?mm · d ", t) for t in labels), labels[:20]
    screenshot(page, "backward-by-module")


def test_no_edge_label_has_a_question_mark(page, gpt2_export):
    open_everything(page, gpt2_export[1])
    for kind in ("forward", "backward"):
        labels = pane(page, kind).locator("g.edge > text").all_text_contents()
        assert labels, kind
        assert not [t for t in labels if "?" in t], (kind, [t for t in labels if "?" in t])
        assert all(re.fullmatch(r"[a-z]+\d*\[[\d,]*\]( \+\d+)?", t) for t in labels), labels[:10]


def test_a_saved_tensor_is_a_stub_at_its_reader_that_leads_to_its_producer(page, gpt2_export):
    _, doc = gpt2_export
    backward = pane(page, "backward")
    assert (
        backward.locator('g.node[data-tv-type="op"][data-tv-id="backward:0"]').count() == 0
    )  # no unpack hub
    saved = {s["name"]: s for s in doc["saved"]}
    stubs = backward.locator('g.node[data-tv-type="saved"]')
    expect(stubs.first).to_be_visible()
    # a stub for one tensor whose forward op is drawn as a node of its own in the forward
    forward_ids = set(
        pane(page, "forward")
        .locator("g.node")
        .evaluate_all("els => els.map(e => e.getAttribute('data-tv-id'))")
    )
    candidates = [
        i
        for i in stubs.evaluate_all("els => els.map(e => e.getAttribute('data-tv-id'))")
        if i.split("@")[0].removeprefix("saved:") in saved
    ]
    name = next(
        c.split("@")[0].removeprefix("saved:")
        for c in candidates
        if saved[c.split("@")[0].removeprefix("saved:")]["fwd_op"] in forward_ids
    )
    stub = backward.locator(f'g.node[data-tv-id^="saved:{name}@"]').first
    expect(stub).to_contain_text(name)
    click_node(stub)
    expect(page.locator(".tv-details")).to_contain_text(name)
    producer = pane(page, "forward").locator(f'g.node[data-tv-id="{saved[name]["fwd_op"]}"]')
    expect(producer).to_have_class(re.compile(r"\btv-highlight\b"))
    # the details name the producer by op, module and line, not by id
    expect(page.locator(".tv-details")).not_to_contain_text(saved[name]["producer"] + " ")
    screenshot(page, "backward-saved-stub")


def test_labels_are_readable_at_the_default_view(page):
    for kind in ("forward", "backward"):
        sizes = pane(page, kind).evaluate("""p => {
            const svg = p.querySelector('svg');
            const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
            return [...p.querySelectorAll('g.node[data-tv-type="op"] > text, g.node[data-tv-type="module"] > text')]
                .map((t) => Number(t.getAttribute('font-size')) * scale);
        }""")
        assert sizes and min(sizes) >= 10 - 1e-6, (kind, min(sizes))


def test_gradient_flow_colours_the_backward_too_with_a_rank_scale(page, gpt2_export):
    backward = pane(page, "backward")
    backward.locator('[data-tv-graph-action="grad-flow"]').check()
    coloured = backward.locator("g.edge > path[style*='stroke']")
    expect(coloured.first).to_be_attached()
    legend = backward.locator(".tv-legend")
    expect(legend).to_contain_text("log scale")
    log_colours = set(coloured.evaluate_all("els => els.map(e => e.style.stroke)"))
    backward.locator('[data-tv-graph-action="grad-scale"]').select_option("rank")
    expect(legend).to_contain_text("by rank")
    rank_colours = set(coloured.evaluate_all("els => els.map(e => e.style.stroke)"))
    assert len(rank_colours) >= len(log_colours) >= 2, (log_colours, rank_colours)
    # the legend is below the graph, not over it
    canvas = backward.locator(".tv-graph-canvas").bounding_box()
    box = legend.bounding_box()
    assert box["y"] >= canvas["y"] + canvas["height"] - 1
    # saved stubs carry forward values, not gradients: not coloured
    assert (
        backward.locator(
            'g.node[data-tv-type="saved"] > path[style*="fill"], '
            'g.node[data-tv-type="saved"] > polygon[style*="fill"]'
        ).count()
        == 0
    )
