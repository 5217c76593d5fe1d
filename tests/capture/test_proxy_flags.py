"""Every value the recording makes says whether it requires grad as eager's tensor does,
whichever way it was recorded (a new op's output, an in-place op's new value, a view
re-derived after its base changed), complex values included."""

from __future__ import annotations

import torch

import thunderviz as tv

C128 = torch.complex128


def _flags_agree(fn, *inputs):
    """The trace's output proxies require grad where eager's outputs do."""
    eager = fn(*inputs)
    tr = tv.trace(fn, *inputs)
    got = [p.requires_grad for p in tr.flat_outputs]
    want = [t.requires_grad for t in eager]
    assert got == want, (got, want)
    return tr


def test_complex_in_place_value_requires_grad_as_in_eager():
    def f(z, w):
        y = z * 1
        y.mul_(w)  # recorded as mul; y's proxy moves to the new value
        v = z * 1
        v[0] = w[1]  # a write through a view: the base's new value by a scatter
        return y, v, torch.view_as_real(y * v).pow(2).sum()

    z = torch.randn(3, dtype=C128, requires_grad=True)
    w = torch.randn(3, dtype=C128, requires_grad=True)
    _flags_agree(f, z, w)

    def loss(z, w):
        return f(z, w)[-1]

    want = torch.autograd.grad(loss(z, w), (z, w))
    got = tv.grad(loss)(z, w)
    for g, r in zip(got, want, strict=True):
        torch.testing.assert_close(g, r)


def test_integer_view_of_a_mutated_float_never_requires_grad():
    def f(x):
        y = x * 1
        bits = y.view(torch.int32)  # a view that changes the dtype
        y.add_(1)  # its base changed: the view is taken again from the new base
        return bits, y

    x = torch.randn(4, requires_grad=True)
    tr = _flags_agree(f, x)
    assert torch.equal(tr.python_callable()(x.detach())[0], f(x.detach())[0])
