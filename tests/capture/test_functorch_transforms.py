"""A torch.func transform inside a traced program is refused where it starts, naming the
transform, the line and the way around it: its tensors are functorch's wrappers, and what
the recorder saw there was not the program's computation (a vmap'd layer's gradient and a
torch.func.grad's value came out wrong without a word). A program that only builds its
parameters with torch.func.functional_call is no transform, and traces as before."""

from __future__ import annotations

import inspect

import pytest
import torch
import torch.nn as nn

import thunderviz as tv


class Transformed(nn.Module):
    def __init__(self, transform: str) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3, dtype=torch.float64)
        self.transform = transform

    def forward(self, x):
        if self.transform == "vmap":
            return torch.vmap(lambda row: self.lin(row).tanh() * row.sum())(x)
        if self.transform == "grad":
            slope = torch.func.grad(lambda r: self.lin(r).sum())(x)
            return self.lin(x).sum() + slope.square().sum()
        if self.transform == "jvp":
            out, tangent = torch.func.jvp(lambda r: self.lin(r).sin(), (x,), (torch.ones_like(x),))
            return out + tangent
        params = {k: v * 2 for k, v in self.lin.named_parameters()}
        return torch.func.functional_call(self.lin, params, (x,))


def _line_of(text: str) -> int:
    lines, start = inspect.getsourcelines(Transformed.forward)
    return start + next(i for i, line in enumerate(lines) if text in line)


WHERE = {"vmap": "torch.vmap(", "grad": "torch.func.grad(", "jvp": "torch.func.jvp("}
KIND = {"vmap": "Vmap", "grad": "Grad", "jvp": "Jvp"}


@pytest.mark.parametrize("transform", WHERE)
@pytest.mark.parametrize("entry", ["trace", "jit", "Session"])
def test_a_transform_inside_the_program_is_refused_at_its_line(transform, entry):
    model, x = Transformed(transform), torch.randn(4, 3, dtype=torch.float64)
    run = {
        "trace": lambda: tv.trace(model, x),
        "jit": lambda: tv.jit(model)(x),
        "Session": lambda: tv.Session(model, x),
    }[entry]
    with pytest.raises(tv.CaptureError) as info:
        run()
    message = str(info.value)
    assert f"torch.func's {KIND[transform]} transform" in message
    assert f"test_functorch_transforms.py:{_line_of(WHERE[transform])}" in message
    assert "outside the traced call" in message
    assert all(p.grad is None for p in model.parameters())


def test_functional_call_inside_the_program_is_no_transform():
    torch.manual_seed(0)
    model, x = Transformed("functional_call"), torch.randn(4, 3, dtype=torch.float64)
    eager = Transformed("functional_call")
    eager.load_state_dict(model.state_dict())
    jitted = tv.jit(model)
    for _ in range(2):
        got, want = jitted(x), eager(x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        got.sum().backward()
        want.sum().backward()
    for a, b in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=0, atol=0)
