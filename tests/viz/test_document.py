"""The view document's structure (docs/view-format.md) against the traces it describes."""

from __future__ import annotations

import json
import math
import re
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import thunderviz as tv
from thunderviz.autodiff.saved import UNPACK
from thunderviz.core.codegen import bsym_statement
from thunderviz.debug import Session
from thunderviz.models import GPT, GPTConfig
from thunderviz.viz import build_document

ID = re.compile(r"^(forward|augmented_forward|backward):(\d+(?:\.\d+)*)$")
STATUSES = {"ok", "zero", "nan", "inf", "no_grad", "unused", "detached", "integer"}


class WithBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.head = nn.Linear(16, 4)
        self.register_buffer("offset", torch.full((16,), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc1(x)) + self.offset
        y = self.head(h) * self.head(h)  # the same call twice: CSE has work
        return y.sum()


@pytest.fixture(scope="module")
def session():
    torch.manual_seed(0)
    s = Session(WithBuffer(), torch.randn(4, 8))
    s.record_backward()
    return s


@pytest.fixture(scope="module")
def doc(session):
    return session.document()


def _bsym_at(trace, op_id):
    path = [int(i) for i in op_id.split(":")[1].split(".")]
    b = trace.bound_symbols[path[0]]
    for j in path[1:]:
        b = b.subsymbols[j]
    return b


def _traces(session):
    return {
        "forward": session.forward,
        "augmented_forward": session.result.augmented_forward,
        "backward": session.result.backward,
    }


def test_top_level_and_strict_json(doc):
    assert doc["format"] == "thunderviz" and doc["version"] == 1
    assert doc["title"] == "WithBuffer" and doc["created_by"].startswith("thunderviz ")
    assert set(doc["traces"]) == {"forward", "augmented_forward", "backward"}
    for key in ("saved", "steps", "transforms"):
        assert isinstance(doc[key], list)
    text = json.dumps(doc, allow_nan=False)
    assert json.loads(text) == doc


def test_op_ids_are_unique_and_follow_the_subsymbol_tree(session, doc):
    seen = set()
    for kind, view in doc["traces"].items():
        assert view["kind"] == kind
        trace = _traces(session)[kind]
        assert len([op for op in view["ops"] if op["parent"] is None]) == len(trace.bound_symbols)
        assert len(view["ops"]) == sum(1 for _ in trace.walk())
        position = {}
        for i, op in enumerate(view["ops"]):
            m = ID.match(op["id"])
            assert m and m.group(1) == kind, op["id"]
            assert op["id"] not in seen
            seen.add(op["id"])
            position[op["id"]] = i
            path = m.group(2).split(".")
            assert op["level"] == len(path) - 1
            expected_parent = None if len(path) == 1 else f"{kind}:{'.'.join(path[:-1])}"
            assert op["parent"] == expected_parent
            if expected_parent is not None:
                assert position[expected_parent] < i  # parents before children
            b = _bsym_at(trace, op["id"])
            assert op["sym_id"] == b.sym.id and op["label"] == b.sym.label
            assert op["outputs"] == [p.name for p in b.flat_proxy_outs if p.name in view["tensors"]]


def test_every_edge_names_a_tensor_and_producers_consumers_are_ops(doc):
    for view in doc["traces"].values():
        ids = {op["id"] for op in view["ops"]}
        tensors = view["tensors"]
        for op in view["ops"]:
            for name in (*op["inputs"], *op["outputs"]):
                assert name in tensors, f"{op['id']} uses unknown tensor {name}"
        for name in (*view["inputs"], *view["outputs"]):
            assert name in tensors
        for name, t in tensors.items():
            assert t["producer"] is None or t["producer"] in ids
            assert all(c in ids for c in t["consumers"])
            if t["producer"] is not None:
                producer = next(op for op in view["ops"] if op["id"] == t["producer"])
                assert name in producer["outputs"]
            assert t["kind"] in {"input", "param", "buffer", "intermediate", "output", "number"}


def test_tensor_kinds(doc):
    fwd = doc["traces"]["forward"]["tensors"]
    assert fwd["x"]["kind"] == "input" and fwd["x"]["shape"] == [4, 8]
    assert fwd["fc1_weight"]["kind"] == "param" and fwd["fc1_weight"]["requires_grad"] is True
    assert fwd["offset"]["kind"] == "buffer" and fwd["offset"]["requires_grad"] is False
    (out,) = doc["traces"]["forward"]["outputs"]
    assert fwd[out]["kind"] == "output" and fwd[out]["dtype"] == "float32"
    assert fwd["fc1_weight"]["producer"] is None
    assert fwd["x"]["consumers"] == ["forward:0"]
    assert doc["traces"]["backward"]["inputs"] == ["saved_for_backward", "cotangents"]


def test_numbers_are_tensors_of_kind_number():
    tr = tv.trace(lambda x, k: (x * k).sum(), torch.randn(3), 2.5)
    d = build_document(tr)
    assert set(d["traces"]) == {"forward"}
    k = d["traces"]["forward"]["tensors"]["k"]
    assert k["kind"] == "number" and k["value"] == 2.5 and k["dtype"] == "float"


def test_fwd_op_links_point_at_the_forward_op_that_made_them(session, doc):
    forward_ops = {op["id"]: op for op in doc["traces"]["forward"]["ops"]}
    fwd = session.forward.bound_symbols
    for kind in ("augmented_forward", "backward"):
        trace = _traces(session)[kind]
        for op in doc["traces"][kind]["ops"]:
            b = _bsym_at(trace, op["id"])
            if op["fwd_op"] is None:
                assert kind == "backward" and b.sym.id == UNPACK.id
                continue
            target = forward_ops[op["fwd_op"]]
            assert target["parent"] is None
            index = int(op["fwd_op"].split(":")[1])
            if op["parent"] is None:
                made_by = b.fwd_bsym if b.fwd_bsym is not None else b
                assert made_by is fwd[index] or any(made_by is s for s in fwd[index].walk())


def test_line_ranges_show_each_op_in_the_printed_python(session, doc):
    for kind, view in doc["traces"].items():
        trace = _traces(session)[kind]
        assert view["python"] == str(trace)
        lines = view["python"].split("\n")
        for op in view["ops"]:
            b = _bsym_at(trace, op["id"])
            if op["line"] is None:
                assert op["level"] > 1  # deeper than print_depth 1
                continue
            shown = lines[op["line"] - 1 : op["line_end"]]
            statement = bsym_statement(b)
            assert any(line.strip().removeprefix("# ").startswith(statement) for line in shown), (
                op["id"],
                shown,
                statement,
            )


def test_source_carries_the_users_line_and_context(doc):
    op = doc["traces"]["forward"]["ops"][0]
    src = op["source"]
    assert src["file"] == __file__ and src["code"] == "h = F.relu(self.fc1(x)) + self.offset"
    context = dict(src["context"])
    assert context[src["line"]].strip() == src["code"]
    assert min(context) == src["line"] - 3 and max(context) == src["line"] + 3


def test_saved_tensors(session, doc):
    aug_ids = {op["id"] for op in doc["traces"]["augmented_forward"]["ops"]}
    bwd_ids = {op["id"] for op in doc["traces"]["backward"]["ops"]}
    fwd_ids = {op["id"] for op in doc["traces"]["forward"]["ops"]}
    assert [s["name"] for s in doc["saved"]] == [s.name for s in session.result.saved_for_backward]
    for s in doc["saved"]:
        assert s["name"] in doc["traces"]["augmented_forward"]["outputs"]
        assert s["producer"] is None or s["producer"] in aug_ids
        assert s["fwd_op"] is None or s["fwd_op"] in fwd_ids
        assert s["consumers"] and all(c in bwd_ids for c in s["consumers"])
        assert s["bytes"] == 4 * math.prod(s["shape"])
        assert s["recomputed"] is False


def test_steps_grad_flow_and_stats(doc):
    bwd = doc["traces"]["backward"]
    assert [s["op"] for s in doc["steps"]] == [
        op["id"] for op in bwd["ops"] if op["parent"] is None
    ]
    assert all(name in bwd["tensors"] for s in doc["steps"] for name in s["outputs"])
    finished = {name for s in doc["steps"] for name in s["grads"]}
    assert {"fc1_weight", "fc1_bias", "head_weight", "head_bias"} <= finished
    assert set(doc["grad_flow"]) <= set(doc["traces"]["forward"]["tensors"])
    assert all(e["status"] in STATUSES for e in doc["grad_flow"].values())
    assert doc["grad_flow"]["offset"]["status"] == "no_grad"
    assert doc["traces"]["forward"]["tensors"]["x"]["stats"]["numel"] == 32
    some = next(t for t in bwd["tensors"].values() if t["kind"] == "intermediate")
    assert some["stats"] is not None and len(some["stats"]["hist"]["counts"]) == 16


def test_transform_runs(session, doc):
    runs = {r["name"]: r for r in doc["transforms"]}
    assert {"vjp", "dce", "cse"} <= set(runs)
    for r in runs.values():
        before_ids = {op["id"] for op in r["trace_before"]["ops"]}
        for step in r["steps"]:
            assert step["visited"] is None or step["visited"] in before_ids
            assert step["visit_type"] in {
                "INSERT_AFTER",
                "INSERT_BEFORE",
                "REPLACE",
                "NO_OP",
                "REMOVE",
            }
            assert step["text"] is None or isinstance(step["text"], str)
    cse = runs["cse"]
    assert cse["before"] == str(session.forward)
    replaced = [s for s in cse["steps"] if s["visit_type"] == "REPLACE"]
    assert replaced and replaced[0]["removed"] and replaced[0]["removed"][0] not in cse["after"]
    for r in (runs["cse"], runs["dce"]):  # the last step's text is the result (less provenance)
        assert r["steps"][-1]["text"].split("def forward")[1] == r["after"].split("def forward")[1]
    vjp = runs["vjp"]
    assert vjp["after"] == str(session.result.backward)
    assert all(s["visit_type"] == "INSERT_AFTER" for s in vjp["steps"])
    inserted = [line for s in vjp["steps"] for line in s["inserted"]]
    assert inserted and all(line in s["text"] for s in vjp["steps"] for line in s["inserted"])


def test_documents_from_traces_and_results():
    torch.manual_seed(0)
    m = WithBuffer()
    forward = tv.trace(m, torch.randn(2, 8))
    result = tv.autodiff(forward)
    d = build_document(result)
    assert set(d["traces"]) == {"forward", "augmented_forward", "backward"}
    assert d["saved"] and d["steps"] == [] and d["transforms"] == []
    d2 = build_document({"backward": result.backward})
    assert d2["traces"]["backward"]["ops"][0]["fwd_op"] is None
    with pytest.raises(TypeError):
        build_document(42)


@pytest.mark.slow
def test_gpt_12_layers_document_builds_well_under_a_second():
    torch.manual_seed(0)
    m = GPT(GPTConfig(n_layer=12, d_model=128, n_head=4, vocab_size=1000))
    idx = torch.randint(0, 1000, (2, 64))
    s = Session(m, idx, idx)
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        d = s.document()
        best = min(best, time.perf_counter() - t0)
    assert best < 1.0, f"document build took {best:.2f} s"
    assert len(d["traces"]["forward"]["ops"]) > 800 and len(d["traces"]["backward"]["ops"]) > 500
    json.dumps(d, allow_nan=False)
