"""Tensors a kernel fills from host memory where no mode sees it (`at::tensor(list)` inside
`ctc_loss` with list lengths): a trace keeps what they held as a constant, and never replays
the `empty` they were made with. Checked against eager, on calls after the first (which run
the compiled code)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import thunderviz as tv
from tests.helpers import value_and_grads


def ctc(log_probs, targets):
    return F.ctc_loss(log_probs.log_softmax(2), targets, [10, 9], [4, 3])


def test_ctc_loss_with_list_lengths_agrees_with_eager_on_every_call():
    torch.manual_seed(0)
    targets = torch.randint(1, 5, (2, 4))
    jitted = tv.jit(ctc)
    for _ in range(3):  # new values each call: the trace must not hold the first call's
        x = torch.randn(10, 2, 5, dtype=torch.float64, requires_grad=True)
        (want, want_grads), (got, got_grads) = (
            value_and_grads(fn, x, targets) for fn in (ctc, jitted)
        )
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got_grads, want_grads, rtol=1e-12, atol=1e-12)


def test_the_lengths_are_a_constant_of_the_trace():
    x = torch.randn(10, 2, 5, dtype=torch.float64)
    trace = tv.trace(ctc, x, torch.randint(1, 5, (2, 4)))
    (lengths,) = trace.constants.values()  # the target lengths, as the kernel filled them
    assert lengths.tolist() == [4.0, 3.0]


def buffer_copied_into(x):
    buf = torch.empty(3, dtype=x.dtype)
    buf.copy_(x)  # a recorded write: the buffer's value is the trace's
    out = torch.empty(3, dtype=x.dtype)
    torch.add(buf, 1, out=out)  # an out= buffer is written before it is read
    return out * 2


def test_a_buffer_written_by_recorded_ops_is_no_constant():
    x = torch.randn(3, dtype=torch.float64)
    assert not tv.trace(buffer_copied_into, x).constants
    jitted = tv.jit(buffer_copied_into)
    for _ in range(2):
        x = torch.randn(3, dtype=torch.float64)
        torch.testing.assert_close(jitted(x), buffer_copied_into(x), rtol=0, atol=0)
