"""The reverse sweep over repeated blocks (autodiff/block_sweep.py): a block written out from
a proven record gives the same augmented forward, backward, saved tensors, cotangent map and
sweep log as sweeping it unit by unit, op for op; blocks whose ops or boundaries differ are
swept for real; gradients match torch.autograd. Blocks capture wrote out from one recording
are matched by capture's renamings instead of a walk (`trace.meta["written_out"]`), with
the same result as the walk gives."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

import thunderviz as tv
from tests.capture.test_stamping import hf_bert, hf_llama, ids
from tests.helpers import fingerprint
from thunderviz.autodiff import block_sweep
from thunderviz.models import GPT, GPTConfig


def described(result) -> list:
    """Everything a result shows, at every level (sources, module paths, tags, links)."""

    def program(trace):  # without the provenance lines, which say how long it took
        return [x for x in str(trace).splitlines() if not x.startswith("# Constructed")]

    def links(trace):
        return [
            None if b.fwd_bsym is None else (b.fwd_bsym.sym.id, repr(b.fwd_bsym.output))
            for b in trace.walk()
        ]

    return [
        program(result.augmented_forward),
        program(result.backward),
        fingerprint(result.augmented_forward),
        fingerprint(result.backward),
        links(result.augmented_forward),
        links(result.backward),
        [(s.proxy.name, s.recomputed) for s in result.saved_for_backward],
        [None if g is None else g.name for g in result.grad_inputs],
        result.cotangent_of,
        [
            (a.top.sym.id, repr(a.top.output), a.bsym.sym.id, a.emitted, a.read, a.contributions)
            for a in result.applications
        ],
    ]


def stamped_and_swept(monkeypatch, fn, *args, fake=False, walks=None):
    """(the unit ranges written out, the result with block stamping, the one without); each
    on a trace of its own (a result draws its names from its trace's name generator). The
    result is also the same when capture does not say which blocks it wrote out, so every
    block is walked to compare it (`_shape`); `walks`: how many blocks are walked when it
    does (the records' own, and those capture did not write out)."""
    written: list[tuple[int, int]] = []
    apply, shape = block_sweep._apply, block_sweep._shape
    walked: list[str] = []

    def counting(w, start, state):
        written.append((start, start + len(w.fwd)))
        return apply(w, start, state)

    with monkeypatch.context() as m:
        m.setattr(block_sweep, "_apply", counting)
        m.setattr(
            block_sweep, "_shape", lambda units, path: walked.append(path) or shape(units, path)
        )
        torch.manual_seed(0)
        fast = tv.autodiff(tv.trace(fn, *args, fake=fake))
    with monkeypatch.context() as m:
        m.setattr(block_sweep, "_renamed", lambda ours, theirs: None)
        torch.manual_seed(0)
        walking = tv.autodiff(tv.trace(fn, *args, fake=fake))
    with monkeypatch.context() as m:
        m.setattr(block_sweep, "_block_path", lambda path: None)
        torch.manual_seed(0)
        full = tv.autodiff(tv.trace(fn, *args, fake=fake))
    assert described(fast) == described(full)
    assert described(walking) == described(full)
    if walks is not None:
        assert len(walked) == walks, walked
    return written, fast, full


@pytest.mark.parametrize("fake", [False, True])
@pytest.mark.parametrize("training, dropout", [(False, 0.0), (True, 0.1)])
def test_our_gpt(monkeypatch, fake, training, dropout):
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=100, block_size=16, n_layer=6, n_head=4, d_model=32, dropout=dropout)
    ).train(training)
    idx = ids()
    # capture recorded blocks 0 and 1 and wrote 2 to 5 out from block 1; only the records
    # (blocks 5 and 4) and block 0 are walked
    written, _, _ = stamped_and_swept(monkeypatch, model, idx, idx, fake=fake, walks=3)
    assert len(written) == 4  # blocks 5 and 4 swept (the second proves the first)


@pytest.mark.parametrize("make", [hf_llama, lambda: hf_bert(True)], ids=["llama", "bert_train"])
def test_hf_models(monkeypatch, make):
    torch.manual_seed(0)
    written, _, _ = stamped_and_swept(monkeypatch, make(), ids())
    assert len(written) == 3


