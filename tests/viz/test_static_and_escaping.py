"""Static pictures, and user strings (module names an attacker picked) that must stay text:
JSON string data in the document, escaped DOT, and SVG character data."""

from __future__ import annotations

import json
import time
import xml.etree.ElementTree as ET

import graphviz
import pytest
import torch
import torch.nn as nn

from tests.debug.models import HOSTILE_NAMES
from thunderviz.debug import Session
from thunderviz.models import GPT, GPTConfig
from thunderviz.viz import build_document, static_png, static_svg
from thunderviz.viz.static import dot_quote, static_dot, visible_graph

SVG_NS = "{http://www.w3.org/2000/svg}"
SVG_ELEMENTS = {"svg", "g", "title", "polygon", "polyline", "path", "ellipse", "text", "defs"}
SVG_ATTRIBUTES = {
    "width",
    "height",
    "viewBox",
    "id",
    "class",
    "transform",
    "fill",
    "stroke",
    "points",
    "d",
    "cx",
    "cy",
    "rx",
    "ry",
    "x",
    "y",
    "text-anchor",
    "font-family",
    "font-size",
    "font-weight",
    "font-style",
    "stroke-dasharray",
    "stroke-width",
    "fill-opacity",
    "stroke-opacity",
}


class HostileBlocks(nn.Module):
    """Two-op submodules (so each is drawn as a module, not as its op) under hostile names."""

    def __init__(self) -> None:
        super().__init__()
        for name in HOSTILE_NAMES:
            self.add_module(name, nn.Sequential(nn.Linear(2, 2), nn.Tanh()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self._modules.values():
            x = block(x)
        return x.sum()


@pytest.fixture(scope="module")
def hostile_doc():
    torch.manual_seed(0)
    s = Session(HostileBlocks(), torch.randn(3, 2), title=HOSTILE_NAMES[0])
    s.record_backward()
    return s.document()


def _strings_and_keys(obj, strings, keys):
    if isinstance(obj, dict):
        for k, v in obj.items():
            keys.append(k)
            _strings_and_keys(v, strings, keys)
    elif isinstance(obj, list):
        for v in obj:
            _strings_and_keys(v, strings, keys)
    elif isinstance(obj, str):
        strings.append(obj)


def test_hostile_module_names_are_plain_json_string_data(hostile_doc):
    strings: list[str] = []
    keys: list[str] = []
    _strings_and_keys(hostile_doc, strings, keys)
    module_paths = {op["module_path"] for op in hostile_doc["traces"]["forward"]["ops"]}
    for name in HOSTILE_NAMES:
        assert any(p == name or p.startswith(name + ".") for p in module_paths)
        assert any(name in s for s in strings)
    assert not any("<" in k or '"' in k for k in keys)  # names used as keys are identifiers
    text = json.dumps(hostile_doc, allow_nan=False)
    assert json.loads(text) == hostile_doc


def _check_svg(svg: str) -> ET.Element:
    root = ET.fromstring(svg)  # well-formed XML
    for el in root.iter():
        assert el.tag.startswith(SVG_NS), el.tag
        assert el.tag[len(SVG_NS) :] in SVG_ELEMENTS, el.tag
        for attr in el.attrib:
            assert attr in SVG_ATTRIBUTES, (el.tag, attr)
            assert not attr.lower().startswith("on")
    return root


def _texts(root: ET.Element) -> list[str]:
    return [el.text or "" for el in root.iter(SVG_NS + "text")]


def test_hostile_names_are_escaped_text_in_dot_and_svg(hostile_doc):
    for kind in ("forward", "backward"):
        svg = static_svg(hostile_doc, kind)
        root = _check_svg(svg)
        texts = _texts(root)
        for name in HOSTILE_NAMES:
            assert name in texts, (kind, name)  # drawn, exactly, as a cluster/module label
        assert f"{HOSTILE_NAMES[0]} — {kind}" in texts  # the title too
        graph = visible_graph(hostile_doc, kind)
        assert len(root.findall(f".//{SVG_NS}g[@class='node']")) == len(graph.nodes)
        assert len(root.findall(f".//{SVG_NS}g[@class='edge']")) == len(graph.edges)


@pytest.mark.parametrize(
    "text",
    [
        'a"b',
        "a\\b",
        "a\\N",
        "\\G\\E\\T",
        "x\\",
        "&amp;&lt;b&gt;",
        "<b>bold</b>",
        "<<html>>",
        '"]; n [label="x',
        "tab\tand\x07bell",
        "ünï©ødé ✓",
    ],
)
def test_dot_quote_shows_exactly_the_text(text):
    dot = f"digraph G {{ n0 [label={dot_quote(text)}]; }}"
    svg = graphviz.pipe("dot", "svg", dot.encode("utf-8")).decode("utf-8")
    root = _check_svg(svg)
    expected = text.replace("\t", " ").replace("\x07", " ")
    assert expected in _texts(root)


def test_static_svg_and_png_of_a_small_model():
    torch.manual_seed(0)
    from tests.debug.models import ResidualMLP

    d = Session(ResidualMLP(), torch.randn(2, 8), record_transforms=False).document()
    root = _check_svg(static_svg(d))
    texts = _texts(root)
    assert {"linear", "relu", "tanh", "return"} <= set(texts)
    png = static_png(d)
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    dot = static_dot(d)
    assert dot.startswith("digraph G {") and "fc1_weight" not in dot  # params are counts


def test_a_flat_program_beyond_max_nodes_is_cut_with_a_note():
    def many(x):
        for _ in range(40):
            x = torch.tanh(x) * 1.5
        return x.sum()

    d = build_document(
        Session(many, torch.randn(3), backward=False, record_transforms=False).forward
    )
    g = visible_graph(d, "forward", max_nodes=10)
    ops = [n for n in g.nodes.values() if n["type"] == "op"]
    assert len(ops) == 10
    more = [n for n in g.nodes.values() if n["type"] == "more"]
    assert more and "71 more ops" in more[0]["label"]
    _check_svg(static_svg(d, max_nodes=10))


@pytest.mark.slow
def test_gpt_12_layers_static_picture_is_the_collapsed_module_view():
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=12, d_model=128, n_head=4, vocab_size=1000))
    idx = torch.randint(0, 1000, (2, 64))
    d = Session(m, idx, idx, backward=False, record_transforms=False).document()
    g = visible_graph(d, "forward")
    modules = sorted(n["label"] for n in g.nodes.values() if n["type"] == "module")
    assert modules == sorted(f"blocks.{i}" for i in range(12))  # embeddings -> 12 blocks -> head
    labels = [n["label"] for n in g.nodes.values() if n["type"] == "op"]
    assert labels.count("embedding") == 2 and "cross_entropy" in labels and "layer_norm" in labels
    t0 = time.perf_counter()
    svg = static_svg(d)
    took = time.perf_counter() - t0
    assert took < 5.0
    root = _check_svg(svg)
    assert "blocks.11" in _texts(root)
