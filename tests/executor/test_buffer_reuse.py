"""A pointwise op runs in place on its dead input in the compiled twin of a trace
(executor/buffer_reuse.py).

What must hold: the same bits as the twin without reuse (the kernels are the same), eager's
values (checked independently, in float64), and nothing overwritten that anything else can
still see: a view of the value, the user's inputs, a value an output or the backward holds.
Programs from outside the project (HF GPT-2, torch's OpInfo unary ufuncs, a torchvision-style
BasicBlock with `ReLU(inplace=True)`) and programs written to tempt a wrong reuse run both
ways.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

import thunderviz as tv
from tests.autodiff.opinfo_samples import op_db
from tests.helpers import assert_same_state, tiny_gpt2_loss, tiny_hf_gpt2
from thunderviz.executor.buffer_reuse import reusing_dead_inputs

F64 = dict(dtype=torch.float64)
_JIT = importlib.import_module("thunderviz.executor.jit")


def _rewritten(jitted: Any) -> list[str]:
    """The statements the last call's compiled twins run in place, by printed name."""
    names = []
    for trace in jitted.last.executed:
        reused = reusing_dead_inputs(trace)
        names += [
            b.sym.name
            for a, b in zip(trace.bound_symbols, reused.bound_symbols, strict=True)
            if a is not b
        ]
    return names


def _steps(model: nn.Module, loss_of: Callable[[Any], torch.Tensor], n: int) -> list[Any]:
    """Per step (the first runs from the trace, the later ones compiled): the loss and the
    parameters' gradients."""
    seen = []
    for _ in range(n):
        model.zero_grad(set_to_none=True)
        torch.manual_seed(7)  # a program that draws random numbers draws the same ones
        loss = loss_of(model)
        loss.backward()
        seen.append([loss.detach().clone(), *(p.grad.clone() for p in model.parameters())])
    return seen


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock, as it is written there: ReLU(inplace=True)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + x)


def _block_loss(model: nn.Module) -> torch.Tensor:
    x = torch.randn(2, 4, 6, 6, generator=torch.Generator().manual_seed(1), **F64)
    return model(x).square().mean()


