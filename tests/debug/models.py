"""Small programs for the debugger tests, plain PyTorch (what a user would write).

Line numbers of some user lines are looked up with `line_of`, so the tests can check that
the debugger reports the user's source line.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn as nn
import torch.nn.functional as F


def line_of(fn: object, needle: str) -> int:
    """The file line number of the first line of `fn`'s source that contains `needle`."""
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if needle in line:
            return start + i
    raise AssertionError(f"{needle!r} not in the source of {fn}")


class ResidualMLP(nn.Module):
    """linear / relu / tanh / residual add / mul / sum: a scalar loss."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.fc1(x))
        h = torch.tanh(self.fc2(h)) + h
        y = self.head(h)
        return (y * y + y).sum()


class SqrtOfRelu(nn.Module):
    """sqrt of a tensor with exact zeros: its gradient there is inf (then NaN downstream)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 6)
        self.out = nn.Linear(6, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc(x))
        s = torch.sqrt(h)
        return self.out(s).sum()


class FlowZoo(nn.Module):
    """One of each gradient-flow status."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.nograd = nn.Linear(4, 4)
        self.unused = nn.Linear(4, 4)
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.scale = nn.Parameter(torch.zeros(4))

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.a(x))
        d = h.detach() * 2
        with torch.no_grad():
            e = self.nograd(h)
        picked = torch.index_select(h, 0, idx)
        r = torch.sqrt(self.scale) * 0.0
        y = self.frozen(h) + d + e + r
        return y.sum() + picked.sum()


HOSTILE_NAMES = (
    "<img src=x onerror=alert(1)>",
    '"]; evil [label="pwned',
    "back\\slash\\N<b>&amp;</b>",
)


class Hostile(nn.Module):
    """Modules registered under names an attacker picked."""

    def __init__(self) -> None:
        super().__init__()
        for name in HOSTILE_NAMES:
            self.add_module(name, nn.Linear(2, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self._modules.values():
            x = torch.tanh(layer(x))
        return x.sum()
