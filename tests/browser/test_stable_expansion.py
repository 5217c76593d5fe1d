"""Opening a module keeps it where it was on the screen, and its neighbours in their order
(exported page of a real 6-layer GPT): the pane scrolls the new layout so the module's
box starts where its node was, instead of re-centring the pane on it."""

from __future__ import annotations

import pytest
import torch
from lab_server import open_exported, screenshot
from playwright.sync_api import expect
from viewer_page import pane

from thunderviz.debug import Session
from thunderviz.models import GPT, GPTConfig
from thunderviz.widgets import export_html

pytestmark = pytest.mark.browser

CFG = GPTConfig(vocab_size=64, block_size=16, n_layer=6, n_head=2, d_model=32)
TIMEOUT = 60_000

# The top middle of what draws `id` in a pane (an open module's box, else its node),
# relative to the pane's visible corner; and the vertical order of the modules drawn.
POSITION = """([pane, id]) => {
  const canvas = pane.querySelector('.tv-graph-canvas');
  const el = pane.querySelector(`g.cluster[data-tv-id="${id}"]`) || pane.querySelector(`g.node[data-tv-id="${id}"]`);
  const c = canvas.getBoundingClientRect(), r = el.getBoundingClientRect();
  return {x: r.left + r.width / 2 - c.left, y: r.top - c.top, open: el.matches('g.cluster')};
}"""
ORDER = """([pane, ids]) => ids
  .map((id) => [id, pane.querySelector(`g.cluster[data-tv-id="${id}"], g.node[data-tv-id="${id}"]`)])
  .filter(([, el]) => el)
  .sort((a, b) => a[1].getBoundingClientRect().top - b[1].getBoundingClientRect().top)
  .map(([id]) => id)"""


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    torch.manual_seed(0)
    idx = torch.randint(0, CFG.vocab_size, (2, 16))
    folder = tmp_path_factory.mktemp("stable")
    return export_html(Session(GPT(CFG), idx, idx, record_transforms=False), folder / "gpt.html")


@pytest.fixture
def page(browser_context, export):
    page = open_exported(browser_context, export, timeout_ms=TIMEOUT)
    yield page
    page.close()


def can_scroll_sideways(view):
    return view.evaluate(
        "p => { const c = p.querySelector('.tv-graph-canvas'); return c.scrollWidth > c.clientWidth; }"
    )


@pytest.mark.parametrize("kind", ["forward", "backward"])
def test_an_opened_module_stays_where_it_was_and_its_siblings_keep_their_order(page, kind):
    view = pane(page, kind)
    # the blocks are open, their attention and MLP modules closed (the default expansion)
    parts = [f"module:blocks.{i}.{part}" for i in range(CFG.n_layer) for part in ("attn", "mlp")]
    module = "module:blocks.2.mlp"  # modules drawn above and below it: its opening moves them
    expect(view.locator(f'g.node[data-tv-id="{module}"]')).to_have_count(1)
    handle = view.element_handle()
    order = page.evaluate(ORDER, [handle, parts])
    # put it in the upper part of the pane, away from the centre the pane would re-centre on
    view.evaluate(
        """(pane, id) => {
             const canvas = pane.querySelector('.tv-graph-canvas');
             const el = pane.querySelector(`g.node[data-tv-id="${id}"]`);
             const c = canvas.getBoundingClientRect(), r = el.getBoundingClientRect();
             canvas.scrollTop += r.top - c.top - 120;
           }""",
        module,
    )
    before = page.evaluate(POSITION, [handle, module])
    assert not before["open"]
    assert abs(before["y"] - 120) < 2, before  # there was room to scroll it there

    view.locator(f'g.node[data-tv-id="{module}"] > text .tv-toggle').click()
    expect(view.locator(f'g.cluster[data-tv-id="{module}"]')).to_have_count(1, timeout=TIMEOUT)
    expect(view).to_have_attribute("data-tv-ready", "true", timeout=TIMEOUT)
    after = page.evaluate(POSITION, [handle, module])
    screenshot(page, f"stable-expansion-{kind}")

    assert after["open"]
    assert abs(after["x"] - before["x"]) <= 2 or not can_scroll_sideways(view), (before, after)
    assert abs(after["y"] - before["y"]) <= 2, (before, after)
    assert page.evaluate(ORDER, [handle, parts]) == order
