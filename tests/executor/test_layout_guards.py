"""A program that reads its inputs' layout (strides, storage offset, conjugate and negative
bits, addresses, whether made in inference mode), which `jit` does not key its calls by:
each read is guarded where the trace runs, and read from the user's tensor, not the copy
capture runs on (whose offset is 0); copies keep a `conj()` view's bits, which jit keys its
calls by. Before, a branch on `x.stride(0) == 1` took the first call's side for a transposed
and a sliced input alike, and one on `x.storage_offset()` or `x.is_conj()` took the copy's
side from the first call on, silently. Every result is eager's, call after call."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv


def on_stride(x):
    return x * (2 if x.stride(0) == 1 else 3) + x.stride(-1)


def on_offset(x):
    return x * (2 if x.storage_offset() == 0 else 3)


def on_conjugate(z):
    return torch.view_as_real(z.resolve_conj()) * (2 if z.is_conj() else 3)


def on_negative(z):
    return z.resolve_neg() * (2 if z.is_neg() else 3)


def on_addresses(x, y):
    return x * (2 if x.data_ptr() == y.data_ptr() else 3)


def on_inference(x):
    return x * (2 if x.is_inference() else 3)


def _made_in_inference_mode(t):
    with torch.inference_mode():
        return t.clone()


def _base(*shape, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(0))


WIDE = _base(4, 8)
LINE = _base(8)
COMPLEX = _base(3, dtype=torch.complex128)
CASES = {
    # the same sizes, several layouts: contiguous, transposed, sliced with gaps
    on_stride: [(WIDE[:, :4].contiguous(),), (WIDE[:4, :4].t(),), (WIDE[:, ::2],)],
    on_offset: [(LINE[:4],), (LINE[4:],), (LINE[:4],)],
    on_conjugate: [(COMPLEX,), (COMPLEX.conj(),), (COMPLEX,)],
    on_negative: [(COMPLEX.imag,), (COMPLEX.conj().imag,), (COMPLEX.imag,)],
    on_addresses: [(LINE, LINE), (LINE, LINE.clone()), (LINE, LINE)],
    on_inference: [(LINE,), (_made_in_inference_mode(LINE),), (LINE,)],
}


@pytest.mark.parametrize("program", CASES, ids=lambda f: f.__name__)
def test_a_branch_on_layout_takes_eagers_side_on_every_call(program):
    jitted = tv.jit(program)
    for args in CASES[program]:
        torch.testing.assert_close(jitted(*args), program(*args), rtol=0, atol=0)
    # a later call's layout differed: it traced again (a guard failed, or a conj() view's
    # own key missed)
    assert jitted.guard_failures + jitted.cache_misses >= 2


def test_a_layout_read_of_an_intermediate_and_its_gradient_are_eagers():
    def program(x, w):
        h = (x @ w).t()
        scale = 2.0 if h.stride(0) == 1 else 3.0
        return (h * scale).sum()

    x, w = _base(3, 4), _base(4, 5)
    w_eager, w_jit = w.clone().requires_grad_(), w.clone().requires_grad_()
    program(x, w_eager).backward()
    tv.jit(program)(x, w_jit).backward()
    torch.testing.assert_close(w_jit.grad, w_eager.grad, rtol=0, atol=0)
