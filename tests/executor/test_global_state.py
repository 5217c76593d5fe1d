"""A program that leaves torch's global state changed (grad mode, the default dtype,
deterministic algorithms): eager's next call starts from that state. A run of a trace does
not change it, so the first jitted call (which ran the program while tracing it) was right
and the next ones were not: their outputs had the old dtype, grad mode stayed on after them.
Such a program is traced again on every call, with a warning naming what it changed. One
that restores what it set (`with torch.set_grad_enabled(...)`) is traced once."""

from __future__ import annotations

import pytest
import torch

import thunderviz as tv


@pytest.fixture(autouse=True)
def _restored():
    """Each test leaves the process as it found it."""
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    deterministic = torch.are_deterministic_algorithms_enabled()
    yield
    torch.set_grad_enabled(grad)
    torch.set_default_dtype(dtype)
    torch.use_deterministic_algorithms(deterministic)


def _state():
    return (
        torch.is_grad_enabled(),
        torch.get_default_dtype(),
        torch.are_deterministic_algorithms_enabled(),
    )


def _reset():
    torch.set_grad_enabled(True)
    torch.set_default_dtype(torch.float32)
    torch.use_deterministic_algorithms(False)


def make(setter):
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 2)

    def program(x):
        setter()
        return linear(x) + torch.ones(1)

    return program


SETTERS = {
    "grad mode": lambda: torch.set_grad_enabled(False),
    "default dtype": lambda: torch.set_default_dtype(torch.float64),
    "deterministic algorithms": lambda: torch.use_deterministic_algorithms(True),
}


@pytest.mark.parametrize("what", SETTERS)
def test_a_program_that_leaves_global_state_changed_acts_as_in_eager_on_every_call(what):
    x = torch.randn(4, 3)
    eager, jitted = make(SETTERS[what]), tv.jit(make(SETTERS[what]))
    with pytest.warns(UserWarning, match="leaves torch's global state changed"):
        for _ in range(3):
            _reset()
            want = eager(x)
            state = _state()
            _reset()
            got = jitted(x)
            assert _state() == state
            assert got.dtype == want.dtype and got.requires_grad == want.requires_grad
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert jitted.cache_misses == 3


def test_a_program_that_restores_what_it_set_is_traced_once():
    torch.manual_seed(0)
    linear = torch.nn.Linear(3, 2)

    def program(x):
        with torch.set_grad_enabled(False):
            frozen = linear(x)
        return linear(x) * frozen

    jitted, x = tv.jit(program), torch.randn(4, 3)
    for _ in range(3):
        torch.testing.assert_close(jitted(x), program(x), rtol=0, atol=0)
        assert torch.is_grad_enabled()
    assert jitted.cache_misses == 1
