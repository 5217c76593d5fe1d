"""A program that changes a Python object it is given (a counter on a config, a Hugging
Face KV cache it fills) changed it only on the call jit traced: a run of the trace repeats
tensor work, not Python mutation, so the next calls left the object as it was (the next
decoding step then ran without its cache). Such a program is now run on every call (with a
warning naming the argument), and the object changes on every call as in eager. A field of
a dataclass it is given, which the program gets a copy of, is refused if rebound, by name.
Compared with eager."""

from __future__ import annotations

import copy
import dataclasses
import warnings

import pytest
import torch
import torch.nn as nn

import thunderviz as tv


class Counter:
    def __init__(self) -> None:
        self.calls = 0


class CountsItsCalls(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3, dtype=torch.float64)

    def forward(self, x, counter):
        counter.calls += 1
        return self.lin(x).square().sum() * counter.calls


def test_an_object_the_program_changes_changes_on_every_call():
    torch.manual_seed(0)
    eager, ours = CountsItsCalls(), CountsItsCalls()
    ours.load_state_dict(eager.state_dict())
    jitted = tv.jit(ours)
    theirs_counter, our_counter = Counter(), Counter()
    with pytest.warns(UserWarning, match=r"changes argument 1 \(Counter\)"):
        for _ in range(3):
            x = torch.randn(2, 3, dtype=torch.float64)
            want, got = eager(x, theirs_counter), jitted(x, our_counter)
            torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert our_counter.calls == theirs_counter.calls == 3


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    seen: torch.Tensor


def rebinds_a_field(batch):
    y = batch.x * 2
    batch.seen = y.detach()
    return y.sum()


@pytest.mark.parametrize("entry", ["jit", "Session"])
def test_a_rebound_field_of_a_dataclass_given_is_refused_by_name(entry):
    batch = Batch(torch.randn(3, requires_grad=True), torch.zeros(3))
    run = tv.jit(rebinds_a_field) if entry == "jit" else lambda b: tv.Session(rebinds_a_field, b)
    with pytest.raises(tv.CaptureError, match=r"rebinds Batch\.seen.*Return the new value"):
        run(batch)
    assert torch.equal(batch.seen, torch.zeros(3))


transformers = pytest.importorskip("transformers")


def test_a_kv_cache_the_prefill_fills_is_filled_on_every_call():
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        n_layer=2, n_head=2, n_embd=32, vocab_size=50, n_positions=32, eos_token_id=0
    )
    eager = transformers.GPT2LMHeadModel(config).eval()
    jitted = tv.jit(copy.deepcopy(eager))
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (transformers' deprecations, and ours, tested above)
        for length in (5, 5, 4):
            ids = torch.randint(0, 50, (1, length))
            theirs, ours = transformers.DynamicCache(), transformers.DynamicCache()
            want = eager(ids, past_key_values=theirs, use_cache=True)
            got = jitted(ids, past_key_values=ours, use_cache=True)
            torch.testing.assert_close(got.logits, want.logits, rtol=0, atol=0)
            assert ours.get_seq_length() == theirs.get_seq_length() == length
