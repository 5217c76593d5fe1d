"""The compiled twin calls a few overloads through torch's Python bindings (cheaper than the
boxed `_op`): each must pick the overload the trace names and give its result bit for bit,
dtype and strides included, compared with calling the overload itself."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv
from thunderviz.core.trace import _PYTHON_BINDINGS

aten = torch.ops.aten


def _samples():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 5, generator=g, dtype=torch.float64)
    b = torch.randn(5, 4, generator=g, dtype=torch.float64)
    c = torch.randn(2, 3, 5, generator=g)
    h = torch.randn(4, 6, generator=g, dtype=torch.float16)
    return {
        ("aten", "mm", "default"): [(a, b)],
        ("aten", "bmm", "default"): [(c, c.transpose(1, 2))],
        ("aten", "t", "default"): [(a,), (b[0],)],
        ("aten", "transpose", "int"): [(c, 0, 2), (c, -1, 1)],
        ("aten", "permute", "default"): [(c, [2, 0, 1])],
        ("aten", "reshape", "default"): [(c, [-1, 5]), (c.transpose(0, 2), [5, 6])],
        ("aten", "sum", "dim_IntList"): [(c, [0]), (c, [1, 2], True), (c, None), (h, [1])],
        ("aten", "_log_softmax", "default"): [(c, 1, False), (h, 0, False)],
        ("aten", "_log_softmax_backward_data", "default"): [(a, a, 1, torch.float64)],
        ("aten", "_softmax", "default"): [(c, -1, False), (h, 1, False)],
        ("aten", "_softmax_backward_data", "default"): [(a, a, 0, torch.float64)],
    }


@pytest.mark.parametrize("name", sorted(_PYTHON_BINDINGS))
def test_each_python_binding_gives_the_overloads_result(name):
    samples = _samples()[name]
    op = getattr(getattr(getattr(torch.ops, name[0]), name[1]), name[2])
    for args in samples:
        want = op(*args)
        got = _PYTHON_BINDINGS[name](*args)
        assert got.dtype == want.dtype and got.shape == want.shape
        assert got.stride() == want.stride()
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def _softmaxes(x, w):
    s = torch.softmax(x @ w, dim=-1).transpose(0, 1)  # (3, 4)
    m = torch.log_softmax(s, 1).t() @ s.sum(1, keepdim=True)  # (4, 1)
    return m.reshape(-1).sum()


def test_a_program_of_them_trains_as_in_eager_bit_for_bit():
    x = torch.randn(4, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, 3, dtype=torch.float64, requires_grad=True)
    jitted = tv.jit(_softmaxes)
    for _ in range(2):
        got = torch.autograd.grad(jitted(x, w), (x, w))
        want = torch.autograd.grad(_softmaxes(x, w), (x, w))
        for g, e in zip(got, want, strict=True):
            torch.testing.assert_close(g, e, rtol=0, atol=0)
