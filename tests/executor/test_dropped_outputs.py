"""An object the program returns that a trace cannot (a Hugging Face KV cache: program
state holding the call's own tensors) comes back from jit as a stand-in that raises when
used, naming it and the way out. It came back as None, and incremental decoding then
passed None as the cache: the model took the new token for the whole sequence and computed
other logits, silently. Compared with eager."""

from __future__ import annotations

import copy
import dataclasses
import enum
import warnings

import numpy as np
import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from thunderviz.executor.dropped_outputs import DroppedOutput

transformers = pytest.importorskip("transformers")


def _gpt2():
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=50, n_positions=32, eos_token_id=0
    )
    return transformers.GPT2LMHeadModel(config)


def _dropped(out):
    return [v for v in out.values() if isinstance(v, DroppedOutput)]


def test_a_returned_kv_cache_is_a_stand_in_that_refuses_to_be_used():
    eager = _gpt2().eval()
    jitted = tv.jit(copy.deepcopy(eager))
    ids, new = torch.randint(0, 50, (1, 5)), torch.tensor([[7]])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (transformers' deprecations)
        want, got = eager(ids, use_cache=True), jitted(ids, use_cache=True)
        torch.testing.assert_close(got.logits, want.logits, rtol=0, atol=0)
        (stand_in,) = _dropped(got)
        assert "DynamicCache" in repr(stand_in)
        for use in (
            lambda: jitted(new, past_key_values=stand_in, use_cache=True),
            lambda: eager(new, past_key_values=stand_in, use_cache=True),
            lambda: bool(stand_in),
            lambda: stand_in.get_seq_length(),
        ):
            with pytest.raises(RuntimeError, match=r"DynamicCache.*use_cache=False"):
                use()
        copy.deepcopy(got)  # (copying the output does not use it)


def test_training_with_a_cache_returned_is_eagers():
    eager = _gpt2()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    ids = torch.randint(0, 50, (2, 6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(2):
            torch.manual_seed(step)  # (the same dropout masks on both sides)
            want = eager(ids, labels=ids, use_cache=True)
            torch.manual_seed(step)
            got = jitted(ids, labels=ids, use_cache=True)
            torch.testing.assert_close(got.loss, want.loss, rtol=0, atol=1e-6)
            want.loss.backward()
            got.loss.backward()
            assert len(_dropped(got)) == 1
    for a, b in zip(eager.parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-6)


class Handle:
    """Program state a trace cannot return (not a tensor, a plain value or a container)."""


@dataclasses.dataclass
class WithState:
    value: torch.Tensor
    state: Handle


class ReturnsState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3, dtype=torch.float64)

    def forward(self, x):
        y = self.lin(x)
        return WithState(y, Handle()), (y.sum(), Handle())


def test_the_stand_in_takes_the_place_in_a_dataclass_and_a_tuple():
    model, x = ReturnsState(), torch.randn(2, 3, dtype=torch.float64)
    got = tv.jit(model)(x)
    want = model(x)
    torch.testing.assert_close(got[0].value, want[0].value, rtol=0, atol=0)
    assert isinstance(got[0].state, DroppedOutput) and isinstance(got[1][1], DroppedOutput)
    with pytest.raises(RuntimeError, match="Handle"):
        got[1][1].anything  # noqa: B018


class Mode(enum.Enum):
    TRAIN = 1


def returns_values(x):
    return x * 2, Mode.TRAIN, range(3), np.float32(2.5), frozenset({1, "a"}), b"xy", 1 + 2j


def test_immutable_values_the_program_returns_come_back_as_eager_returns_them():
    """Not tensors and not printable literals, but they cannot change and hold no tensor:
    handed back as traced (they were None)."""
    x = torch.randn(3, requires_grad=True)
    jitted = tv.jit(returns_values)
    for _ in range(2):
        got, want = jitted(x), returns_values(x)
        torch.testing.assert_close(got[0], want[0], rtol=0, atol=0)
        assert got[1:] == want[1:] and type(got[3]) is np.float32


def test_a_numpy_array_returned_gets_the_stand_in():
    """An array can be written, and may hold values of the run: not handed back as traced."""
    got = tv.jit(lambda x: (x * 2, np.array([1.0])))(torch.randn(3, requires_grad=True))
    assert isinstance(got[1], DroppedOutput)


def test_a_filled_kv_cache_passed_in_is_refused_with_the_way_out():
    """The prefill (an empty cache, filled by the call) is eager's; the next step hands jit
    a cache holding tensors, program state it cannot key: refused, saying what to do."""
    eager = _gpt2().eval()
    jitted = tv.jit(copy.deepcopy(eager))
    ids = torch.randint(0, 50, (1, 5))
    ours, theirs = transformers.DynamicCache(), transformers.DynamicCache()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = eager(ids, past_key_values=theirs, use_cache=True)
        got = jitted(ids, past_key_values=ours, use_cache=True)
        torch.testing.assert_close(got.logits, want.logits, rtol=0, atol=0)
        with pytest.raises(TypeError, match=r"Hugging Face KV cache.*use_cache=False"):
            jitted(torch.tensor([[7]]), past_key_values=ours, use_cache=True)
