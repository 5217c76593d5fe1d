"""The stepper golden (frontend/test/fixtures/stepper_golden.json), shared with
frontend/test/stepper_golden.test.js: where each stepping action stops, from a given step,
under given breakpoints, on one small program's backward (18 steps; a NaN at step 11).
Python runs the program live (debug/stepper.py); the viewer's offline stepper
(frontend/src/stepper.js) moves through the fixture's document of the same program. The
expectations are written by hand from the backward's step list (in the fixture's
`_steps`), by the rules debug/stepper.py documents.

`python tests/viz/test_stepper_golden.py` rewrites the fixture's document after a change to
what the document holds (the scenarios stay as written).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn

from thunderviz.debug import Session
from thunderviz.debug.steps import module_of

GOLDEN = Path(__file__).resolve().parents[2] / "frontend/test/fixtures/stepper_golden.json"


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(x))


class Net(nn.Module):
    """sqrt of a ReLU with exact zeros: its gradient there is inf, NaN after the division."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = Encoder()
        self.head = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.sqrt(self.enc(x))).sum()


def _session() -> Session:
    net = Net().double()
    with torch.no_grad():  # fixed weights: the same steps and statistics on every machine
        for i, p in enumerate(net.parameters()):
            ramp = torch.linspace(-1, 1, p.numel(), dtype=torch.float64) * (1 + i / 4)
            p.copy_(ramp.reshape(p.shape))
    x = torch.tensor([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]], dtype=torch.float64)
    session = Session(net, x, record_transforms=False)
    session.record_backward()
    return session


def _step_list(session: Session) -> list[list]:
    """[op id, module, forward op, NaN/Inf?] of every step: what the scenarios are read from."""
    doc_ops = {op["id"]: op for op in session.document()["traces"]["backward"]["ops"]}
    return [
        [r.op_id, module_of(r.bsym), doc_ops[r.op_id]["fwd_op"], r.has_nan_or_inf]
        for r in session.steps
    ]


@pytest.fixture(scope="module")
def session() -> Session:
    return _session()


GOLDEN_DATA = json.loads(GOLDEN.read_text())


def test_the_fixture_is_this_programs_backward(session):
    assert _step_list(session) == GOLDEN_DATA["_steps"]
    assert [s["op"] for s in GOLDEN_DATA["document"]["steps"]] == [r.op_id for r in session.steps]


def _position(stepper) -> int:
    return stepper.history[-1].index if stepper.history else -1


ACTIONS = {
    "step": lambda s, target: s.step(),
    "back": lambda s, target: s.back(),
    "reset": lambda s, target: s.reset(),
    "continue": lambda s, target: s.continue_(),
    "run_to": lambda s, target: s.run_to(target),
    "step_over": lambda s, target: s.step_over(),
}


@pytest.mark.parametrize("case", GOLDEN_DATA["scenarios"], ids=lambda c: c["name"])
def test_the_python_stepper_stops_where_the_golden_says(session, case):
    stepper = session.new_stepper()
    for _ in range(case["from"] + 1):
        stepper.step()
    assert _position(stepper) == case["from"]
    stepper.set_breakpoints(case["breakpoints"])
    ACTIONS[case["action"]](stepper, case.get("target"))
    assert _position(stepper) == case["expected"]
    if "reason" in case:
        assert stepper.stop_reason.startswith(case["reason"]), stepper.stop_reason


def _write_document() -> None:
    """The fixture's document and step list from the program (the scenarios are kept)."""
    session = _session()
    doc = session.document()
    # only what the viewer's stepper reads: ops, tensors, steps (no text, sources, runs)
    doc["traces"] = {k: doc["traces"][k] for k in ("forward", "backward")}
    for view in doc["traces"].values():
        view["python"] = ""
        for op in view["ops"]:
            op["source"] = None
    doc.update(saved=[], transforms=[], grad_flow={})
    doc.pop("nan_ledger", None)
    golden = json.loads(GOLDEN.read_text())
    golden.update(_steps=_step_list(session), document=doc)
    parts = []
    for key, value in golden.items():  # a scenario or step per line; the document in one
        if isinstance(value, list):
            text = "[\n  " + ",\n  ".join(json.dumps(v) for v in value) + "\n ]"
        else:
            text = json.dumps(value, separators=(",", ":") if key == "document" else None)
        parts.append(f" {json.dumps(key)}: {text}")
    GOLDEN.write_text("{\n" + ",\n".join(parts) + "\n}\n")


if __name__ == "__main__":
    _write_document()
    sys.exit(0)
