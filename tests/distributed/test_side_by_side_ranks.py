"""The ranks' side-by-side document, from the files 2 real gloo ranks saved (conftest's one
spawn): every rank's view, per-rank norms of the backward ops with the collectives marked,
and the desync finder's first divergence listed."""

from __future__ import annotations

import pytest

import thunderviz as tv
from tests.distributed import debug_checks as checks
from thunderviz.debug.stats import json_number
from thunderviz.distributed import compare, side_by_side
from thunderviz.viz.schema import check_document
from thunderviz.widgets.sidebyside import ranks_document

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def saved(all_ranks):
    return [r["sessions"] for r in all_ranks]


def test_a_scaled_loss_is_listed_as_the_first_desync(saved):
    paths = [saved[0]["scaled_loss"], saved[1]["scaled_loss"]]
    doc = ranks_document(paths)
    check_document(doc)
    comparison = doc["comparison"]
    assert comparison["kind"] == "ranks" and comparison["labels"] == ["rank 0", "rank 1"]
    assert len(comparison["documents"]) == 1
    found = compare(paths)
    [first] = comparison["divergences"]
    assert first["what"] == "first desync" and first["op"] == found.op == "torch.Tensor.mul"
    assert first["ops"][0] == found.op_id and first["ranks"] == [0, 1]
    assert checks.SCALED_LOSS_LINE in first["source"]["code"]


def test_ddp_ranks_carry_each_ranks_norms_and_mark_the_all_reduces(saved):
    paths = [saved[0]["ddp"]["ddp"], saved[1]["ddp"]["ddp"]]
    doc = ranks_document(paths, replicated=saved[0]["ddp"]["replicated"])
    comparison = doc["comparison"]
    assert comparison["divergences"] == []  # DDP's all-reduce makes the gradients agree
    with_norms = [m for m in comparison["matches"] if "norms" in m]
    rows = [*side_by_side(paths, "forward"), *side_by_side(paths, "backward")]
    first_rows = {r.op_id: r for r in reversed(rows)}
    assert [m["ops"][0] for m in with_norms] == list(dict.fromkeys(r.op_id for r in rows))
    for m in with_norms:  # (nan written "nan", as the view document writes it)
        assert m["norms"] == [json_number(n) for n in first_rows[m["ops"][0]].norms], m
    assert any(m["collective"] and m["ops"][0].startswith("backward:") for m in with_norms)


def test_show_of_a_list_of_rank_files_is_the_ranks_side_by_side(saved):
    widget = tv.show([saved[0]["scaled_loss"], saved[1]["scaled_loss"]])
    assert widget.document["comparison"]["kind"] == "ranks" and widget.live is False
    assert widget.document["comparison"]["divergences"][0]["what"] == "first desync"
