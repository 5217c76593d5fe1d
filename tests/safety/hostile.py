"""Hostile names for the safety tests: models whose module paths, parameter names, source
file names and source lines carry text that would run if pasted into generated Python."""

from __future__ import annotations

import linecache
from pathlib import Path
from typing import Any

import torch
from torch import nn

# Everything Python's tokenizer or str.splitlines() treats as a line break.
LINE_BREAKS = [
    "\n",
    "\r",
    "\r\n",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x1d",
    "\x1e",
    "\x85",
    "\u2028",
    "\u2029",
]


def payload(canary: Path) -> str:
    """A statement that creates the canary file if it ever runs. No "." in it: torch refuses
    module and parameter names with a dot."""
    path = f"getattr(getattr(bytes,'fromhex')('{str(canary).encode().hex()}'),'decode')()"
    return f"getattr(getattr(__import__('pathlib'),'Path')({path}),'touch')()"


def exploit(sep: str, canary: Path) -> str:
    """The issue's module name: a line break, an indented statement, then a comment."""
    return f"x{sep}  {payload(canary)}{sep}  #"


class Scale(nn.Module):
    def __init__(self, param_name: str = "weight") -> None:
        super().__init__()
        self.param_name = param_name
        self.register_parameter(param_name, nn.Parameter(torch.randn(3)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x * getattr(self, self.param_name))


class Holder(nn.Module):
    """`blocks[key]` scales its input by a parameter called `param_name`; `extra` is a
    second parameter name in the same block (to make two names collide)."""

    def __init__(
        self, key: str = "a", param_name: str = "weight", extra: str | None = None, fn: Any = None
    ) -> None:
        super().__init__()
        block = Scale(param_name)
        if extra is not None:
            block.register_parameter(extra, nn.Parameter(torch.randn(3) + 5))
        self.blocks = nn.ModuleDict({key: block})
        self.key, self.extra, self.fn = key, extra, fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        block = self.blocks[self.key]
        y = block(x)
        if self.extra is not None:
            y = y + getattr(block, self.extra)
        if self.fn is not None:
            y = self.fn(y)
        return y.sum()


def function_from(filename: str, shown_line: str) -> Any:
    """A function compiled under `filename`, whose line 1 `linecache` (which the recorder
    reads source lines from; IPython fills it for notebook cells) reports as
    `shown_line`: a hostile file name and a hostile source line."""
    namespace: dict[str, Any] = {"torch": torch}
    exec(compile("def f(y):\n    return torch.sin(y)\n", "<f>", "exec"), namespace)  # noqa: S102
    fn = namespace["f"]
    # Set after compiling: compile() refuses NUL in a file name, a code object does not.
    fn.__code__ = fn.__code__.replace(co_filename=filename)
    linecache.cache[filename] = (len(shown_line), None, [shown_line, shown_line], filename)
    return fn
