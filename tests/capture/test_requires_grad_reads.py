"""A program that asks a tensor whether it requires grad gets eager's answer while it is
traced (the tensors capture runs on never require grad; their proxies know), and a tensor
hook inside the program, whose effect the generated backward would skip, is refused with its
line. Checked against eager."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv
from thunderviz.capture.errors import CaptureError


def branches(x, w):
    h = x * w
    scale = 2.0 if h.requires_grad else 3.0
    frozen = 5.0 if x.requires_grad else 7.0
    with torch.no_grad():
        inside = 11.0 if (h * 1).requires_grad else 13.0
    return (h * (scale + frozen + inside)).sum()


@pytest.mark.parametrize("x_grad", [False, True])
@pytest.mark.parametrize("w_grad", [False, True])
def test_requires_grad_reads_take_eagers_branch(x_grad, w_grad):
    x = torch.randn(3, dtype=torch.float64, requires_grad=x_grad)
    w = torch.randn(3, dtype=torch.float64, requires_grad=w_grad)
    for run in (tv.jit(branches), lambda *a: tv.trace(branches, *a).python_callable()(*a)):
        torch.testing.assert_close(run(x, w), branches(x, w), rtol=0, atol=0)
    with torch.no_grad():
        torch.testing.assert_close(tv.jit(branches)(x, w), branches(x, w), rtol=0, atol=0)


def hooked(x):
    h = x * 1
    if h.requires_grad:
        h.register_hook(lambda g: g * 2)
    return (h * h).sum()


def test_a_tensor_hook_inside_the_program_is_refused_with_its_line():
    x = torch.randn(3, requires_grad=True)
    with pytest.raises(CaptureError, match=r"register_hook at .*test_requires_grad_reads.py:\d+"):
        tv.jit(hooked)(x)
    # without a gradient the branch is not taken, as in eager
    torch.testing.assert_close(tv.jit(hooked)(x.detach()), hooked(x.detach()), rtol=0, atol=0)
