"""The layering of docs/architecture.md holds: lower layers never import higher ones, and no
module hides an import inside a function."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "thunderviz"
# Bottom to top. A module may import its own layer and any layer listed before it.
LAYERS = [
    "core",
    "prims",
    "capture",
    "transforms",
    "autodiff",
    "executor",
    "viz",
    "debug",
    "distributed",
    "widgets",
]
TOP_LEVEL = {"__init__", "models", "__main__"}  # the public facade and user-level examples
# The imports made on first use: the facade's public names a script that only calls `jit`
# never uses (`thunderviz.__getattr__`): ~0.2 s of ipywidgets, ~0.02 s of the rest.
LAZY_IMPORTS = {
    "__init__.py": {
        "thunderviz.widgets",
        "thunderviz.debug",
        "thunderviz.viz",
        "thunderviz.distributed",
    }
}


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "thunderviz" or len(parts) < 2:
        return None
    return parts[1]


def modules() -> list[pathlib.Path]:
    return sorted(p for p in ROOT.rglob("*.py") if "static" not in p.parts)


def imports(path: pathlib.Path) -> tuple[list[str], list[tuple[int, str]]]:
    tree = ast.parse(path.read_text())
    top, nested = [], []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            target = top if node.col_offset == 0 else nested
            for n in names:
                target.append(n if target is top else (node.lineno, n))
    return top, nested


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_layers_only_import_downwards(path):
    rel = path.relative_to(ROOT)
    own = rel.parts[0] if len(rel.parts) > 1 else rel.stem
    top, nested = imports(path)
    nested = [(line, n) for line, n in nested if n not in LAZY_IMPORTS.get(str(rel), ())]
    assert not nested, f"function-local imports in {rel}: {nested}"
    if own in TOP_LEVEL:
        return
    assert own in LAYERS, f"{rel} is in no layer of docs/architecture.md"
    for name in top:
        layer = layer_of(name)
        if layer is None or layer in TOP_LEVEL:
            continue
        assert LAYERS.index(layer) <= LAYERS.index(own), f"{rel} ({own}) imports {name} ({layer})"


def test_what_jit_does_not_use_is_imported_on_first_use():
    # a training script that only calls jit pays for neither ipywidgets nor the debugger,
    # the views and distributed; it runs; the names still resolve, from the package and
    # with `from thunderviz import ...`, and every public name does
    code = (
        "import sys, torch, thunderviz as tv\n"
        "later = ['ipywidgets', 'graphviz', 'thunderviz.widgets', 'thunderviz.debug',\n"
        "         'thunderviz.viz', 'thunderviz.distributed']\n"
        "f = tv.jit(torch.nn.Linear(3, 2))\n"
        "f(torch.randn(4, 3)).sum().backward()\n"
        "assert not [m for m in later if m in sys.modules], later\n"
        "from thunderviz import DebuggerWidget, export_html, load_ipython_extension\n"
        "assert tv.show.__module__ == 'thunderviz.widgets.show'\n"
        "assert 'ipywidgets' in sys.modules\n"
        "from thunderviz import Session, static_svg\n"
        "assert tv.compare.__module__ == 'thunderviz.debug.compare'\n"
        "assert tv.distributed.launch.__module__ == 'thunderviz.distributed.launch'\n"
        "assert all(getattr(tv, n) is not None for n in tv.__all__)\n"
        "assert not hasattr(tv, 'no_such_name')\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT.parent)
