"""The exported page most viewer tests drive: a small real GPT (two blocks) through a
`Session`, written by `export_html`, and the two ways tests reach into it (a graph pane,
waiting until both panes are drawn)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from playwright.sync_api import expect

from thunderviz.debug import Session
from thunderviz.models import GPT, GPTConfig
from thunderviz.widgets import export_html

SMALL_GPT = GPTConfig(vocab_size=64, block_size=16, n_layer=2, n_head=2, d_model=32)
TIMEOUT = 60_000


def export_small_gpt(folder: Path, config: GPTConfig = SMALL_GPT) -> tuple[Path, dict]:
    """The exported page of a seeded GPT on a (2, 16) batch, and the document it shows."""
    torch.manual_seed(0)
    model = GPT(config)
    idx = torch.randint(0, config.vocab_size, (2, 16))
    session = Session(model, idx, idx, record_transforms=False)
    return export_html(session, folder / "gpt.html"), session.document()


def pane(page: Any, kind: str) -> Any:
    """The graph pane of one trace kind ("forward", "backward", ...)."""
    return page.locator(f'.tv-graph-pane[data-tv-graph="{kind}"]')


def ready(page: Any) -> None:
    """Wait until the forward and backward panes are laid out and drawn."""
    for kind in ("forward", "backward"):
        expect(pane(page, kind)).to_have_attribute("data-tv-ready", "true", timeout=TIMEOUT)


def open_page(context: Any, path: Path) -> Any:
    """A new 1400x900 page of the exported viewer at `path`, once both panes are drawn."""
    page = context.new_page()
    page.set_viewport_size({"width": 1400, "height": 900})
    page.goto(path.resolve().as_uri())
    ready(page)
    return page
