"""`Trace.inputs` says what each argument of a trace is, and `Trace.bind_inputs` lines a
call's values up with them (the one place the order is known)."""

from __future__ import annotations

import torch

import thunderviz as tv
from thunderviz.core import InputKind, TraceInput


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)
        self.register_buffer("scale", torch.tensor(2.0))

    def forward(self, x, pair, *, bias, extra=None):  # noqa: ANN001, ANN201
        return self.fc(x * self.scale + pair[0] - pair[1]) + bias + extra["a"]


def test_inputs_and_binding_follow_the_trace_order():
    m = _Net()
    x, pair, bias = torch.randn(4, 3), (torch.randn(3), torch.randn(3)), torch.randn(2)
    extra = {"a": torch.randn(2)}
    forward = tv.trace(m, x, pair, bias=bias, extra=extra)
    assert forward.inputs == [
        TraceInput(InputKind.POSITIONAL, "x"),
        TraceInput(InputKind.POSITIONAL, "pair", 0),
        TraceInput(InputKind.POSITIONAL, "pair", 1),
        TraceInput(InputKind.PARAMETER, "fc.weight"),
        TraceInput(InputKind.PARAMETER, "fc.bias"),
        TraceInput(InputKind.BUFFER, "scale"),
        TraceInput(InputKind.KEYWORD, "bias"),
        TraceInput(InputKind.KEYWORD, "extra"),
    ]
    assert len(forward.inputs) == len(forward.flat_args)
    pos, kw = forward.bind_inputs(m, (x, pair), {"bias": bias, "extra": extra})
    assert [id(v) for v in pos] == [
        id(x),
        id(pair[0]),
        id(pair[1]),
        id(m.fc.weight),
        id(m.fc.bias),
        id(m.scale),
    ]
    assert list(kw) == list(forward.kwargs) and kw[next(iter(forward.kwargs))] is bias
    torch.testing.assert_close(
        forward.python_callable()(*pos, **kw), m(x, pair, bias=bias, extra=extra)
    )
