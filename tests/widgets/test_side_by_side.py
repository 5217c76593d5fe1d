"""The side-by-side document: two real runs of a tiny GPT (one with an activation swapped)
compared, schema-valid in both readers' terms, and its matches the comparison's pairs."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from thunderviz.models import GPT, GPTConfig
from thunderviz.viz.schema import SchemaViolation, check_document
from thunderviz.widgets.sidebyside import comparison_document, is_side_by_side


@pytest.fixture(scope="module")
def runs():
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=64, block_size=8, n_layer=2, n_head=2, d_model=16))
    idx = torch.randint(0, 64, (2, 8))
    changed = copy.deepcopy(model)
    changed.blocks[1].mlp[1] = nn.ReLU()
    return tv.Session(model, idx, idx), tv.Session(changed, idx, idx)


@pytest.fixture(scope="module")
def doc(runs):
    return comparison_document(*runs)


def test_the_document_holds_both_runs_and_the_comparisons_pairs(runs, doc):
    a, b = runs
    c = tv.compare(a, b)
    comparison = doc["comparison"]
    check_document(doc)
    assert comparison["kind"] == "runs" and len(comparison["documents"]) == 1
    forward_pairs = [m["ops"] for m in comparison["matches"] if m["ops"][0].startswith("forward:")]
    assert forward_pairs == [[r.op_a, r.op_b] for r in c.rows]
    ids_b = {op["id"] for t in comparison["documents"][0]["traces"].values() for op in t["ops"]}
    ids_a = {op["id"] for t in doc["traces"].values() for op in t["ops"]}
    assert all(m["ops"][0] in ids_a and m["ops"][1] in ids_b for m in comparison["matches"])
    # each backward pair comes from one matched forward pair, on both sides
    fwd_of = [
        {op["id"]: op.get("fwd_op") for t in d["traces"].values() for op in t["ops"]}
        for d in (doc, comparison["documents"][0])
    ]
    pairs = {tuple(p) for p in forward_pairs}
    backward = [m["ops"] for m in comparison["matches"] if m["ops"][0].startswith("backward:")]
    assert backward and all((fwd_of[0][x], fwd_of[1][y]) in pairs for x, y in backward)


def test_the_first_divergence_is_the_swapped_activation(runs, doc):
    first = doc["comparison"]["divergences"][0]
    assert first["what"] == "first forward difference" and first["module"] == "blocks.1.mlp.1"
    assert first["source"] and first["source"]["line"] > 0 and first["value"] > 1e-3
    row = next(m for m in doc["comparison"]["matches"] if m["ops"] == first["ops"])
    assert row["forward"] == first["value"] and "relu" in row["note"]


def test_malformed_comparisons_are_refused(doc):
    for breakage, where in [
        (lambda c: c.pop("matches"), "comparison"),
        (lambda c: c["matches"].append({"ops": [3]}), "comparison.matches"),
        (lambda c: c["documents"][0].pop("traces"), "comparison.documents[0]"),
        (
            lambda c: c["documents"][0]["traces"]["forward"]["ops"][0].update(parent="forward:999"),
            "comparison.documents[0].traces.forward.ops[0].parent",
        ),
        (
            lambda c: c["documents"][0].update(comparison=copy.deepcopy(c)),
            "comparison.documents[0]",
        ),
    ]:
        broken = copy.deepcopy(doc)
        breakage(broken["comparison"])
        with pytest.raises(SchemaViolation) as err:
            check_document(broken)
        assert err.value.path.startswith(where)


def test_what_counts_as_a_side_by_side_request(runs):
    assert is_side_by_side(runs) and is_side_by_side(["r0.tvz", "r1.tvz"])
    assert not is_side_by_side("r0.tvz") and not is_side_by_side((runs[0],))


def test_show_and_export_html_open_two_runs_side_by_side(runs, tmp_path):
    widget = tv.show(*runs)
    assert widget.document["comparison"]["kind"] == "runs" and widget.live is False
    assert (
        tv.show(runs).document["comparison"]["matches"] == widget.document["comparison"]["matches"]
    )
    path = tv.export_html(runs, tmp_path / "compare.html")
    assert '"comparison"' in path.read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="two of them"):
        tv.show(runs * 2)


def test_a_comparison_saves_as_tvz_and_opens_again(doc, tmp_path):
    path = tv.save(doc, tmp_path / "compare.tvz")
    again = tv.load(path)
    assert again["comparison"]["matches"] == doc["comparison"]["matches"]
    assert tv.show(path).document["comparison"]["divergences"] == doc["comparison"]["divergences"]
