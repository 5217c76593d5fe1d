"""The page never freezes: opening every module of the real 12-layer GPT, one after another,
in the exported HTML page. The freeze this guards against was the layout running on the
page's main thread (issue 10: 1 s, 2 s, 14 s, 30 s, 51 s long tasks as attention modules
opened). What is asserted is what Chromium measured: its long-task entries (main-thread
tasks of 50 ms or more, PerformanceObserver "longtask"), not wall time."""

from __future__ import annotations

import pytest
import torch
from page_timing import install_long_task_observer, long_tasks, open_module
from playwright.sync_api import expect

from thunderviz.debug import Session
from thunderviz.models import GPT, GPTConfig
from thunderviz.widgets import export_html

pytestmark = pytest.mark.browser

GPT12 = GPTConfig(vocab_size=1000, block_size=64, n_layer=12, n_head=4, d_model=128)
LONG_MS = 100
# This machine's two cores are shared with other test runs (load averages of 6-10 seen): a
# 10 ms task of ours can be stretched past 100 ms by them, so the count of long tasks alone
# would measure the neighbours. The freeze is told apart two ways, both measured by Chromium:
# no task at all as long as FREEZE_MS (the freeze was 1-50 s), and no single run of the
# viewer's code (a handler: the click, a worker's answer, a timer) of LONG_MS or more, as
# named by the long-animation-frame entries. Laying out on the main thread breaks both.
FREEZE_MS = 500


@pytest.fixture(scope="module")
def gpt12_page(tmp_path_factory):
    torch.manual_seed(0)
    model = GPT(GPT12)
    idx = torch.randint(0, GPT12.vocab_size, (2, 64))
    return export_html(
        Session(model, idx, idx, record_transforms=False),
        tmp_path_factory.mktemp("gpt12") / "gpt12.html",
    )


def test_opening_every_module_of_the_12_layer_gpt_never_blocks_the_page(
    browser_context, gpt12_page
):
    page = browser_context.new_page()
    page.set_viewport_size({"width": 1400, "height": 900})
    install_long_task_observer(page)
    page.goto(gpt12_page.resolve().as_uri())
    for kind in ("forward", "backward"):
        expect(page.locator(f'.tv-graph-pane[data-tv-graph="{kind}"]')).to_have_attribute(
            "data-tv-ready", "true", timeout=60_000
        )
    long_tasks(page)  # the browser reports long tasks (raises if it cannot)
    assert page.evaluate("() => window.__tvLongScripts") is not None, (
        "no long-animation-frame entries"
    )

    opened = page.evaluate("() => window.thunderviz.handle.model.get('expanded')")
    plan = [f"blocks.{i}" for i in range(GPT12.n_layer) if f"blocks.{i}" not in opened]
    plan += [f"blocks.{i}.{part}" for i in range(GPT12.n_layer) for part in ("attn", "mlp")]
    steps = {module: open_module(page, module) for module in plan}
    page.close()

    # every pane was laid out in its worker, and everything was drawn open
    backward = steps[plan[-1]]["panes"]["backward"]
    assert backward["nodes"] > 300, backward
    report = {
        m: (
            [round(t) for t in s["longTasks"] if t >= LONG_MS],
            [(i, round(d)) for i, d in s["scripts"] if d >= LONG_MS],
        )
        for m, s in steps.items()
    }
    report = {m: r for m, r in report.items() if r[0] or r[1]}
    freezes = {m: tasks for m, (tasks, _) in report.items() if tasks and max(tasks) >= FREEZE_MS}
    assert not freezes, f"the page froze while opening modules: {freezes}"
    long_runs = {m: runs for m, (_, runs) in report.items() if runs}
    assert not long_runs, (
        f"the viewer's code ran {LONG_MS} ms or more at once while opening modules: {long_runs} "
        f"(long tasks ≥ {LONG_MS} ms per step: { {m: t for m, (t, _) in report.items()} })"
    )


def test_layout_runs_in_a_worker(browser_context, gpt12_page):
    page = browser_context.new_page()
    page.goto(gpt12_page.resolve().as_uri())
    for kind in ("forward", "backward"):
        pane = page.locator(f'.tv-graph-pane[data-tv-graph="{kind}"]')
        expect(pane).to_have_attribute("data-tv-ready", "true", timeout=60_000)
        expect(pane).to_have_attribute("data-tv-layout-where", "worker")
    page.close()
