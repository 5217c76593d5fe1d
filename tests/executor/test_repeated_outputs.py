"""A program that returns one tensor more than once (`return y, y`, a dict holding it under
two keys, a module returning its hidden state as output and as state). Autograd hands that
tensor's whole gradient to one of its places; the gradients must still reach the inputs and
parameters, whichever places the loss reads: checked against eager PyTorch in float64."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import thunderviz as tv

F64 = dict(dtype=torch.float64)


def twice(x):
    y = x.sin()
    return y, y


def in_a_dict(x, w):
    y = x @ w
    return {"out": y, "again": y, "other": y.exp()}


def nested(x):
    y = x.tanh()
    return (y, [x * 2, y]), y


class HiddenTwice(nn.Module):
    """An RNN-like step that returns its new state both as the output and as the state."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = nn.Linear(4, 4, **F64)

    def forward(self, x):
        h = torch.tanh(self.cell(x))
        return h, (h, h)


def _leaves(out):
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


# which of the flat outputs the loss reads, and with which weights
READS = {
    "all": lambda outs: sum((k + 1) * o.sum() for k, o in enumerate(outs)),
    "first place only": lambda outs: outs[0].pow(2).sum(),
    "last place only": lambda outs: outs[-1].pow(2).sum(),
}

PROGRAMS = {
    "tuple": (twice, lambda: (torch.randn(3, **F64),)),
    "dict": (in_a_dict, lambda: (torch.randn(2, 3, **F64), torch.randn(3, 4, **F64))),
    "nested": (nested, lambda: (torch.randn(3, **F64),)),
}


@pytest.mark.parametrize("reads", READS)
@pytest.mark.parametrize("program", PROGRAMS)
def test_a_function_returning_one_tensor_twice_gets_eagers_gradients(program, reads):
    fn, make = PROGRAMS[program]
    jitted = tv.jit(fn)
    for call in range(2):  # the call that traces, then one that runs the compiled code
        args = make()
        ours = [a.clone().requires_grad_() for a in args]
        theirs = [a.clone().requires_grad_() for a in args]
        READS[reads](_leaves(jitted(*ours))).backward()
        READS[reads](_leaves(fn(*theirs))).backward()
        for o, t in zip(ours, theirs, strict=True):
            assert t.grad is not None
            assert o.grad is not None, f"call {call}: the gradient was lost"
            torch.testing.assert_close(o.grad, t.grad, rtol=0, atol=1e-12)


@pytest.mark.parametrize("reads", READS)
def test_a_module_returning_its_state_as_output_trains_as_eager(reads):
    torch.manual_seed(0)
    model = HiddenTwice()
    twin = copy.deepcopy(model)
    jitted = tv.jit(twin)
    for _ in range(2):
        x = torch.randn(5, 4, **F64)
        READS[reads](_leaves(model(x))).backward()
        READS[reads](_leaves(jitted(x))).backward()
        for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
            assert q.grad is not None, f"{name}: the gradient was lost"
            torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=1e-12)


def test_autograd_grad_of_one_place_of_a_repeated_output():
    x = torch.randn(4, **F64, requires_grad=True)
    a, b = tv.jit(twice)(x)
    (ours,) = torch.autograd.grad(b.sum(), x)
    (theirs,) = torch.autograd.grad(x.sin().sum(), x)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)


def test_vjp_sums_the_cotangents_of_a_repeated_output():
    x = torch.randn(4, **F64)
    cotangents = (torch.randn(4, **F64), torch.randn(4, **F64))
    _, (ours,) = tv.vjp(twice)((x,), cotangents)
    leaf = x.clone().requires_grad_()
    (theirs,) = torch.autograd.grad(twice(leaf), leaf, cotangents)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-12)
