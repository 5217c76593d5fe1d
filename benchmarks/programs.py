"""The programs the speed benchmarks run, each as (name, make) where `make()` returns
(model, args, loss_of_output): the project's 12-layer GPT; models written the way outside
code writes them (Hugging Face GPT-2 from a tiny config, no weights downloaded; the 12-layer
GPT of issue 14's outside measurement, attention written out as matmul and masked softmax
with a SiLU MLP; a torchvision-style ResNet with BatchNorm in training mode); and a small
program of a few sub-millisecond ops, where jit's fixed per-call cost shows. `make(device)`
builds the model and its inputs on that device ("cpu" unless given)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers

from thunderviz.models import GPT, GPTConfig

GPT_CFG = GPTConfig(vocab_size=1000, block_size=64, n_layer=12, n_head=4, d_model=128)


Made = tuple[nn.Module, tuple[Any, ...], Callable[[Any], torch.Tensor]]


def gpt(device: str = "cpu") -> Made:
    torch.manual_seed(0)
    idx = torch.randint(0, GPT_CFG.vocab_size, (2, 64)).to(device)
    return GPT(GPT_CFG).to(device), (idx, idx), lambda out: out


def hf_gpt2(device: str = "cpu") -> Made:
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
    ).to(device)
    idx = torch.randint(0, 1000, (2, 64)).to(device)
    return model, (idx,), lambda out: F.cross_entropy(out.logits.flatten(0, 1), idx.flatten())


class _WrittenOutBlock(nn.Module):
    """A pre-norm block as many repositories write one: q, k, v projections, attention as
    matmul / masked_fill / softmax, a SiLU MLP."""

    def __init__(self, d: int, n_head: int, block_size: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.proj = nn.Linear(d, d)
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        mask = torch.tril(torch.ones(block_size, block_size, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.ln1(x)
        q, k, v = (
            f(h).view(b, t, self.n_head, d // self.n_head).transpose(1, 2)
            for f in (self.q, self.k, self.v)
        )
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // self.n_head))
        att = att.masked_fill(~self.mask[:, :, :t, :t], float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.silu(self.up(self.ln2(x))))


class WrittenOutGPT(nn.Module):
    def __init__(self, vocab: int = 1000, d: int = 128, n_layer: int = 12, t: int = 64) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
        self.blocks = nn.ModuleList(_WrittenOutBlock(d, 4, t) for _ in range(n_layer))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def written_out_gpt(device: str = "cpu") -> Made:
    torch.manual_seed(0)
    idx = torch.randint(0, 1000, (2, 64)).to(device)
    return WrittenOutGPT().to(device), (idx, torch.roll(idx, -1, 1)), lambda out: out


class _BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock, written out (torchvision is not installed here)."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (
            nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
            if stride != 1 or c_in != c_out
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + identity)


class SmallResNet(nn.Module):
    """ResNet-10-shaped: stem, four stages of one BasicBlock, pooling, classifier."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU(inplace=True)
        widths = [16, 32, 64, 128]
        self.layers = nn.Sequential(
            *(
                _BasicBlock(c_in, c_out, 1 if i == 0 else 2)
                for i, (c_in, c_out) in enumerate(zip([16, *widths[:-1]], widths))
            )
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[-1], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def resnet(device: str = "cpu") -> Made:
    torch.manual_seed(0)
    x, y = torch.randn(8, 3, 32, 32).to(device), torch.randint(0, 10, (8,)).to(device)
    return SmallResNet().to(device), (x,), lambda out: F.cross_entropy(out, y)


class SmallProgram(nn.Module):
    """A few ops on small tensors: sub-millisecond, so per-call costs dominate."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.fc2(F.gelu(self.fc1(x))), y)


def small(device: str = "cpu") -> Made:
    torch.manual_seed(0)
    args = (torch.randn(8, 16).to(device), torch.randint(0, 4, (8,)).to(device))
    return SmallProgram().to(device), args, lambda out: out


PROGRAMS = [
    ("GPT 12 layers (thunderviz.models)", gpt),
    ("HF GPT-2, tiny config", hf_gpt2),
    ("GPT written out (issue 14's outside model)", written_out_gpt),
    ("ResNet-10-style CNN, BatchNorm training", resnet),
    ("small program (2 linears, CE)", small),
]
