"""A program that returns dataclass instances (a result type of its own) gets them back from
jit, each field holding the call's value, as eager returns them; before, the whole object
became None. The user's class is not registered with torch's pytree (that would change
pytree for the whole process). Compared with eager."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn as nn
from torch.utils import _pytree as pytree

import thunderviz as tv


@dataclasses.dataclass
class Aux:
    penalty: torch.Tensor
    note: str = "aux"


@dataclasses.dataclass(frozen=True)
class Result:
    logits: torch.Tensor
    aux: Aux
    steps: int = 0


class ReturnsResults(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3, dtype=torch.float64)

    def forward(self, x):
        y = self.lin(x)
        return Result(y, Aux(y.square().mean()), steps=2), [Aux(y.sum(), note="extra")]


def _loss(out):
    result, (extra,) = out
    return result.logits.sum() + result.aux.penalty + extra.penalty


def test_jit_returns_the_dataclasses_eager_returns():
    torch.manual_seed(0)
    eager, ours = ReturnsResults(), ReturnsResults()
    ours.load_state_dict(eager.state_dict())
    jitted = tv.jit(ours)
    for _ in range(3):
        x = torch.randn(2, 3, dtype=torch.float64)
        want, got = eager(x), jitted(x)
        assert type(got[0]) is Result and type(got[0].aux) is Aux and type(got[1][0]) is Aux
        assert (got[0].steps, got[0].aux.note, got[1][0].note) == (2, "aux", "extra")
        for a, b in zip(pytree.tree_leaves(_fields(want)), pytree.tree_leaves(_fields(got))):
            torch.testing.assert_close(b, a, rtol=0, atol=0)
        _loss(want).backward()
        _loss(got).backward()
        for a, b in zip(eager.parameters(), ours.parameters(), strict=True):
            torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=0)
    assert Result not in pytree.SUPPORTED_NODES and Aux not in pytree.SUPPORTED_NODES


def _fields(out):
    result, (extra,) = out
    return result.logits, result.aux.penalty, extra.penalty


def test_a_session_differentiates_the_fields_and_agrees_with_autograd():
    model = ReturnsResults()
    x = torch.randn(2, 3, dtype=torch.float64)
    cotangents = [
        torch.ones(2, 3, dtype=torch.float64),
        *(torch.tensor(1.0, dtype=torch.float64),) * 2,
    ]
    session = tv.Session(model, x, cotangents=cotangents)
    rows = session.compare_with_autograd()
    assert rows and all(r.allclose for r in rows)
