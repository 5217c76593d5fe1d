"""A jitted call's saved values live as long as autograd keeps the node's saved tensors, as
in eager: freed after a backward, kept with retain_graph=True."""

from __future__ import annotations

import copy
import weakref

import pytest
import torch
from torch import nn

import thunderviz as tv


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3), nn.GELU()).double()


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


def _saved_while(run):
    """Weak references to every tensor autograd is asked to save while `run()` runs (read
    through saved-tensor hooks, which see what eager's nodes and ours save alike)."""
    saved = []

    def pack(t):
        saved.append(weakref.ref(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = run()
    return out, saved


def test_saved_intermediates_are_freed_after_backward_and_kept_with_retain_graph() -> None:
    x = torch.randn(4, 5, dtype=torch.float64)
    model = _model()
    jitted = tv.jit(model)
    keep = {id(p) for p in model.parameters()} | {id(x)}
    for _ in range(2):  # the first call traces; the second runs as every later one
        loss, saved = _saved_while(lambda: jitted(x).sum())
    intermediates = [r for r in saved if r() is not None and id(r()) not in keep]
    assert intermediates  # tanh's output, GELU's input ...
    loss.backward(retain_graph=True)
    assert all(r() is not None for r in intermediates)
    loss.backward()
    assert all(r() is None for r in intermediates)


def test_saved_tensor_hooks_that_move_what_is_saved_give_eager_gradients() -> None:
    """`save_on_cpu`-style hooks: what is saved is replaced by a copy; backward reads the
    copies unpack returns, for every saved tensor, intermediates included."""
    x = torch.randn(4, 5, dtype=torch.float64)
    eager = _model()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    packed, unpacked = [], []

    def pack(t):
        packed.append(t.shape)
        return t.clone()

    def unpack(t):
        unpacked.append(t.shape)
        return t

    for _ in range(2):
        with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
            loss = jitted(x).sum()
        loss.backward()
    n_saved = len(jitted.last.result.reads_from_forward)
    assert len(packed) == len(unpacked) == 2 * n_saved
    eager(x).sum().backward()
    eager(x).sum().backward()
    for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-12, atol=1e-12, msg=name)
