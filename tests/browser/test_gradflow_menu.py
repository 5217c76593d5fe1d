"""Gradient flow's norms and per-module scale, and the right-click intervention menu, in
the exported page (no kernel) of a real 2-layer GPT in Chromium."""

from __future__ import annotations

import re

import pytest
import torch
from playwright.sync_api import expect
from viewer_page import pane, ready

from thunderviz.debug import Session
from thunderviz.models import GPT, GPTConfig
from thunderviz.widgets import export_html

pytestmark = pytest.mark.browser

CFG = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, d_model=32)
TIMEOUT = 60_000
TOP = "rgb(253, 231, 37)"  # the palette's top colour (#fde725)
NUMBER = re.compile(r"^-?\d+(\.\d+)?(e[-+]?\d+)?$")


@pytest.fixture(scope="module")
def gpt_export(tmp_path_factory):
    torch.manual_seed(0)
    model = GPT(CFG)
    idx = torch.randint(0, CFG.vocab_size, (2, 16))
    session = Session(model, idx, idx, record_transforms=False)
    return export_html(session, tmp_path_factory.mktemp("gptmenu") / "gpt.html")


@pytest.fixture
def page(browser_context, gpt_export):
    page = browser_context.new_page()
    page.set_viewport_size({"width": 1400, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(gpt_export.resolve().as_uri())
    ready(page)
    yield page
    assert not errors, errors
    page.close()


def top_coloured(p) -> int:
    return p.evaluate(
        """(el, top) => [...el.querySelectorAll('g.node > :is(polygon, path, ellipse):first-of-type')]
        .filter((s) => s.style.fill && getComputedStyle(s).fill === top).length""",
        TOP,
    )


def test_norms_on_nodes_and_the_per_module_scale(page):
    forward = pane(page, "forward")
    forward.locator('[data-tv-graph-action="grad-flow"]').check()
    labels = forward.locator("text.tv-norm-label")
    expect(labels).to_have_count(0)
    forward.locator('[data-tv-graph-action="grad-norms"]').check()
    expect(labels.first).to_be_visible()
    texts = labels.all_text_contents()
    assert any(NUMBER.match(t) for t in texts), texts
    # each label sits just below its node's shape, inside the node's group
    below = labels.first.evaluate("""(t) => {
        const shape = t.parentNode.querySelector(':scope > :is(polygon, path, ellipse)');
        return t.getBBox().y >= shape.getBBox().y + shape.getBBox().height - 1;
    }""")
    assert below
    log_top = top_coloured(forward)
    forward.locator('[data-tv-graph-action="grad-scale"]').select_option("module")
    expect(forward.locator(".tv-legend")).to_contain_text(
        "relative to the largest in its open module"
    )
    module_top = top_coloured(forward)
    # every open module's largest norm takes the top colour, not only the graph's largest
    assert module_top > log_top and module_top >= 2, (log_top, module_top)
    forward.locator('[data-tv-graph-action="grad-norms"]').uncheck()
    expect(labels).to_have_count(0)


def test_right_click_on_a_backward_op_or_module_opens_the_intervention_menu(page):
    backward = pane(page, "backward")
    menu = page.locator("[data-tv-intervene-menu]")
    expect(menu).to_be_hidden()
    op = backward.locator('g.node[data-tv-type="op"]').first
    op_id = op.get_attribute("data-tv-id")
    op.scroll_into_view_if_needed()
    op.locator("path, polygon, ellipse").first.click(button="right", position={"x": 5, "y": 5})
    expect(menu).to_be_visible()
    expect(menu).to_contain_text("Edit the gradient at")
    expect(menu.locator("[data-tv-menu-note]")).to_contain_text("need a live kernel")
    items = menu.locator("[data-tv-menu-edit]")
    expect(items).to_have_count(5)
    for i in range(5):
        expect(items.nth(i)).to_be_disabled()
    expect(op).to_have_class(re.compile(r"\btv-selected\b"))
    page.keyboard.press("Escape")  # the menu has the focus
    expect(menu).to_be_hidden()
    # a module (closed in the backward) takes it too; a click elsewhere closes it
    module = backward.locator('g.node[data-tv-type="module"]').first
    module.scroll_into_view_if_needed()
    module.locator("path, polygon, ellipse").first.click(button="right", position={"x": 5, "y": 5})
    expect(menu).to_be_visible()
    expect(menu.locator(".tv-menu-title")).not_to_contain_text(op_id)
    page.mouse.click(5, 5)
    expect(menu).to_be_hidden()


LIVE = """\
%load_ext thunderviz.widgets
import torch
import torch.nn as nn


class Small(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
        self.out = nn.Linear(4, 1)

    def forward(self, x):
        return self.out(self.block(x)).sum()


torch.manual_seed(0)
model = Small()
x = torch.randn(3, 4)
w = %thunder model(x)
w
"""


def test_the_menu_zeroes_a_module_in_a_live_widget(thunderviz_lab, lab_page, lab_dir):
    from test_widget import open_new_notebook, python, run_all, wait_idle, widget_output

    page = lab_page.page
    panel = open_new_notebook(lab_page, lab_dir, "live.ipynb", LIVE)
    run_all(page)
    widget = widget_output(panel)
    backward = widget.locator('.tv-graph-pane[data-tv-graph="backward"]')
    expect(backward).to_have_attribute("data-tv-ready", "true", timeout=TIMEOUT)
    assert python(
        page,
        "import json; print(json.dumps(float(w.session.grads()['block_0_weight'].abs().sum()) > 0))",
    )
    target = backward.locator('[data-tv-id="module:out"] > text').first
    target.scroll_into_view_if_needed()
    box = target.bounding_box()
    target.click(button="right", position={"x": box["width"] - 4, "y": box["height"] / 2})
    menu = widget.locator("[data-tv-intervene-menu]")
    expect(menu).to_be_visible()
    expect(menu.locator("[data-tv-menu-note]")).to_have_count(0)
    menu.locator('[data-tv-menu-edit="zero"]').click()
    expect(menu).to_be_hidden()
    # the kernel re-ran the backward with out's grad_input zeroed: block's gradients are zero
    wait_idle(page)
    facts = python(
        page,
        "import json; print(json.dumps([len(w.session.interventions), "
        "w.session.interventions[0].target, "
        "float(w.session.grads()['block_0_weight'].abs().sum())]))",
    )
    assert facts == [1, "module out", 0.0], facts
    # the redrawn view has grad flow on, and shows the zeroed gradients in their own look
    backward = widget.locator('.tv-graph-pane[data-tv-graph="backward"]')
    expect(backward).to_have_attribute("data-tv-ready", "true", timeout=TIMEOUT)
    expect(backward.locator('[data-tv-graph-action="grad-flow"]')).to_be_checked()
    forward = widget.locator('.tv-graph-pane[data-tv-graph="forward"]')
    expect(forward.locator('[data-tv-graph-action="grad-flow"]')).to_be_checked()
    strokes = forward.locator("g.edge > path").evaluate_all("els => els.map(e => e.style.stroke)")
    assert "rgb(158, 158, 158)" in strokes, strokes  # the "zero" look: block's output gradient
    assert not [e for e in lab_page.errors if e.startswith("uncaught")], lab_page.errors
