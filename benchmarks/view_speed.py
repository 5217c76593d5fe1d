"""How fast the debugger opens and reacts on the 12-layer GPT of the other benchmarks
(d_model 128, 4 heads, vocab 1000, batch 2, seq 64), in one process run:

* the view document (Python), and the page opening in Chromium to both graphs laid out and
  drawn (WebAssembly Graphviz in the page), on the default collapsed view;
* expanding one block, and one step of the recorded stepper;
* beside them, Graphviz `dot` laying out the same forward graph with nothing collapsed,
  which is what a picture-of-everything tool has to do.

Run: `.venv/bin/python -m benchmarks.view_speed` (needs `make frontend` and Chromium).
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from pathlib import Path

import torch
from playwright.sync_api import sync_playwright

import thunderviz as tv
from benchmarks.common import print_table
from thunderviz.models import GPT, GPTConfig
from thunderviz.viz.static import static_dot

CFG = GPTConfig(vocab_size=1000, block_size=64, n_layer=12, n_head=4, d_model=128)
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> None:
    torch.manual_seed(0)
    model = GPT(CFG)
    idx = torch.randint(0, CFG.vocab_size, (2, 64))
    session = tv.Session(model, idx, idx, record_transforms=False)
    session.record_backward()
    t0 = time.perf_counter()
    document = session.document()
    t_document = time.perf_counter() - t0

    out = Path(tempfile.mkdtemp()) / "gpt12.html"
    tv.export_html(document, out)

    t0 = time.perf_counter()
    full_dot = static_dot(document, "forward", max_nodes=10**6, collapse_above=10**6)
    subprocess.run(["dot", "-Tsvg", "-o", "/dev/null"], input=full_dot.encode(), check=True)
    t_full_dot = time.perf_counter() - t0
    n_full = sum(1 for op in document["traces"]["forward"]["ops"] if op["parent"] is None)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1500, "height": 900})
        t0 = time.perf_counter()
        page.goto(out.as_uri())
        for kind in ("forward", "backward"):
            page.wait_for_selector(f'.tv-graph-pane[data-tv-graph="{kind}"][data-tv-ready="true"]',
                                   timeout=60_000)
        t_open = time.perf_counter() - t0
        pane = page.locator('.tv-graph-pane[data-tv-graph="forward"]')
        nodes_default = int(pane.get_attribute("data-tv-nodes"))
        wasm_ms = float(pane.get_attribute("data-tv-wasm-init-ms") or 0)

        block = page.locator('g.node[data-tv-id="module:blocks.5"] .tv-toggle').first
        t0 = time.perf_counter()
        block.click()
        page.wait_for_function(
            """n => { const p = document.querySelector('.tv-graph-pane[data-tv-graph="forward"]');
                     return p.dataset.tvReady === "true" && Number(p.dataset.tvNodes) > n; }""",
            arg=nodes_default, timeout=30_000)
        t_expand = time.perf_counter() - t0
        nodes_expanded = int(pane.get_attribute("data-tv-nodes"))

        step = page.locator('[data-tv-action="step"]').first
        t0 = time.perf_counter()
        step.click()
        page.wait_for_function(
            """() => /step 1 \\//.test(document.querySelector('.tv-status').textContent)
                     && document.querySelector('.tv-current-step') !== null""", timeout=30_000)
        t_step = time.perf_counter() - t0
        browser.close()

    print(f"forward: {n_full} top-level ops; default view {nodes_default} nodes, "
          f"{nodes_expanded} with one block expanded; wasm Graphviz init {wasm_ms:.0f} ms")
    print_table("Opening and using the debugger, 12-layer GPT", [
        ("view document (Python)", t_document),
        ("open page -> both graphs drawn", t_open),
        ("expand one block", t_expand),
        ("one backward step", t_step),
        (f"dot -Tsvg, all {n_full} ops, nothing collapsed", t_full_dot),
    ], "open page -> both graphs drawn",
        target="default view under 1 s; expanding a module or a step under 300 ms; "
               "no layout of more than ~2,000 nodes")


if __name__ == "__main__":
    main()
