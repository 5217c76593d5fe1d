"""examples/distributed.ipynb: committed without outputs, and it runs headless (a real
kernel launching 2 gloo ranks) with the outputs it promises."""

from __future__ import annotations

from pathlib import Path

import nbclient
import nbformat
import pytest

from thunderviz.widgets.widget import VIEW_MIME, WIDGET_MIME

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "distributed.ipynb"


def test_committed_notebook_has_no_outputs():
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None
    assert "widgets" not in nb.metadata


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_notebook_launches_two_ranks_and_finds_the_planted_desync(tmp_path):
    nb = nbformat.read(str(NOTEBOOK), as_version=4)
    nbclient.NotebookClient(
        nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    text, rich = [], []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", f"{out.get('ename')}: {out.get('evalue')}"
            if out["output_type"] == "stream" and out["name"] == "stdout":
                text.append(out["text"])
            elif "data" in out:
                rich.append(out["data"])
    text = "".join(text)
    losses = text.split("losses: [", 1)[1].split("]", 1)[0].split(", ")
    assert len(losses) == 2 and losses[0] == losses[1]  # the all-reduce made them one
    assert "torch.ops._c10d_functional.all_reduce(ct_" in text  # the VJP, in the backward
    assert "divergence: None" in text
    assert "op: torch.Tensor.mul | line: tp_ranks.py:" in text
    assert "loss = loss * (2.0 if dist.get_rank() == 1 else 1.0) | ranks: (0, 1)" in text
    assert any(VIEW_MIME in d for d in rich) and any(WIDGET_MIME in d for d in rich)
