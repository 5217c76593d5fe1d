"""core/collection.py: the garbage collector is paused while tracing, differentiating and
compiling, and the user's setting is what it was afterwards."""

from __future__ import annotations

import gc
import threading

import pytest
import torch

import thunderviz as tv
from thunderviz.core.collection import collection_paused


@pytest.fixture
def restore_gc():
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_setting_is_restored(restore_gc, enabled):
    gc.enable() if enabled else gc.disable()
    with collection_paused():
        assert not gc.isenabled()
        with collection_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the inner pause ends, the outer one still holds
    assert gc.isenabled() is enabled


def test_restored_after_an_error(restore_gc):
    gc.enable()
    with pytest.raises(ValueError), collection_paused():
        raise ValueError("inside")
    assert gc.isenabled()


def test_overlapping_pauses_of_two_threads(restore_gc):
    gc.enable()
    first_in, second_done = threading.Event(), threading.Event()

    def first() -> None:
        with collection_paused():
            first_in.set()
            second_done.wait(10)
            assert not gc.isenabled()  # the other thread's pause ended first

    t = threading.Thread(target=first)
    t.start()
    first_in.wait(10)
    with collection_paused():
        pass
    second_done.set()
    t.join(10)
    assert gc.isenabled()


def test_paused_while_the_program_is_traced_and_run_by_jit(restore_gc):
    gc.enable()
    seen = []

    def f(x):
        seen.append(gc.isenabled())
        return (x * 2).sin().sum()

    x = torch.randn(3, requires_grad=True)
    tv.jit(f)(x).backward()
    assert seen == [False]  # traced once, with collection paused
    assert gc.isenabled()
    torch.testing.assert_close(x.grad, 2 * (2 * x.detach()).cos())
