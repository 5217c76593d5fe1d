"""Moving gradients between modules and lists, in the spirit of Thunder's helpers."""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["populate_grads", "extract_grads", "clear_grads"]


def populate_grads(grads: Sequence[torch.Tensor | None], module: torch.nn.Module) -> None:
    """Set `p.grad` for each of `module.parameters()` from `grads`, in that order."""
    params = list(module.parameters())
    if len(grads) != len(params):
        raise ValueError(f"populate_grads: {len(grads)} gradients for {len(params)} parameters")
    for p, g in zip(params, grads, strict=True):
        if g is not None and tuple(g.shape) != tuple(p.shape):
            raise ValueError(
                f"populate_grads: gradient of shape {tuple(g.shape)} "
                f"for a parameter of shape {tuple(p.shape)}"
            )
        p.grad = None if g is None else g.detach().to(p.dtype)


def extract_grads(module: torch.nn.Module) -> list[torch.Tensor | None]:
    """The `.grad` of each of `module.parameters()`, in order."""
    return [p.grad for p in module.parameters()]


def clear_grads(module: torch.nn.Module) -> None:
    """Set every parameter's `.grad` to None."""
    for p in module.parameters():
        p.grad = None
