"""Small models for the widget tests (plain PyTorch)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

EVIL = "<img src=x onerror=alert(1)>"


class BlockMLP(nn.Module):
    """A module with two ops (`block`), so there is something to expand and collapse."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(self.block(x)), target)


class Hostile(nn.Module):
    """A submodule whose name is markup: it must only ever show as text."""

    def __init__(self) -> None:
        super().__init__()
        self.add_module(EVIL, nn.Sequential(nn.Linear(4, 4), nn.Tanh()))
        self.out = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(getattr(self, EVIL)(x)).sum()


def mlp_inputs(seed: int = 0) -> tuple[BlockMLP, torch.Tensor, torch.Tensor]:
    torch.manual_seed(seed)
    return BlockMLP(), torch.randn(6, 8), torch.randint(0, 4, (6,))
