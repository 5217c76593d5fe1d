"""What the reverse sweep did, rule application by rule application.

The backward trace alone does not say in which role a value is read: when a rule passes a
cotangent straight through (`add`'s rule gives both operands the output's cotangent), one
backward proxy is the gradient of several forward tensors at once, and an accumulation
`aten.add.Tensor(old, new)` looks like any other add. The debugger needs the roles to edit
one tensor's gradient (a tensor hook) or what a module hands to its inputs (a full backward
hook) without touching the others, so the sweep writes them down here.
"""

from __future__ import annotations

from dataclasses import dataclass

from thunderviz.core.symbol import BoundSymbol

__all__ = ["Contribution", "RuleApplication"]


@dataclass(frozen=True)
class Contribution:
    """One `put_grad(x, grad)`: `total` (the new accumulated cotangent of forward tensor `x`)
    is `grad` itself when `old` is None, else the accumulation `aten.add.Tensor(old, grad)`."""

    x: str
    grad: str
    old: str | None
    total: str


@dataclass(frozen=True)
class RuleApplication:
    """One rule run on `bsym` (part of the top-level forward op `top`). `emitted`: output
    names of the backward bound symbols it produced (accumulations included); `read`:
    forward output name -> the cotangent proxy its rule reads for it; `contributions` in
    the order it made them."""

    top: BoundSymbol
    bsym: BoundSymbol
    emitted: tuple[str, ...]
    read: dict[str, str]
    contributions: tuple[Contribution, ...]
