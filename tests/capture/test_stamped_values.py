"""jit on stamped blocks (capture/stamped_values.py): a stamped block's eager run gives the
call's first run the values inside it, so the first run is taken from the trace, and the
result is eager's (bit for bit where eager's kernels run in eager's order) and the compiled
run's. Blocks whose eager run is not the recording's ops keep no values, and the compiled
forward makes the first run. Real tensors only: jit traces nothing else."""

from __future__ import annotations

import copy

import pytest
import torch

import thunderviz as tv
from tests.capture.test_stamping import Block, Stack, hf_bert, hf_llama, ids
from thunderviz.capture import stamping
from thunderviz.models import GPT, GPTConfig


def stamped_from_here(monkeypatch) -> list[str]:
    """The paths of the blocks written out from a recording from here on, as they come."""
    stamped: list[str] = []
    stamp = stamping._Stamper._stamp
    monkeypatch.setattr(
        stamping._Stamper,
        "_stamp",
        lambda self, r, c, run: stamped.append(c.path) or stamp(self, r, c, run),
    )
    return stamped


@pytest.mark.parametrize("training, dropout", [(False, 0.0), (True, 0.1)])
def test_jit_on_stamped_blocks_matches_eager(monkeypatch, training, dropout):
    stamped = stamped_from_here(monkeypatch)
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=100, block_size=16, n_layer=5, n_head=4, d_model=32, dropout=dropout)
    ).train(training)
    idx = ids()
    torch.manual_seed(1)
    jitted = tv.jit(model)
    jitted(idx, idx).backward()
    ours = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.manual_seed(1)
    model(idx, idx).backward()
    assert stamped == ["blocks.2", "blocks.3", "blocks.4"]
    for got, want in zip(ours, [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # the stamped blocks' eager runs gave the values inside them (dropout's mask, drawn in
    # place by `bernoulli_`, as the recording's functional `bernoulli`): the first run was
    # taken from the trace, not made by running the compiled forward
    assert jitted.last.first_run_from_trace


class WritesInside(Block):
    def forward(self, x):
        h = self.fc(x)
        h.mul_(2)  # in place, on a value of its own
        return torch.relu_(h) + x


class WritesThroughAView(Block):
    def forward(self, x):
        h = self.fc(x)
        h[:, :4].mul_(2)  # recorded with the scatter into `h`, which eager does not run
        return torch.tanh(h) + x


@pytest.mark.parametrize("cls, values", [(WritesInside, True), (WritesThroughAView, False)])
def test_jit_on_stamped_blocks_writing_in_place_inside(monkeypatch, cls, values):
    # an in-place write the recording has as its functional twin passes on its value; one
    # into a view does not match the recording's ops, so the block keeps no values inside
    # and the compiled forward makes the first run. Both stamped, both eager's gradients.
    stamped = stamped_from_here(monkeypatch)
    torch.manual_seed(0)
    model = Stack([cls(8) for _ in range(5)]).double()
    eager = copy.deepcopy(model)
    x = torch.randn(2, 8, dtype=torch.float64)
    jitted = tv.jit(model)
    jitted(x).sum().backward()
    eager(x).sum().backward()
    assert stamped == ["blocks.3", "blocks.4"]
    assert jitted.last.first_run_from_trace is values
    for got, want in zip(model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=0)


def _hf_loss(out) -> torch.Tensor:
    return (out.logits if hasattr(out, "logits") else out.last_hidden_state).square().mean()


@pytest.mark.parametrize(
    "make", [lambda: hf_bert(True), hf_llama], ids=["bert-training-dropout", "llama"]
)
def test_jit_on_hf_models_with_stamped_blocks_matches_eager(monkeypatch, make):
    # models we did not write: their stamped blocks' eager runs give the first run its values
    # (BERT's dropout masks included); the first call is the compiled run bit for bit, and
    # eager's in float64
    stamped = stamped_from_here(monkeypatch)
    torch.manual_seed(0)
    model = make().double()
    eager = copy.deepcopy(model)
    x = ids()
    jitted = tv.jit(model)
    grads = []
    for call in range(2):  # the first call, then the compiled run on the same state
        torch.manual_seed(1)
        _hf_loss(jitted(x)).backward()
        if call == 0:
            assert jitted.last.first_run_from_trace
        grads.append([p.grad for p in model.parameters()])
        model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    _hf_loss(eager(x)).backward()
    assert len(stamped) >= 2 and jitted.cache_misses == 1
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)
    torch.testing.assert_close(grads[0], [p.grad for p in eager.parameters()])
