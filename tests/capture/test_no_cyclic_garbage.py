"""Tracing leaves no tensor, and none of thunderviz's objects, in cyclic garbage.

A real trace binds every value the program computes (50 MB for a small GPT); while its
recorder sat in a reference cycle (it and its modes refer to each other) those values
outlived the trace until Python's cyclic collector ran, and that collection, right after a
first call, then had to look at them all. Cycles made per recorded op (torch's pytree
flatten makes one per call) were the rest of that collection's work.
"""

from __future__ import annotations

import gc

import pytest
import torch

import thunderviz as tv
from tests.autodiff.custom_function_models import FunctionMLP
from tests.capture.test_stamping import hf_llama, ids
from thunderviz.models import GPT, GPTConfig


def _cyclic_garbage(fn, make) -> list[object]:
    """What `fn(*make())` left that only the cyclic collector would free (collection stays
    off while it runs, as a first call keeps it). It runs once before on other objects of
    `make`'s, for what a process does once: torch's lazy imports (the first of dynamo's keeps
    an exception whose traceback holds the importing frames)."""
    fn(*make())
    objects = make()
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        fn(*objects)
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return list(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def _ours(objects: list[object]) -> list[str]:
    return sorted(
        {
            type(o).__qualname__
            for o in objects
            if isinstance(o, torch.Tensor) or type(o).__module__.startswith("thunderviz")
        }
    )


def _gpt():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=4, n_head=2, d_model=32, dropout=0.1)
    x = torch.randint(0, 50, (2, 16))
    return GPT(cfg).train(), (x, x)


def _llama():
    torch.manual_seed(0)
    x = ids()
    return hf_llama(), (x,)


def _function_mlp():
    torch.manual_seed(0)
    return FunctionMLP(), (torch.randn(4, 6),)


def _loss(out) -> torch.Tensor:
    return (out.logits if hasattr(out, "logits") else out).float().pow(2).mean()


@pytest.mark.parametrize("make", [_gpt, _llama, _function_mlp], ids=["gpt", "llama", "function"])
def test_a_jit_first_call_leaves_no_cyclic_garbage_of_ours(make):
    def first_call(model, args):
        _loss(tv.jit(model)(*args)).backward()

    assert _ours(_cyclic_garbage(first_call, make)) == []


@pytest.mark.parametrize("fake", [False, True], ids=["real", "fake"])
def test_a_trace_leaves_no_cyclic_garbage_of_ours(fake):
    assert _ours(_cyclic_garbage(lambda model, args: tv.trace(model, *args, fake=fake), _gpt)) == []


def test_the_check_sees_a_tensor_in_a_cycle():
    """The check itself: a tensor held only by a cycle is found."""

    def cycle():
        holder: list[object] = [torch.ones(3)]
        holder.append(holder)

    assert _ours(_cyclic_garbage(cycle, lambda: ())) == ["Tensor"]
