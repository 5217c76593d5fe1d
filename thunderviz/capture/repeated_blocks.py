"""Which blocks of a model block stamping (capture/stamping.py) may write out from another's
recording: those of a ModuleList or Sequential that share their class with a sibling, and
their parameters' and buffers' shapes with another such block."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["repeated_blocks"]


def repeated_blocks(root: torch.nn.Module) -> list[torch.nn.Module]:
    """Items of a ModuleList/Sequential sharing their class with a sibling; the outermost
    only (a Linear repeated inside a block is written out with its block). Of those, the
    ones whose parameters and buffers are shaped as another's: a call signature holds them,
    so a block shaped like no other (a ResNet's stages, each wider than the last) could
    only be recorded for nothing."""
    out: list[torch.nn.Module] = []
    inside: set[int] = set()
    for container in root.modules():
        if id(container) in inside:
            continue
        if not isinstance(container, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        children = list(container.children())
        for child in children:
            if "forward" in child.__dict__:
                continue  # a forward set on the instance: not ours to shadow
            if sum(type(c) is type(child) for c in children) >= 2:
                out.append(child)
                inside.update(id(m) for m in child.modules())
    with torch._C.DisableTorchFunction():  # metadata reads: not for a recorder running
        shapes = [_state_shapes(block) for block in out]
    return [block for block, s in zip(out, shapes, strict=True) if shapes.count(s) >= 2]


def _state_shapes(block: torch.nn.Module) -> tuple[Any, ...]:
    """The block's class and its parameters' and buffers' names, shapes and dtypes."""
    state = [
        *block.named_parameters(remove_duplicate=False),
        *block.named_buffers(remove_duplicate=False),
    ]
    return (type(block), *((name, t.shape, t.dtype) for name, t in state))
