"""A traced program with a `torch.compile`d submodule: the recorder's dispatch handler runs
without torch's per-op dynamo guard (capture/recorder.py), so it must keep dynamo out of its
own frames where dynamo is running, or dynamo tries to compile them (and warns from inside
thunderviz). Values and gradients are eager's."""

from __future__ import annotations

import copy
import warnings

import torch
import torch.nn as nn

import thunderviz as tv


class _WithCompiledPart(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(5, 6)
        self.second = torch.compile(nn.Linear(6, 3), backend="eager")

    def forward(self, x):
        return self.second(torch.tanh(self.first(x))).square().sum()


def test_a_compiled_submodule_is_traced_and_trained_as_eager_runs_it():
    torch.manual_seed(0)
    model = _WithCompiledPart().double()
    eager = copy.deepcopy(model)
    x = torch.randn(4, 5, dtype=torch.double)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace = tv.trace(model, x)
        loss = tv.jit(model)(x)
        loss.backward()
    from_thunderviz = [str(w.message) for w in caught if "thunderviz" in str(w.message)]
    assert not from_thunderviz, from_thunderviz[0]
    assert any("linear" in b.sym.id for b in trace.bound_symbols)
    expected = eager(x)
    expected.backward()
    torch.testing.assert_close(loss, expected, rtol=1e-12, atol=1e-12)
    for (name, p), q in zip(eager.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-12, atol=1e-12, msg=name)
