"""`.tvz` files: round trip, and refusing what is not a thunderviz document (never by
unpickling or evaluating it)."""

from __future__ import annotations

import json
import os
import pickle

import pytest
import torch

import thunderviz as tv
from tests.debug.models import ResidualMLP
from thunderviz.debug import Session
from thunderviz.viz import TvzError, load, save
from thunderviz.viz.tvz import loads


@pytest.fixture(scope="module")
def session():
    torch.manual_seed(0)
    s = Session(ResidualMLP(), torch.randn(3, 8))
    s.record_backward()
    return s


@pytest.fixture(scope="module")
def doc(session):
    return session.document()


def test_round_trip_of_a_session_and_of_a_document(session, doc, tmp_path):
    p = save(session, tmp_path / "s.tvz")
    loaded = load(p)
    assert loaded["format"] == "thunderviz" and loaded["version"] == 1
    assert loaded["traces"].keys() == doc["traces"].keys()
    assert loaded["traces"]["backward"]["python"] == doc["traces"]["backward"]["python"]
    assert len(loaded["steps"]) == len(doc["steps"])
    q = save(doc, tmp_path / "d.tvz")
    assert load(q) == json.loads(json.dumps(doc))
    assert q.read_text(encoding="utf-8").startswith("{")


def test_a_document_with_nan_statistics_stays_strict_json(doc, tmp_path):
    bad = json.loads(json.dumps(doc))
    bad["grad_flow"]["x"] = {"norm": "nan", "status": "nan"}
    assert load(save(bad, tmp_path / "n.tvz"))["grad_flow"]["x"]["norm"] == "nan"
    bad["grad_flow"]["x"]["norm"] = float("nan")  # a float NaN is not JSON: refused on save
    with pytest.raises(TvzError, match="strict JSON"):
        save(bad, tmp_path / "m.tvz")
    with pytest.raises(TvzError, match="NaN is not JSON"):
        loads(
            '{"format": "thunderviz", "version": 1, "traces": {"forward": {"ops": []}}, "x": NaN}'
        )


def test_malformed_json_names_the_line(tmp_path):
    p = tmp_path / "broken.tvz"
    p.write_text(
        '{\n  "format": "thunderviz",\n  "version": 1,\n  "traces": {,\n}', encoding="utf-8"
    )
    with pytest.raises(TvzError, match=r"malformed JSON at line 4") as e:
        load(p)
    assert str(p) in str(e.value)


def test_newer_version_is_refused_with_both_versions_and_upgrade(doc, tmp_path):
    newer = dict(doc, version=2)
    p = tmp_path / "new.tvz"
    p.write_text(json.dumps(newer), encoding="utf-8")
    with pytest.raises(TvzError) as e:
        load(p)
    msg = str(e.value)
    assert "format version 2" in msg and "version 1" in msg and "Upgrade" in msg


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"format": "other", "version": 1, "traces": {}}', "not a thunderviz file"),
        ("[1, 2, 3]", "not a thunderviz file"),
        ('{"version": 1}', "not a thunderviz file"),
        ('{"format": "thunderviz", "traces": {"f": {"ops": []}}}', "missing key 'version'"),
        ('{"format": "thunderviz", "version": 1}', "missing key 'traces'"),
        (
            '{"format": "thunderviz", "version": "1", "traces": {"f": {"ops": []}}}',
            "positive integer",
        ),
        (
            '{"format": "thunderviz", "version": true, "traces": {"f": {"ops": []}}}',
            "positive integer",
        ),
        ('{"format": "thunderviz", "version": 1, "traces": {}}', "non-empty"),
        ('{"format": "thunderviz", "version": 1, "traces": {"f": {}}}', 'missing key "ops"'),
        (
            '{"format": "thunderviz", "version": 1, '
            '"traces": {"f": {"ops": [{"id": "a"}, {"id": "a"}]}}}',
            "appears twice",
        ),
        (
            '{"format": "thunderviz", "version": 1, "traces": {"f": {"ops": []}}, "steps": {}}',
            "steps: expected array or null, got object",
        ),
    ],
)
def test_invalid_documents_are_refused_clearly(content, message, tmp_path):
    p = tmp_path / "x.tvz"
    p.write_text(content, encoding="utf-8")
    with pytest.raises(TvzError, match=message):
        load(p)
    assert issubclass(TvzError, ValueError)


class _Payload:
    """Unpickling this creates a file: the marker proves whether anything ran."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("protocol", [0, 2, pickle.HIGHEST_PROTOCOL])
def test_a_pickle_payload_is_refused_without_running_it(protocol, tmp_path):
    marker = tmp_path / "pwned"
    p = tmp_path / "evil.tvz"
    p.write_bytes(pickle.dumps(_Payload(str(marker)), protocol=protocol))
    with pytest.raises(TvzError, match="not a thunderviz file"):
        load(p)
    assert not marker.exists()


def test_a_pickle_inside_a_valid_document_is_only_a_string(doc, tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Payload(str(marker)), protocol=0).decode("latin-1")
    d = json.loads(json.dumps(doc))
    d["title"] = payload
    loaded = load(save(d, tmp_path / "t.tvz"))
    assert loaded["title"] == payload and not marker.exists()


def test_binary_files_are_refused(tmp_path):
    z = tmp_path / "model.tvz"
    torch.save({"w": torch.ones(2)}, z)  # a zip archive
    with pytest.raises(TvzError, match="zip archive"):
        load(z)
    b = tmp_path / "bytes.tvz"
    b.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(TvzError, match="not UTF-8"):
        load(b)
    with pytest.raises(TvzError, match="cannot read"):
        load(tmp_path / "missing.tvz")
    assert os.listdir(tmp_path)  # nothing else happened


def test_save_of_a_jit_function_writes_the_traces_its_last_call_ran(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh())
    jitted = tv.jit(model)
    with pytest.raises(ValueError, match="not been called yet"):
        tv.save(jitted, tmp_path / "early.tvz")
    jitted(torch.randn(2, 4)).sum().backward()
    doc = tv.load(tv.save(jitted, tmp_path / "jit.tvz"))
    (backward,) = tv.last_backward_traces(jitted)
    saved_ops = [op["name"] for op in doc["traces"]["backward"]["ops"] if op.get("parent") is None]
    assert len(saved_ops) == len(backward.bound_symbols)
    assert {"forward", "augmented_forward", "backward"} <= set(doc["traces"])