class Block(nn.Module):
    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, x):
        return self.down(torch.tanh(self.up(x))) + x


class Stack(nn.Module):
    def __init__(self, blocks: list[nn.Module], keep: set[int] = frozenset()) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.keep = keep

    def forward(self, x):
        kept = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i in self.keep:
                kept.append(x)
        return sum(kept, x.sin())


def test_a_block_whose_ops_differ_is_swept(monkeypatch):
    # swept last first: blocks 5 and 4 prove the record, 3 is written out, 2 has other
    # shapes (swept), 1 is written out, 0's input needs no gradient (swept)
    model = Stack(
        [Block(8, 16), Block(8, 16), Block(8, 32), Block(8, 16), Block(8, 16), Block(8, 16)]
    )
    written, fast, _ = stamped_and_swept(monkeypatch, model, torch.randn(2, 8))
    blocks = {b.module_path.split(".")[1] for b in fast.forward.bound_symbols if b.module_path}
    assert len(written) == 2 and len(blocks) == 6


def test_a_block_whose_boundary_differs_is_swept(monkeypatch):
    # block 2's output is also kept: block 3's input already has a cotangent when block 3
    # is swept (its gradient is accumulated into it), so block 3 is swept for real; blocks
    # 2 and 1 are written out from block 4's record; block 0's input needs no gradient
    model = Stack([Block(8, 16) for _ in range(6)], keep={2})
    written, fast, _ = stamped_and_swept(monkeypatch, model, torch.randn(2, 8))
    assert len(written) == 2
    # every block's output kept: all alike again (but block 0)
    model = Stack([Block(8, 16) for _ in range(6)], keep={0, 1, 2, 3, 4, 5})
    written, _, _ = stamped_and_swept(monkeypatch, model, torch.randn(2, 8))
    assert len(written) == 3


def test_no_grad_inputs_in_one_block(monkeypatch):
    # block 1's parameters do not require grad: its rules compute no weight gradients
    model = Stack([Block(8, 16) for _ in range(6)])
    model.blocks[1].requires_grad_(False)
    written, _, _ = stamped_and_swept(monkeypatch, model, torch.randn(2, 8))
    assert len(written) == 2  # blocks 3 and 2; block 1 and block 0 (no-grad input) swept


def test_gradients_match_autograd(monkeypatch):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=100, block_size=16, n_layer=5, n_head=4, d_model=32))
    idx = ids()
    written: list[int] = []
    apply = block_sweep._apply
    monkeypatch.setattr(
        block_sweep,
        "_apply",
        lambda w, start, state: written.append(start) or apply(w, start, state),
    )
    loss, grads = tv.value_and_grad(model)(idx, idx)
    want = torch.autograd.grad(model(idx, idx), [p for p in model.parameters()])
    assert len(written) == 3
    torch.testing.assert_close(loss, model(idx, idx))
    for got, ref in zip(grads[2:], want, strict=True):
        torch.testing.assert_close(got, ref)


def test_a_stale_word_from_capture_matches_nothing(monkeypatch):
    # a pass that replaced a written-out block's bound symbol leaves capture's word on it
    # stale: that block is walked, with the same result as ever
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=100, block_size=16, n_layer=6, n_head=4, d_model=32))
    idx = ids()

    def passed():  # a trace of its own each time: autodiff draws names from it
        trace = tv.trace(model, idx, idx)
        stamped = {id(b) for w in trace.meta["written_out"] for b in w.bsyms}
        bsyms = trace.bound_symbols
        i = next(i for i, b in enumerate(bsyms) if b.module_path.startswith("blocks.3"))
        assert id(bsyms[i]) in stamped
        bsyms[i] = bsyms[i].with_changes()
        return trace

    walked: list[str] = []
    shape = block_sweep._shape
    monkeypatch.setattr(
        block_sweep, "_shape", lambda units, path: walked.append(path) or shape(units, path)
    )
    fast = tv.autodiff(passed())
    assert walked == ["blocks.5", "blocks.4", "blocks.3", "blocks.0"]
    monkeypatch.setattr(block_sweep, "_block_path", lambda path: None)
    assert described(fast) == described(tv.autodiff(passed()))
