"""Globals the program's code reads, wherever it reads them (the jitted forward, a
submodule's forward, a method it calls on self, a helper function two calls down), are
snapshotted: changing one retraces, and the result is eager's. Compared with eager."""

from __future__ import annotations

import torch
import torch.nn as nn

import thunderviz as tv

SCALE = 2.0
SHIFT = 1.0
USE_TANH = True


def _shifted(x):
    return _deeper(x) + SHIFT


def _deeper(x):
    return torch.tanh(x) if USE_TANH else torch.sigmoid(x)


class Inner(nn.Module):
    def forward(self, x):
        return self._scaled(x)

    def _scaled(self, x):
        return x * SCALE


class Outer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return _shifted(self.inner(x)).sum()


def test_globals_read_below_the_jitted_forward_retrace_when_they_change():
    global SCALE, SHIFT, USE_TANH
    saved = SCALE, SHIFT, USE_TANH
    model, x = Outer(), torch.randn(4, dtype=torch.float64)
    jitted = tv.jit(model)
    try:
        for change in (
            lambda: None,
            lambda: globals().update(SCALE=3.0),  # a submodule's method
            lambda: globals().update(SHIFT=-1.0),  # a helper the forward calls
            lambda: globals().update(USE_TANH=False),  # a helper's helper
        ):
            change()
            for _ in range(2):
                torch.testing.assert_close(jitted(x), model(x), rtol=0, atol=0)
        assert jitted.cache_misses == 4
    finally:
        SCALE, SHIFT, USE_TANH = saved
