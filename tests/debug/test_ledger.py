"""The NaN/Inf ledger: statuses per backward step, checked against where torch.autograd's
gradients (read with tensor hooks, in eager) stop or start being finite."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from tests.debug.models import SqrtOfRelu, line_of
from tests.helpers import DEVICES
from thunderviz.debug import LEDGER_STATUSES


def _sqrt_of_relu_case():
    torch.manual_seed(0)
    model = SqrtOfRelu().double()
    x = torch.randn(5, 4, dtype=torch.float64)
    with torch.no_grad():  # some relu outputs are exact zeros, some positive
        model.fc.bias.copy_(torch.tensor([-50.0, 0.0, 0.3, 0.0, 50.0, 0.1], dtype=torch.float64))
        model.fc.weight[1].zero_()
        model.fc.weight[3].zero_()
    return model, x


def _eager_grads_around_sqrt(model, x):
    """Gradients of relu's input, relu's output (= sqrt's input) and the parameters, eager."""
    m = copy.deepcopy(model)
    seen = {}
    pre = m.fc(x)
    pre.register_hook(lambda g: seen.__setitem__("pre", g))
    h = torch.relu(pre)
    h.register_hook(lambda g: seen.__setitem__("h", g))
    m.out(torch.sqrt(h)).sum().backward()
    return seen, m


def test_sqrt_of_relu_is_born_at_sqrt_and_healed_at_relu():
    model, x = _sqrt_of_relu_case()
    seen, eager = _eager_grads_around_sqrt(model, x)
    # the reference: autograd's gradient of sqrt's input is infinite, of relu's input finite
    assert not torch.isfinite(seen["h"]).all() and torch.isfinite(seen["pre"]).all()
    assert torch.isfinite(eager.fc.weight.grad).all()

    s = tv.Session(model, x)
    ledger = s.nan_ledger()
    assert len(ledger) == len(s.backward.bound_symbols)
    assert {e.status for e in ledger} <= set(LEDGER_STATUSES)
    interesting = [e for e in ledger if e.status != "clean"]
    born = [e for e in interesting if e.status == "born"]
    healed = [e for e in interesting if e.status == "healed"]
    assert [e.forward_op for e in born] and {e.forward_op for e in born} == {"torch.sqrt"}
    assert {e.forward_op for e in healed} == {"torch.relu"}
    assert born[0].source.lineno == line_of(SqrtOfRelu.forward, "torch.sqrt(h)")
    assert healed[0].source.lineno == line_of(SqrtOfRelu.forward, "torch.relu")
    # between birth and healing the infinity only travels inside sqrt's and relu's backward
    first, last = ledger.index(born[0]), ledger.index(healed[-1])
    assert all(
        e.forward_op in ("torch.sqrt", "torch.relu")
        for e in ledger[first : last + 1]
        if e.status != "clean"
    )
    assert all(e.status == "clean" for e in ledger[last + 1 :])

    record = s.first_nan()
    assert record is not None and record.index == born[0].index
    assert "healed later at backward:" in record.note and "no gradient is non-finite" in record.note
    assert s.stepper.index == record.index + 1  # the stepper stays at the first NaN


class PoisonsWeight(nn.Module):
    """sqrt(h²) at h == 0: inf from sqrt times 0 from the square is NaN, into fc's weight."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        return torch.sqrt(h * h).sum()


@pytest.mark.parametrize("device", DEVICES)
def test_a_nan_that_poisons_a_weight_is_propagated_to_it(device):
    torch.manual_seed(1)
    model = PoisonsWeight().double().to(device)
    with torch.no_grad():
        model.fc.weight[2].zero_()
        model.fc.bias[2] = 0.0
    x = torch.randn(2, 3, dtype=torch.float64, device=device)
    eager = copy.deepcopy(model)
    eager(x).backward()
    assert torch.isnan(eager.fc.weight.grad).any()  # the reference is poisoned too

    s = tv.Session(model, x)
    ledger = s.nan_ledger()
    statuses = [e.status for e in ledger if e.status != "clean"]
    assert statuses[0] == "born" and "healed" not in statuses
    assert ledger[[e.status for e in ledger].index("born")].forward_op == "torch.sqrt"
    reaching = {n for e in ledger if e.status == "propagated" for n in e.bad_outputs}
    grads = s.grads()
    assert torch.isnan(grads["fc_weight"]).any() and grads["fc_weight"] is not None
    assert s.result.cotangent_of["fc_weight"] in reaching or any(
        e.status == "propagated" and e.forward_op == "torch.nn.functional.linear" for e in ledger
    )
    record = s.first_nan()
    assert "reaches the gradients of" in record.note and "fc_weight" in record.note


def test_a_clean_backward_has_a_clean_ledger_and_no_first_nan():
    torch.manual_seed(2)
    model = nn.Sequential(nn.Linear(3, 3), nn.Tanh()).double()
    s = tv.Session(
        model,
        torch.randn(4, 3, dtype=torch.float64),
        cotangents=torch.ones(4, 3, dtype=torch.float64),
    )
    assert {e.status for e in s.nan_ledger()} == {"clean"}
    assert s.first_nan() is None


def test_the_ledger_marks_go_into_the_saved_document(tmp_path):
    model, x = _sqrt_of_relu_case()
    s = tv.Session(model, x)
    s.record_backward()
    doc = tv.load(tv.save(s, tmp_path / "nan.tvz"))
    statuses = {e["op"]: e["status"] for e in doc["nan_ledger"]}
    expected = {e.op_id: e.status for e in s.nan_ledger() if e.status != "clean"}
    assert statuses == expected and "born" in statuses.values() and "healed" in statuses.values()
