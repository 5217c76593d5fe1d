"""The programs the speed benchmarks run, each as (name, make) where `make()` returns
(model, args, loss_of_output): the project's 12-layer GPT, a model the project did not write
(Hugging Face GPT-2 from a tiny config, no weights downloaded) and a small program of a few
sub-millisecond ops, where jit's fixed per-call cost shows."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers

from thunderviz.models import GPT, GPTConfig

GPT_CFG = GPTConfig(vocab_size=1000, block_size=64, n_layer=12, n_head=4, d_model=128)


def gpt() -> tuple[nn.Module, tuple[Any, ...], Callable[[Any], torch.Tensor]]:
    torch.manual_seed(0)
    idx = torch.randint(0, GPT_CFG.vocab_size, (2, 64))
    return GPT(GPT_CFG), (idx, idx), lambda out: out


def hf_gpt2() -> tuple[nn.Module, tuple[Any, ...], Callable[[Any], torch.Tensor]]:
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(
            vocab_size=1000,
            n_positions=64,
            n_embd=128,
            n_layer=4,
            n_head=4,
            attn_implementation="eager",
        )
    )
    idx = torch.randint(0, 1000, (2, 64))
    return model, (idx,), lambda out: F.cross_entropy(out.logits.flatten(0, 1), idx.flatten())


class SmallProgram(nn.Module):
    """A few ops on small tensors: sub-millisecond, so per-call costs dominate."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.fc2(F.gelu(self.fc1(x))), y)


def small() -> tuple[nn.Module, tuple[Any, ...], Callable[[Any], torch.Tensor]]:
    torch.manual_seed(0)
    return SmallProgram(), (torch.randn(8, 16), torch.randint(0, 4, (8,))), lambda out: out


PROGRAMS = [
    ("GPT 12 layers (thunderviz.models)", gpt),
    ("HF GPT-2, tiny config", hf_gpt2),
    ("small program (2 linears, CE)", small),
]
