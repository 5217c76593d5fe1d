"""The jitted module's tree, walked once and kept: read on every call, so kept in the forms the
per-call code reads without a call per module."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.modules.lazy import LazyModuleMixin

from thunderviz.executor.hooks import inner_hook_dicts

__all__ = ["ModuleWalk"]


class ModuleWalk:
    """`module.named_modules()` as lists, with each submodule's parameter, buffer and
    child dicts (torch mutates these dicts, never replaces them) and the hook dicts that are
    part of the cache key. Walked again when `changed()` says a submodule was added,
    replaced or removed; each walk has a new `generation`, part of the cache key: a trace of
    the old tree holds the old submodules' code and attributes, and a replacement with no
    parameters (Tanh for ReLU) or the same shapes changes nothing else the key holds."""

    __slots__ = (
        "generation",
        "submodules",
        "paths",
        "tree",
        "parameters",
        "buffers",
        "hooks",
        "lazy",
    )

    def __init__(self, module: torch.nn.Module | None, generation: int = 0) -> None:
        self.generation = generation
        named = list(module.named_modules()) if module is not None else []
        self.submodules = [m for _, m in named]
        self.paths = [p for p, _ in named]
        # each module's children as they are now: compared (by identity) on every call
        self.tree = [(m._modules, dict(m._modules)) for m in self.submodules]
        self.parameters = [m._parameters for m in self.submodules]
        self.buffers = [m._buffers for m in self.submodules]
        self.hooks = inner_hook_dicts(self.submodules)
        # a lazy module (nn.LazyLinear) not yet called: its parameters have no shape yet
        self.lazy = any(isinstance(m, LazyModuleMixin) for m in self.submodules)

    def changed(self) -> bool:
        return any(live != walked for live, walked in self.tree)

    def state(self) -> list[Any]:
        """Parameters then buffers, each tensor once, as `named_parameters()` /
        `named_buffers()` list them: the trace's inputs after the positional ones, as
        `core/inputs.py` binds them. Gathered without a call per module: it runs on every
        call."""
        params = [t for d in self.parameters for t in d.values() if t is not None]
        bufs = [t for d in self.buffers for t in d.values() if t is not None]
        state = params + bufs
        # Shared (tied) tensors are rare: dedupe only when the cheap count says so (a tensor
        # is never both a parameter and a buffer, so each kind is deduped apart).
        if len(set(map(id, state))) == len(state):
            return state
        return _first_of_each(params) + _first_of_each(bufs)


def _first_of_each(tensors: list[Any]) -> list[Any]:
    """`tensors` with each object once, where it first appears."""
    if len(set(map(id, tensors))) == len(tensors):
        return tensors
    seen: set[int] = set()
    return [t for t in tensors if not (id(t) in seen or seen.add(id(t)))]
