"""Fake traces made with the cheap FakeTensors of capture/fake_inputs.py are identical to
those made with `FakeTensorMode.from_tensor` for every tensor: same printed program, same
bound symbols at every level, same module paths and source lines."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import transformers

import thunderviz as tv
from tests.helpers import fingerprint, program_text
from thunderviz.capture import fake_inputs
from thunderviz.models import GPT, GPTConfig


def assert_same_as_full_conversion(monkeypatch, fn, *args, **kwargs):
    torch.manual_seed(0)
    fast = tv.trace(fn, *args, fake=True, **kwargs)
    with monkeypatch.context() as m:
        m.setattr(fake_inputs, "_owns_plain_storage", lambda t: False)
        torch.manual_seed(0)
        full = tv.trace(fn, *args, fake=True, **kwargs)
    assert program_text(fast) == program_text(full)
    assert fingerprint(fast) == fingerprint(full)
    assert [(p.name, p.shape, p.dtype, p.device, p.requires_grad) for p in fast.args] == [
        (p.name, p.shape, p.dtype, p.device, p.requires_grad) for p in full.args
    ]


def tiny_gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=100, n_positions=16)
    return transformers.GPT2LMHeadModel(cfg).eval(), torch.randint(0, 100, (2, 16))


def tiny_llama():
    cfg = transformers.LlamaConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return transformers.LlamaForCausalLM(cfg), torch.randint(0, 100, (2, 16))


def tiny_bert():
    cfg = transformers.BertConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
    )
    return transformers.BertModel(cfg), torch.randint(0, 100, (2, 16))


@pytest.mark.parametrize("make", [tiny_gpt2, tiny_llama, tiny_bert], ids=["gpt2", "llama", "bert"])
def test_hf_models(monkeypatch, make):
    model, idx = make()
    assert_same_as_full_conversion(monkeypatch, model, idx)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train_with_dropout"])
def test_our_gpt(monkeypatch, training):
    torch.manual_seed(0)
    model = GPT(
        GPTConfig(vocab_size=100, block_size=16, n_layer=2, n_head=4, d_model=32, dropout=0.1)
    ).train(training)
    idx = torch.randint(0, 100, (2, 16))
    assert_same_as_full_conversion(monkeypatch, model, idx, idx)


class Aliased(nn.Module):
    """A buffer sharing its parameter's storage, updated in place; a view input."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.register_buffer("w_alias", self.w.detach())
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x, half):
        self.count.add_(1)
        return x @ self.w + self.w_alias.sum() + half.sum()


def test_aliased_state_and_view_inputs(monkeypatch):
    base = torch.randn(8, 4)
    assert_same_as_full_conversion(monkeypatch, Aliased(), torch.randn(3, 4), base[::2])


def test_which_tensors_take_the_cheap_way():
    mode = torch._subclasses.fake_tensor.FakeTensorMode(allow_non_fake_inputs=True)
    plain, base, other = torch.randn(3, 4), torch.randn(8, 4), torch.randn(2)
    alias = other.detach()
    convert = fake_inputs.fake_converter(mode, [plain, base[::2], other, alias, 7])
    assert fake_inputs._owns_plain_storage(plain)
    assert not fake_inputs._owns_plain_storage(base[::2])
    for t in (plain, base[::2], other, alias, torch.randn(4, 3).t()):
        fake = convert(t)
        assert isinstance(fake, torch._subclasses.FakeTensor)
        assert (fake.shape, fake.stride(), fake.dtype, fake.device, fake.storage_offset()) == (
            t.shape,
            t.stride(),
            t.dtype,
            t.device,
            t.storage_offset(),
        )
        assert not fake.requires_grad
