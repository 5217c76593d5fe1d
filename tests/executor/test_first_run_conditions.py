"""Whether a freshly traced call's first run takes its values from the recording
(executor/first_run.py), by what surrounds the call: grad mode, inference mode, autocast,
and a stamped block whose eager run wrote a storage after the recording read it. Where the
recording is not the run, the compiled trace runs, and the first call is still eager's
(tests/executor/test_first_run.py checks the first call of many programs)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

import thunderviz as tv
from tests.executor.test_first_run import ConvBN


def _x(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)


def test_without_grad_the_first_run_is_taken_from_the_trace_too() -> None:
    model = ConvBN().double()
    eager, jitted_model = copy.deepcopy(model), copy.deepcopy(model)
    jitted = tv.jit(jitted_model)
    x = _x(2, 3, 6, 6)
    with torch.no_grad():
        expected, got = eager(x), jitted(x)
    assert jitted.last.result is None and jitted.last.first_run_from_trace
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(dict(jitted_model.named_buffers()), dict(eager.named_buffers()))


def test_in_inference_mode_the_compiled_trace_runs() -> None:
    # inference tensors count no versions: nothing the recording computed is kept
    model = ConvBN().double().eval()
    jitted = tv.jit(copy.deepcopy(model))
    x = _x(2, 3, 6, 6)
    with torch.inference_mode():
        expected, got = model(x), jitted(x)
    assert not jitted.last.first_run_from_trace
    torch.testing.assert_close(got, expected)


class SavesAViewThenWritesItsBase(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(width))
        self.u = nn.Parameter(torch.randn(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # an ATen call: the first run can compute `h` again from `x` and `w`
        h = torch.ops.aten.mul.Tensor(x, self.w)
        v = h.view(-1, 8)
        s = v * self.u  # saves the view's value for the backward
        torch.relu_(h)  # ... which this write changes under it
        return s + h


def test_a_value_whose_storage_a_stamped_block_wrote_later_is_not_taken():
    # Eager's autograd refuses this backward (a saved value was modified in place); the
    # trace is functional and differentiates the value before the write. The first run must
    # not take the view's tensor from a stamped block's eager run, which by then holds the
    # values after the write: it computes the view again, and is the compiled run bit for bit.
    torch.manual_seed(0)
    model = nn.Sequential(*(SavesAViewThenWritesItsBase() for _ in range(5))).double()
    x = _x(2, 8)
    jitted = tv.jit(model)
    jitted(x).sum().backward()
    assert jitted.last.first_run_from_trace
    first = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    jitted(x).sum().backward()
    assert jitted.cache_misses == 1
    for a, b in zip(first, [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_under_autocast_the_first_call_is_eagers(dtype) -> None:
    """A mode runs below autocast, so inside a composite (`bilinear`'s `_trilinear`) the
    recording's ops ran uncast where eager's are cast: under autocast the compiled trace
    runs the first call too. Checked bit for bit against eager, and the second call too."""
    torch.manual_seed(0)
    eager = nn.Bilinear(2, 3, 4)
    jitted = tv.jit(copy.deepcopy(eager))
    x, y = torch.randn(8, 2, requires_grad=True), torch.randn(8, 3)
    with torch.autocast("cpu", dtype=dtype):
        want = eager(x, y)
        first, second = jitted(x, y), jitted(x, y)
    torch.testing.assert_close(first, want, rtol=0, atol=0)
    torch.testing.assert_close(second, want, rtol=0, atol=0)
