"""The process-wide decomposition cache (capture/decompositions.py): a trace made after the
process recorded its decompositions is the trace made before, text and every bound symbol at
every level (each proxy with its shape, dtype, device and requires_grad), and records nothing
again; the gradients of a jit call on a warm cache are eager's."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers
from torch.utils import _pytree as pytree

import thunderviz as tv
from thunderviz.capture import decompositions
from thunderviz.core.proxies import Proxy
from thunderviz.models import GPT, GPTConfig


def _value(x):
    if isinstance(x, Proxy):
        return (type(x).__name__, *(getattr(x, f.name) for f in dataclasses.fields(x)))
    return (type(x).__name__, repr(x))


def described(trace: tv.Trace) -> tuple[str, list[tuple]]:
    """The printed program (its first line, how long tracing took, dropped) and every bound
    symbol at every level, with the full metadata of each proxy it reads and writes."""
    text = trace.python(print_depth=100).split("\n", 1)[1]
    bsyms = [
        (
            b.sym.id,
            [_value(x) for x in pytree.tree_leaves((b.args, b.kwargs))],
            [_value(x) for x in pytree.tree_leaves(b.output)],
            repr(b.source),
            b.module_path,
            sorted(t.name for t in b.tags),
            b.header,
            len(b.subsymbols),
        )
        for b in trace.walk()
    ]
    return text, bsyms


def cold_and_warm(monkeypatch, fn, *args):
    """(cold trace, warm trace, recordings made by each)."""
    counts = [0]
    record = decompositions.DecomposingRecorder._record_decomposition

    def counting(self, *a, **k):
        counts[0] += 1
        return record(self, *a, **k)

    monkeypatch.setattr(decompositions.DecomposingRecorder, "_record_decomposition", counting)
    decompositions.clear_process_cache()
    cold = tv.trace(fn, *args)
    cold_recordings, counts[0] = counts[0], 0
    warm = tv.trace(fn, *args)
    return cold, warm, (cold_recordings, counts[0])


class CrossEntropyProgram(nn.Module):
    def __init__(self, more: bool = False) -> None:
        super().__init__()
        self.fc1 = nn.Linear(6, 10)
        self.fc2 = nn.Linear(10, 5)
        self.more = more

    def forward(self, x, y):
        h = self.fc2(F.gelu(self.fc1(x)))
        if not self.more:
            return F.cross_entropy(h, y)
        # the same op with other signatures, one of them without grad
        with torch.no_grad():
            ref = F.cross_entropy(h.detach().double(), y, label_smoothing=0.1)
        return F.cross_entropy(h, y) + F.cross_entropy(h[:3], y[:3], reduction="sum") * ref


def _cross_entropy(more: bool = False):
    torch.manual_seed(0)
    return CrossEntropyProgram(more), (torch.randn(7, 6), torch.randint(0, 5, (7,)))


def _gpt():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=3, n_head=2, d_model=32)
    idx = torch.randint(0, 50, (2, 16))
    return GPT(cfg), (idx, idx)


def _hf_gpt2():
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=2, attn_implementation="eager"
    )
    return transformers.GPT2LMHeadModel(cfg), (torch.randint(0, 50, (2, 16)),)


@pytest.mark.parametrize("make", [_cross_entropy, _gpt, _hf_gpt2], ids=["ce", "gpt", "hf"])
def test_a_warm_cache_traces_what_a_cold_one_does(monkeypatch, make):
    model, args = make()
    cold, warm, (cold_recordings, warm_recordings) = cold_and_warm(monkeypatch, model, *args)
    assert cold_recordings > 0
    assert warm_recordings == 0
    assert described(warm) == described(cold)


def test_calls_that_share_a_trace_cache_entry_but_not_a_process_one(monkeypatch):
    """Three cross_entropy calls, one without grad: inside the trace, ops of one signature
    share a recording whatever needs a gradient; a recording holding such a shared one is
    not kept for the process (another trace would not share it), and is recorded again."""
    model, args = _cross_entropy(more=True)
    cold, warm, (cold_recordings, warm_recordings) = cold_and_warm(monkeypatch, model, *args)
    assert 0 < warm_recordings < cold_recordings
    assert described(warm) == described(cold)


def test_a_decomposition_recorded_by_another_program_replays_its_names(monkeypatch):
    """A second program meets cross_entropy after other ops: what the first program's
    recording drew is drawn again on the second's names, so its trace is the one it makes
    on a cold cache."""
    model, (x, y) = _cross_entropy(more=True)
    w = torch.randn(6, 5, requires_grad=True)

    def other(x, y, w):
        return F.cross_entropy(torch.tanh(x @ w) * 2, y)

    decompositions.clear_process_cache()
    expected = described(tv.trace(other, x, y, w))
    decompositions.clear_process_cache()
    tv.trace(model, x, y)
    assert described(tv.trace(other, x, y, w)) == expected


def test_jit_on_a_warm_cache_gives_eager_gradients():
    model, (x, y) = _cross_entropy()
    model = model.double()
    x = x.double()
    decompositions.clear_process_cache()
    tv.trace(copy.deepcopy(model), x, y)  # fills the cache
    eager = copy.deepcopy(model)
    eager(x, y).backward()
    tv.jit(model)(x, y).backward()
    for (name, p), q in zip(eager.named_parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=0, atol=0, msg=name)


def _run_decomposition(call, values: dict[str, torch.Tensor]) -> torch.Tensor:
    """The ATen call `call`'s recorded decomposition run on `values` (by proxy name)."""
    env = dict(values)
    fetch = lambda x: env[x.name] if isinstance(x, Proxy) else x  # noqa: E731
    for b in call.subsymbols:
        args, kwargs = pytree.tree_map(fetch, (b.args, b.kwargs))
        env[b.output.name] = b.sym.fn(*args, **kwargs)
    return env[call.output.name]


def test_calls_told_apart_by_keyword_names():
    """`addr(c, u, v, beta=0)` is the outer product; `addr(c, u, v, alpha=0)` is `c`. Their
    arguments are alike but for the keywords' names (the values are alike, 0), and so were
    their keys, once: the second call got the first's recording, in one trace and across
    traces. Each recorded decomposition, run, must give eager's value."""
    f64 = dict(dtype=torch.float64)
    c, u, v = torch.randn(3, 4, **f64), torch.randn(3, **f64), torch.randn(4, **f64)

    def both(c, u, v):
        return torch.addr(c, u, v, beta=0) + torch.addr(c, u, v, alpha=0)

    decompositions.clear_process_cache()
    for _ in range(2):  # a cold process cache, then a warm one
        trace = tv.trace(both, c, u, v)
        calls = [b.subsymbols[0] for b in trace.bound_symbols if b.sym.name == "torch.addr"]
        assert [call.kwargs for call in calls] == [{"beta": 0}, {"alpha": 0}]
        for call in calls:
            ran = _run_decomposition(call, {"c": c, "u": u, "v": v})
            torch.testing.assert_close(ran, torch.addr(c, u, v, **call.kwargs), rtol=0, atol=0)
