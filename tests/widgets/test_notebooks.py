"""The example notebooks: committed without outputs, and they run headless (nbclient, a real
kernel) with the outputs they promise."""

from __future__ import annotations

import re
from pathlib import Path

import nbclient
import nbformat
import pytest

from thunderviz.widgets.widget import VIEW_MIME, WIDGET_MIME

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NOTEBOOKS = ["quickstart.ipynb", "find_the_nan.ipynb", "custom_transform.ipynb"]


def run(name: str, tmp_path: Path) -> nbformat.NotebookNode:
    nb = nbformat.read(str(EXAMPLES / name), as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    return nb


def outputs(nb: nbformat.NotebookNode) -> tuple[str, list[dict]]:
    """All stdout text, and every rich output's data."""
    text, rich = [], []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            assert out["output_type"] != "error", f"{out.get('ename')}: {out.get('evalue')}"
            if out["output_type"] == "stream" and out["name"] == "stdout":
                text.append(out["text"])
            elif "data" in out:
                rich.append(out["data"])
    return "".join(text), rich


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_committed_notebooks_have_no_outputs(name):
    nb = nbformat.read(str(EXAMPLES / name), as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, name
    assert "widgets" not in nb.metadata


def assert_shows_the_debugger(rich: list[dict]) -> None:
    views = [d for d in rich if VIEW_MIME in d]
    widgets = [d for d in rich if WIDGET_MIME in d]
    assert views and widgets, "a debugger output: its static twin and the widget view"
    assert views[0][VIEW_MIME]["format"] == "thunderviz"


@pytest.mark.slow
def test_quickstart_runs(tmp_path):
    text, rich = outputs(run("quickstart.ipynb", tmp_path))
    assert (
        "def forward(x, target," in text and "def backward(saved_for_backward, cotangents)" in text
    )
    assert "saved for backward:" in text
    assert "selected: torch.nn.functional.linear in module 'block.0'" in text
    assert "after 3 steps: <step 2:" in text
    assert "all gradients match torch.autograd: True" in text
    assert_shows_the_debugger(rich)


@pytest.mark.slow
def test_find_the_nan_runs(tmp_path):
    text, rich = outputs(run("find_the_nan.ipynb", tmp_path))
    assert "NaN in proj.weight.grad: True" in text
    assert re.search(r"why: NaN/Inf in t\d+", text)
    line = re.search(r"your line: (\S+) -> (.*)", text)
    assert line and line.group(2).strip() == "dist = torch.sqrt((diff**2).sum(-1))"
    assert "its forward op: <BoundSymbol" in text and "torch.sqrt" in text
    assert "NaN/Inf anywhere in the backward: False" in text
    assert_shows_the_debugger(rich)


@pytest.mark.slow
def test_custom_transform_runs(tmp_path):
    text, rich = outputs(run("custom_transform.ipynb", tmp_path))
    assert "REPLACE torch.tanh +5 -1" in text
    diff = re.search(r"max difference: (\S+)", text)
    assert diff and float(diff.group(1)) < 1e-5
    assert "Constructed by tanh as exp" in text
    assert "'tanh as exp'" in text
    assert_shows_the_debugger(rich)
    transforms = [d[VIEW_MIME]["transforms"] for d in rich if VIEW_MIME in d][0]
    assert "tanh as exp" in [t["name"] for t in transforms]
