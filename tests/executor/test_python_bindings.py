"""The compiled twin calls a few overloads through torch's Python bindings (cheaper than the
boxed `_op`): each must pick the overload the trace names and give its result bit for bit,
dtype and strides included, compared with calling the overload itself."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv
from thunderviz.core.trace import _PYTHON_BINDINGS

aten = torch.ops.aten


class _With:
    """A sample with keyword arguments too."""

    def __init__(self, args, **kwargs):
        self.args, self.kwargs = args, kwargs


def _samples():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 5, generator=g, dtype=torch.float64)
    b = torch.randn(5, 4, generator=g, dtype=torch.float64)
    c = torch.randn(2, 3, 5, generator=g)
    h = torch.randn(4, 6, generator=g, dtype=torch.float16)
    img = torch.randn(2, 2, 4, 4, generator=g, dtype=torch.float64)
    w = torch.randn(2, 2, 3, 3, generator=g, dtype=torch.float64)
    bias = torch.randn(2, generator=g, dtype=torch.float64)
    idx = torch.tensor([[1, 0], [3, 1]])
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
        ("aten", "relu", "default"): [(a,), (h,)],
        ("aten", "gelu", "default"): [(a,), (h,), _With((c,), approximate="tanh")],
        ("aten", "silu", "default"): [(a,), (c.transpose(0, 2),)],
        ("aten", "clone", "default"): [
            (c.transpose(0, 2),),
            _With((img,), memory_format=torch.channels_last),
            _With((c.transpose(0, 2),), memory_format=torch.contiguous_format),
        ],
        ("aten", "embedding", "default"): [(b, idx), (b, idx, 1), (b, idx, -1, True, False)],
        ("aten", "convolution", "default"): [
            (img, w, None, [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
            (img, w[:, :1], bias, [2, 1], [0, 1], [1, 2], False, [0, 0], 2),
            (img, w.transpose(0, 1), None, [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
        ],
        ("aten", "native_batch_norm", "default"): [
            (img, bias, bias, None, None, True, 0.1, 1e-5),
            (img, None, None, bias + 1, bias.abs() + 1, False, 0.1, 1e-3),
        ],
        ("aten", "native_layer_norm", "default"): [
            (c, [5], None, None, 1e-5),
            (img, [4, 4], img[1, 0], img[0, 1], 1e-3),
        ],
    }


@pytest.mark.parametrize("name", sorted(_PYTHON_BINDINGS))
def test_each_python_binding_gives_the_overloads_result(name):
    samples = _samples()[name]
    op = getattr(getattr(getattr(torch.ops, name[0]), name[1]), name[2])
    for sample in samples:
        args, kwargs = (sample.args, sample.kwargs) if isinstance(sample, _With) else (sample, {})
        want = op(*args, **kwargs)
        got = _PYTHON_BINDINGS[name](*args, **kwargs)
        wants, gots = (want, got) if isinstance(want, tuple) else ((want,), (got,))
        assert len(gots) == len(wants)
        for got, want in zip(gots, wants, strict=True):
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


class _Layers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 16)
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.ln = torch.nn.LayerNorm(16)

    def forward(self, idx):
        h = self.embed(idx).view(-1, 1, 4, 4)
        h = torch.relu(self.bn(self.conv(h))).clone().flatten(1)
        h = torch.nn.functional.gelu(self.ln(h[:, :16])) + torch.nn.functional.silu(h[:, 16:32])
        return h.pow(2).sum()


def test_a_model_of_the_layers_trains_as_in_eager_bit_for_bit():
    torch.manual_seed(0)
    model = _Layers().double()
    twin = _Layers().double()
    twin.load_state_dict(model.state_dict())
    jitted = tv.jit(twin)
    idx = torch.tensor([[1, 2, 3], [4, 5, 9]])
    for _ in range(2):
        model(idx).backward()
        jitted(idx).backward()
        for (name, p), q in zip(model.named_parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=name)
        for b, c in zip(model.buffers(), twin.buffers(), strict=True):
            torch.testing.assert_close(c, b, rtol=0, atol=0)
