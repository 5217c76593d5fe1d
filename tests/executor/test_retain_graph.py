"""A jitted call's saved values live as long as autograd keeps the node's saved tensors, as
in eager: freed after a backward, kept with retain_graph=True."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import thunderviz as tv


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3), nn.GELU()).double()


def _trace_node(loss: torch.Tensor) -> object:
    """The autograd node of the jitted call (its ctx) under `loss = out.sum()`."""
    node = loss.grad_fn.next_functions[0][0]
    assert hasattr(node, "intermediates"), type(node)
    return node


def test_retain_graph_backward_twice_accumulates_like_eager() -> None:
    eager = _model()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    x = torch.randn(4, 5, dtype=torch.float64)
    for model in (eager, jitted):
        loss = model(x).sum()
        loss.backward(retain_graph=True)
        loss.backward()
    for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-12, atol=1e-12, msg=name)


def test_a_second_backward_without_retain_graph_is_refused_like_eager() -> None:
    x = torch.randn(4, 5, dtype=torch.float64)
    eager_loss = _model()(x).sum()
    eager_loss.backward()
    with pytest.raises(RuntimeError, match="second time") as eager_error:
        eager_loss.backward()
    loss = tv.jit(_model())(x).sum()
    loss.backward()
    with pytest.raises(RuntimeError, match="second time") as our_error:
        loss.backward()
    assert type(our_error.value) is type(eager_error.value)


def test_saved_intermediates_are_freed_after_backward_and_kept_with_retain_graph() -> None:
    x = torch.randn(4, 5, dtype=torch.float64)
    jitted = tv.jit(_model())
    loss = jitted(x).sum()
    node = _trace_node(loss)
    assert len(node.intermediates) > 0
    loss.backward(retain_graph=True)
    assert len(node.intermediates) > 0
    loss.backward()
    assert node.intermediates == []
