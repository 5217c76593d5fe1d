"""Dataclass instances in and out of a program (core/dataclass_nodes.py). Returned (a
result type of its own), jit gives them back, each field holding the call's value; before,
the whole object became None. Given (a `Batch`), their tensors are inputs: traced once,
gradients reach a field that requires grad; before, every call traced again, and a field
that required grad was refused. The user's class is not registered with torch's pytree
(that would change pytree for the whole process). Compared with eager."""

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


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    y: torch.Tensor
    scale: float = 1.0


class TakesABatch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3, dtype=torch.float64)

    def forward(self, batch):
        return (self.lin(batch.x) - batch.y).square().mean() * batch.scale


def _batch(scale=1.0):
    x = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    return Batch(x, torch.randn(2, 3, dtype=torch.float64), scale)


def _twin(batch):
    return Batch(batch.x.detach().clone().requires_grad_(), batch.y.clone(), batch.scale)


def test_a_dataclass_argument_is_inputs_traced_once_with_gradients():
    torch.manual_seed(0)
    eager, ours = TakesABatch(), TakesABatch()
    ours.load_state_dict(eager.state_dict())
    jitted = tv.jit(ours)
    for scale in (1.0, 1.0, 1.0, 2.0):
        batch = _batch(scale)
        given = _twin(batch)
        want, got = eager(batch), jitted(given)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        want.backward()
        got.backward()
        torch.testing.assert_close(given.x.grad, batch.x.grad, rtol=0, atol=0)
        for a, b in zip(eager.parameters(), ours.parameters(), strict=True):
            torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=0)
    assert jitted.cache_misses == 2  # the float field is a constant of the trace
    assert Batch not in pytree.SUPPORTED_NODES


def test_tv_grad_and_a_session_take_a_dataclass_argument():
    model, batch = TakesABatch(), _batch()
    given = _twin(batch)
    given.y.requires_grad_()
    want = torch.autograd.grad(model(given), [given.x, given.y])
    grads = tv.grad(lambda b: model(b))(_twin(batch))  # (tv.grad differentiates every field)
    for got, expected in zip(grads[:2], want, strict=True):
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    session = tv.Session(model, batch)
    rows = session.compare_with_autograd()
    assert [r.name for r in rows][:2] == ["batch_0", "batch_1"] and all(r.allclose for r in rows)
