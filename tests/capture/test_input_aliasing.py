"""Inputs that share memory (capture/input_aliasing.py): one tensor passed twice, a module's
buffer passed to it, a view of another input. Every value, every write into the inputs and
every gradient is compared with eager PyTorch, for `trace`, `jit`'s first call and its calls
after, whichever way the calls share."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv
from thunderviz.capture import CaptureError

F64 = dict(dtype=torch.float64)


def bump_then_read(a, b):
    a.add_(1.0)
    return b * 2


def test_one_tensor_passed_twice_reads_the_write_through_both_names():
    z, want_z = torch.zeros(3, **F64), torch.zeros(3, **F64)
    want = bump_then_read(want_z, want_z)
    traced_on = torch.zeros(3, **F64)
    trace = tv.trace(bump_then_read, traced_on, traced_on)
    assert not traced_on.any()  # (tracing runs on copies)
    torch.testing.assert_close(trace.python_callable()(z, z), want, rtol=0, atol=0)
    torch.testing.assert_close(z, want_z, rtol=0, atol=0)


@pytest.mark.parametrize("first", ["distinct", "shared"])
def test_jit_follows_how_each_call_shares_its_inputs(first):
    jitted = tv.jit(bump_then_read)
    calls = ["shared", "distinct", "shared", "shared", "distinct"]
    if first == "distinct":
        calls = calls[1:] + calls[:1]
    for how in calls:
        ours = [torch.arange(3.0, **F64)]
        theirs = [torch.arange(3.0, **F64)]
        for pair in (ours, theirs):
            pair.append(pair[0] if how == "shared" else torch.arange(3.0, **F64))
        got, want = jitted(*ours), bump_then_read(*theirs)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        for a, b in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert jitted.cache_misses == 2  # one trace each way, found again after


def test_gradients_of_a_tensor_passed_twice_add_up():
    def f(a, b, w):
        return (a * b * w).sin().sum()

    x = torch.randn(4, **F64, requires_grad=True)
    w = torch.randn(4, **F64, requires_grad=True)
    jitted = tv.jit(f)
    jitted(torch.randn(4, **F64, requires_grad=True), x, w)  # traced with distinct inputs
    for fn in (jitted, f, jitted):
        x.grad = w.grad = None
        fn(x, x, w).backward()
        if fn is f:
            want = (x.grad.clone(), w.grad.clone())
        else:
            got = (x.grad.clone(), w.grad.clone())
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)


class Counter(torch.nn.Module):
    """Counts its calls in a buffer, and scales its input by the count."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros((), **F64))

    def forward(self, x):
        self.count.add_(1.0)
        return x * self.count


def test_a_module_given_its_own_buffer_sees_its_write():
    ours, theirs = Counter(), Counter()
    jitted = tv.jit(ours)
    for step in range(4):
        x = torch.full((2,), 3.0, **F64)
        got = jitted(ours.count if step % 2 else x)
        want = theirs(theirs.count if step % 2 else x)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(ours.count, theirs.count, rtol=0, atol=0)


def test_overlapping_views_are_exact_while_nothing_is_written():
    def f(a, b):
        return (a[:2] * b).sum() + a.sum()

    x = torch.randn(4, **F64, requires_grad=True)
    jitted = tv.jit(f)
    jitted(x, x[1:3]).backward()
    got = x.grad.clone()
    x.grad = None
    f(x, x[1:3]).backward()
    torch.testing.assert_close(got, x.grad, rtol=1e-12, atol=0)


def test_a_write_into_an_input_another_overlaps_is_refused_by_name():
    def f(base, window):
        base.mul_(2.0)
        return window + 1

    x = torch.ones(4, **F64)
    for run in (lambda: tv.trace(f, x, x[:2]), lambda: tv.jit(f)(x, x[:2])):
        with pytest.raises(CaptureError, match=r"writes in place into input 'base'.*'window'"):
            run()
    torch.testing.assert_close(x, torch.ones(4, **F64))  # the refused call wrote nothing


def test_disjoint_views_of_one_storage_are_independent_inputs():
    x, y = torch.arange(6.0, **F64), torch.arange(6.0, **F64)
    jitted = tv.jit(bump_then_read)
    jitted(torch.zeros(3, **F64), torch.zeros(3, **F64))
    got, want = jitted(x[:3], x[3:]), bump_then_read(y[:3], y[3:])
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    torch.testing.assert_close(x, y, rtol=0, atol=0)
