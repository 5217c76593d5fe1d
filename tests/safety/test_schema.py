"""One schema for the view document: Python's checker agrees with the shared fixtures (which
node's test of the viewer's checker reads too) and with an independent JSON Schema
implementation (the `jsonschema` package); and a document that passes is safe for every
Python reader (static SVG, HTML export, the widget's MIME bundle)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.safety.schema_strategy import documents
from thunderviz.viz.schema import MAX_DEPTH, SCHEMA, SCHEMA_PATH, js_twin
from thunderviz.viz.static import static_svg
from thunderviz.viz.tvz import TvzError, loads, validate
from thunderviz.widgets.html_export import render_html
from thunderviz.widgets.widget import DebuggerWidget

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "frontend" / "test" / "fixtures"
CASES = json.loads((FIXTURES / "schema" / "cases.json").read_text(encoding="utf-8"))
BASE_TEXT = (FIXTURES / "mlp.tvz.json").read_text(encoding="utf-8")
REFERENCE = jsonschema.Draft202012Validator(SCHEMA)


def test_the_viewer_checks_the_same_schema():
    assert (ROOT / "frontend" / "src" / "viewschema.js").read_text(encoding="utf-8") == js_twin()
    assert (
        json.loads((ROOT / "docs" / "view-format.schema.json").read_text(encoding="utf-8"))
        == SCHEMA
    )
    jsonschema.Draft202012Validator.check_schema(SCHEMA)  # a valid JSON Schema itself
    assert SCHEMA_PATH.parent.name == "viz"  # shipped inside the package, for load()


def _apply(doc: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    target = doc
    for key in path[:-1]:
        target = target[key]
    if isinstance(target, list):
        assert path[-1] < len(target), f"fixture path {path} is not in the base document"
    target[path[-1]] = value
    return doc


def _case_text(case: dict[str, Any]) -> str:
    if "text" in case:
        return case["text"]
    return json.dumps(_apply(json.loads(BASE_TEXT), *case["set"]), ensure_ascii=False)


def _consumers(doc: dict[str, Any]) -> None:
    """Every Python reader of a view document, on a document that validated."""
    for kind in doc["traces"]:
        static_svg(doc, kind, max_nodes=60)
    render_html(doc, static=False)
    DebuggerWidget(doc).static_bundle()


@pytest.mark.parametrize("case", CASES["cases"], ids=[c["name"][:60] for c in CASES["cases"]])
def test_shared_fixture_case(case):
    text = _case_text(case)
    if case["valid"]:
        doc = loads(text)
        if "text" not in case and not any(c in text for c in ("\ud800", "m" * 1000)):
            _consumers(doc)
    else:
        with pytest.raises(TvzError) as err:
            loads(text)
        if "error_path" in case:
            where = case["error_path"] or "the document"
            assert f"not a valid thunderviz file: {where}: " in str(err.value)
    if "set" in case and not case.get("extra_rule"):
        # An independent implementation of JSON Schema reads the schema the same way.
        assert REFERENCE.is_valid(json.loads(text)) == case["valid"]


def test_consumers_survive_long_names_and_surrogates():
    doc = json.loads(BASE_TEXT)
    doc["traces"]["forward"]["ops"][0]["module_path"] = "m" * 20000  # Graphviz failed on this
    doc["traces"]["forward"]["ops"][1]["module_path"] = "a\ud800b"
    doc["title"] = "t" * 20000
    _consumers(loads(json.dumps(doc)))


def test_deep_nesting_is_refused_clearly():
    deep = "[" * 100_000 + "]" * 100_000
    text = '{"format": "thunderviz", "version": 1, "traces": {"f": {"ops": []}}, "x": ' + deep + "}"
    with pytest.raises(TvzError, match="nested too deeply|nested deeper"):
        loads(text)
    value: Any = []
    for _ in range(100_000):  # in memory (a widget's document), deeper than any parser builds
        value = [value]
    doc = {"format": "thunderviz", "version": 1, "traces": {"f": {"ops": []}}, "x": value}
    with pytest.raises(TvzError, match=f"nested deeper than {MAX_DEPTH} levels"):
        validate(doc)


# --- fuzz: one field of a real document replaced by any JSON value ------------------------
_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["nan", "inf", "forward:0", "x", ""]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


_BASE = json.loads(BASE_TEXT)
# The transforms' recorded texts and trace copies are many paths of one kind; sample the rest.
_BASE_PATHS = [p for p in _paths(_BASE) if p and not (p[0] == "transforms" and len(p) > 4)]


@settings(
    max_examples=int(os.environ.get("TV_FUZZ_EXAMPLES", 60)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(path=st.sampled_from(_BASE_PATHS), value=_json)
def test_fuzz_one_field_then_every_consumer(path, value):
    doc = copy.deepcopy(_BASE)
    _apply(doc, list(path), value)
    text = json.dumps(doc)
    try:
        loaded = loads(text)
    except TvzError as e:
        if not any(rule in str(e) for rule in ("appears twice", "is not an earlier op")):
            # (the rules beyond JSON Schema a mutation can break)
            assert not REFERENCE.is_valid(json.loads(text)), str(e)
        return
    assert REFERENCE.is_valid(json.loads(text))
    _consumers(loaded)


@settings(
    max_examples=int(os.environ.get("TV_FUZZ_EXAMPLES", 60)),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(documents())
def test_documents_drawn_from_the_schema_go_through_every_consumer(doc):
    text = json.dumps(doc)
    assert REFERENCE.is_valid(json.loads(text))  # valid by construction, says jsonschema too
    _consumers(loads(text))
