"""An entry's first backward runs statement by statement, its later ones compiled
(executor/interpreted.py, `CompiledEntry.backward_in_no_grad`).

The interpreted run must be the compiled run: the same gradients bit for bit (and eager's,
against which both are checked), the same values freed after the same statements, the same
note on an error. Programs from outside the project (HF GPT-2 from a tiny config) and common
training idioms (BatchNorm, a list of tensors through `cat`, a gradient penalty with
`create_graph=True`, `retain_graph=True`) are run through both paths.
"""

from __future__ import annotations

import copy
import gc
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

import thunderviz as tv
from tests.helpers import tiny_gpt2_loss, tiny_hf_gpt2
from thunderviz.autodiff.saved import UNPACK
from thunderviz.core.run_errors import attribute_error
from thunderviz.core.trace import forget_compiled_code
from thunderviz.executor.bridge import not_compiled
from thunderviz.executor.interpreted import interpreted

F64 = dict(dtype=torch.float64)


class Splits(nn.Module):
    """`split` into a list, `cat` of a list, sizes as lists and tuples, a keyword argument."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b, c = self.fc(x).split([1, 2, 3], dim=-1)
        h = torch.cat([c * b.sum(-1, keepdim=True), a.exp(), b], dim=-1)
        return h.reshape(x.shape[0], 2, 3).softmax(dim=1).amax(dim=(1, 2)).sum()


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(
            self.fc(F.relu(self.bn(self.conv(x))).mean((2, 3))), torch.tensor([0, 1])
        )


PROGRAMS: dict[str, tuple[Callable[[], nn.Module], Callable[[nn.Module], torch.Tensor]]] = {
    "splits": (
        lambda: nn.Sequential(Splits()).double(),
        lambda m: m(torch.randn(4, 6, generator=torch.Generator().manual_seed(1), **F64)),
    ),
    "conv_bn": (
        lambda: ConvBN().double(),
        lambda m: m(torch.randn(2, 3, 5, 5, generator=torch.Generator().manual_seed(1), **F64)),
    ),
    "hf_gpt2": (tiny_hf_gpt2, tiny_gpt2_loss),
}


def _entry(jitted: Any) -> Any:
    (entries,) = jitted._cache.values()
    (entry,) = entries
    return entry


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_first_backward_is_interpreted_and_gives_the_compiled_and_eager_gradients(name):
    make, loss_of = PROGRAMS[name]
    torch.manual_seed(0)
    eager = make()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    grads = []
    for step in range(3):
        eager.zero_grad(set_to_none=True)
        ours.zero_grad(set_to_none=True)
        loss_of(eager).backward()
        loss_of(jitted).backward()
        entry = _entry(jitted)
        # the first backward ran interpreted, leaving the backward uncompiled; the second
        # compiled it
        assert (entry.run_backward_in_no_grad is not_compiled) == (step == 0), step
        for (pname, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=1e-10, atol=1e-12, msg=pname)
        grads.append([q.grad.clone() for q in ours.parameters()])
    for later in grads[1:]:  # interpreted and compiled: bit for bit
        assert all(torch.equal(a, b) for a, b in zip(grads[0], later, strict=True))


def test_retain_graph_runs_the_interpreted_then_the_compiled_backward_on_one_graph():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 1)).double()
    jitted = tv.jit(model)
    loss = jitted(torch.randn(3, 5, **F64)).sum()
    (first,) = torch.autograd.grad(loss, model[0].weight, retain_graph=True)
    assert _entry(jitted).run_backward_in_no_grad is not_compiled
    (second,) = torch.autograd.grad(loss, model[0].weight)
    assert _entry(jitted).run_backward_in_no_grad is not not_compiled
    assert torch.equal(first, second)


def test_a_gradient_penalty_on_the_first_call_matches_eager():
    """create_graph=True: the interpreted backward runs with grad on, and autograd records it."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).double()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    x = torch.randn(5, 4, **F64)
    for fn in (eager, jitted):
        xi = x.clone().requires_grad_()
        (dx,) = torch.autograd.grad(fn(xi).sum(), xi, create_graph=True)
        dx.square().sum().backward()
    assert _entry(jitted).run_backward_in_no_grad is not_compiled  # it ran interpreted
    for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-10, atol=1e-12, msg=name)


def _backward_trace() -> tv.Trace:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 6), nn.GELU())
    jitted = tv.jit(model.double())
    jitted(torch.randn(4, 5, **F64)).sum().backward()
    (backward,) = tv.last_backward_traces(jitted)
    return backward


def _inputs(backward: tv.Trace) -> list[Any]:
    """Random values of the right shapes for the backward's inputs."""
    gen = torch.Generator().manual_seed(0)
    unpacked = {b.args[0].name: b.output for b in backward.bound_symbols if b.sym.id == UNPACK.id}
    return [
        tuple(
            torch.randn(p.shape, generator=gen, dtype=p.dtype) if p is not None else None
            for p in unpacked[arg.name]
        )
        for arg in backward.args
    ]


def _both_runs() -> tuple[tv.Trace, Callable[..., Any], Callable[..., Any], list[Any]]:
    """A backward trace, its interpreted run, its compiled twin (compiled afresh) and inputs."""
    backward = _backward_trace()
    run = interpreted(backward)
    assert run is not None
    forget_compiled_code()
    return backward, run, backward.python_callable(free_dead=True), _inputs(backward)


def test_interpreted_and_compiled_backward_agree_bit_for_bit_on_any_values():
    _, run, compiled, inputs = _both_runs()
    with torch.no_grad():
        ours, theirs = run(*inputs), compiled(*inputs)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs, strict=True):
        assert (a is None and b is None) or torch.equal(a, b)


class _Alive(TorchDispatchMode):
    """Watches every value the trace makes; at each op, counts those still referenced."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[weakref.ref] = []
        self.alive_at: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        gc.collect()
        self.alive_at.append(sum(r() is not None for r in self.made))
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor):
                self.made.append(weakref.ref(t))
        return out


def _alive_counts(run: Callable[..., Any], inputs: list[Any]) -> list[int]:
    mode = _Alive()
    with torch.no_grad(), mode:
        out = run(*inputs)
    del out
    return mode.alive_at


def test_the_interpreted_run_frees_each_value_where_the_compiled_one_does():
    backward, run, compiled, inputs = _both_runs()
    ours, theirs = _alive_counts(run, inputs), _alive_counts(compiled, inputs)
    assert ours == theirs
    assert max(ours) < len(backward.bound_symbols) // 2  # values do die on the way


def test_an_error_gets_the_note_the_compiled_trace_gives_it():
    backward, run, compiled, inputs = _both_runs()
    saved = list(inputs[0])
    saved[-1] = torch.randn(3, 3, **F64)  # a wrong shape: some statement must fail on it
    bad = [tuple(saved), *inputs[1:]]
    notes = []
    for fn in (run, compiled):
        with pytest.raises(RuntimeError) as caught:
            fn(*bad)
        attribute_error(caught.value, [backward])  # what jit adds to the compiled one's
        notes.append([n for n in caught.value.__notes__ if "thunderviz" in n])
    assert notes[0] == notes[1]
    assert len(notes[0]) == 1 and "line" in notes[0][0]


def test_a_trace_with_a_statement_that_is_not_an_aten_call_is_not_interpreted():
    def program(x: torch.Tensor) -> torch.Tensor:
        return x.sin().cos()

    trace = tv.trace(program, torch.randn(3))  # torch-level calls (methods), not ATen
    assert interpreted(trace) is None