PROGRAMS = {
    "basic_block": (lambda: BasicBlock(4).double(), _block_loss, "aten.relu_"),
    # dropout on: the masks are drawn in the same order either way
    "hf_gpt2": (lambda: tiny_hf_gpt2(dropout=0.1), tiny_gpt2_loss, "aten.tanh_"),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_reuse_gives_the_bits_of_the_twin_without_it_and_eagers_values(name, monkeypatch):
    make, loss_of, expected = PROGRAMS[name]
    eager = make()
    ours, plain = copy.deepcopy(eager), copy.deepcopy(eager)
    jitted = tv.jit(ours)
    with_reuse = _steps(jitted, loss_of, 3)
    assert expected in _rewritten(jitted)
    for a, b in zip(_steps(eager, loss_of, 3)[-1], with_reuse[-1], strict=True):
        torch.testing.assert_close(b, a, rtol=1e-10, atol=1e-12)
    assert_same_state(ours, eager, tol=1e-10)  # BatchNorm's running stats included
    monkeypatch.setattr(_JIT, "reusing_dead_inputs", lambda trace: trace)
    without = _steps(tv.jit(plain), loss_of, 3)
    for ours_step, plain_step in zip(with_reuse, without, strict=True):
        assert all(torch.equal(a, b) for a, b in zip(ours_step, plain_step, strict=True))


class Tempting(nn.Module):
    """Values that die at a pointwise op but whose buffer something else still holds."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = self.fc(x)
        seen_through = h.t()  # a view of h, read after h's last direct reader
        flat = h.reshape(-1)  # so is this one
        squashed = torch.tanh(h)  # h dies here
        g = self.fc(x) * 3.0
        kept = torch.sigmoid(g)  # g dies here, but the program returns it
        also_input = torch.exp(x)  # x is the user's
        # in the backward, g's gradient passes through a hook point (the program reads it
        # and returns it: executor/output_hooks.py), whose result a user's hook may hold;
        # this one's gradient, times 2.0, is fresh
        doubled = torch.tanh(self.fc(x) * 2.0)
        loss = (squashed + seen_through.t()).sum() + flat.sum() + doubled.sum()
        return loss, g, kept, also_input


def test_a_value_something_else_can_see_is_never_overwritten(monkeypatch):
    torch.manual_seed(0)
    eager = Tempting().double()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    x = torch.randn(3, 4, **F64, requires_grad=True)
    x_before = x.detach().clone()
    for _ in range(3):
        outs = jitted(x)
        expected = eager(x)
        for got, want in zip(outs, expected, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        outs[0].backward()
        expected[0].backward()
    assert torch.equal(x.detach(), x_before)
    assert_same_state(ours, eager)
    # each of the four tempted and none qualified; `doubled`'s two did: in the forward, its
    # tanh (the product is fresh and read by nothing else), in the backward, its `* 2.0`
    assert _rewritten(jitted) == ["aten.tanh_", "aten.mul_.Tensor"]


def test_a_value_viewed_then_dead_at_a_pointwise_op_keeps_its_buffer():
    """The view is read after the pointwise op: reusing the buffer would change what it reads
    (the op's own schema, `t(Tensor(a) self)`, is what says it shares)."""

    def program(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        h = x @ w
        v = h.t()
        r = torch.relu(h)  # h's last direct reader
        return (r * 2).sum() + v.sum() * 3

    x = torch.randn(3, 4, **F64)
    w = torch.randn(4, 5, **F64, requires_grad=True)
    jitted = tv.jit(program)
    for _ in range(3):
        out, expected = jitted(x, w), program(x, w)
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)
        (got,) = torch.autograd.grad(out, w)
        (want,) = torch.autograd.grad(expected, w)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    assert "aten.relu_" not in _rewritten(jitted)


def _unary_ufuncs() -> list[Any]:
    from torch.testing._internal.opinfo.core import UnaryUfuncInfo

    return [
        pytest.param(info, id=f"{info.name}.{info.variant_test_name}".rstrip("."))
        for info in op_db
        if isinstance(info, UnaryUfuncInfo)
        and info.inplace_variant is not None
        and info.supports_autograd
        and torch.float32 in info.dtypes
    ]


_REWRITTEN: list[str] = []  # the OpInfo ops the next test saw run in place


@pytest.mark.parametrize("info", _unary_ufuncs())
def test_torch_unary_ufuncs_in_place_give_the_out_of_place_bits(info, monkeypatch):
    """Each of torch's unary ufuncs with an in-place variant, on its own first sample, after
    an op that makes a fresh value it alone reads: the compiled twin with reuse gives the bits
    of the twin without, and eager's values."""
    sample = next(iter(info.sample_inputs("cpu", torch.float32, requires_grad=False)))
    if not isinstance(sample.input, torch.Tensor) or sample.input.numel() == 0:
        pytest.skip("a sample without a tensor to work on")

    def program(x: torch.Tensor) -> torch.Tensor:
        return info.op(x * 1.0, *sample.args, **sample.kwargs)

    x = sample.input.detach().requires_grad_()
    runs = []
    for reuse in (True, False):
        if not reuse:
            monkeypatch.setattr(_JIT, "reusing_dead_inputs", lambda trace: trace)
        jitted = tv.jit(program)
        try:
            outs = [_seeded(jitted, x) for _ in range(3)]  # the third runs the compiled twin
        except tv.AutodiffError as e:  # no grad rule for it
            pytest.skip(f"not differentiable by thunderviz: {type(e).__name__}")
        if reuse and _rewritten(jitted):
            _REWRITTEN.append(info.name)
        runs.append(outs[-1])
    torch.testing.assert_close(runs[0], runs[1], rtol=0, atol=0, equal_nan=True)
    torch.testing.assert_close(runs[0], _seeded(program, x).detach(), equal_nan=True)


def _seeded(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(0)  # an op that draws random numbers (rrelu) draws the same ones
    return fn(x)


def test_the_ufunc_sweep_ran_ops_in_place():
    """The sweep above is only worth its time if the rewrite happened in it."""
    if not _REWRITTEN:
        pytest.skip("the OpInfo sweep did not run in this session")
    print(sorted(_REWRITTEN))
    assert len(_REWRITTEN) >= 10, _REWRITTEN
