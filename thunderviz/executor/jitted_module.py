"""What `thunderviz.jit` returns for an nn.Module: a module itself.

Users jit a part of a model and put it back where it was (`model.encoder =
tv.jit(model.encoder)`). Were the result not a module, the assignment would drop the encoder
from the model: `model.parameters()` (the optimizer's list), `model.state_dict()` (the
checkpoint), `model.train()` / `model.eval()` and `model.to()` would all silently skip it.
A `JittedModule` shares the wrapped module's tables (the same dicts, so the same objects
under the same names): the model sees the encoder's tensors as before, under the same
state-dict keys, and `train()` reaches the wrapped module's own flag. The hook tables are
shared too: a hook registered on either is the module's, run once around each call as `jit`
runs them (executor/hooks.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from thunderviz.executor.jit import JittedFunction

__all__ = ["JittedModule", "jit"]

# JittedFunction's own references, kept as plain attributes: set through nn.Module's
# __setattr__, a module value would be registered as a submodule of the shared table.
_PLAIN = frozenset({"fn", "module", "ddp", "_root"})
# nn.Module's tables, shared with the wrapped module: its tensors and submodules, and its
# hooks (a hook registered on the jitted module is registered on the module itself)
_TABLES = tuple(k for k, v in vars(torch.nn.Module()).items() if isinstance(v, (dict, set)))


class JittedModule(JittedFunction, torch.nn.Module):
    """`thunderviz.jit` of an nn.Module (or a DistributedDataParallel)."""

    def __init__(self, module: torch.nn.Module, **options: Any) -> None:
        torch.nn.Module.__init__(self)
        JittedFunction.__init__(self, module, **options)
        inner = self.module
        assert inner is not None
        for table in _TABLES:
            object.__setattr__(self, table, getattr(inner, table))
        self.training = inner.training

    def __setattr__(self, name: str, value: Any) -> None:
        # nn.Module's __setattr__ costs microseconds, and `jit` sets `last` on every call: a
        # plain attribute already held plainly is set as it is
        if (
            name in _PLAIN
            or name.startswith("__")
            or (name in self.__dict__ and not isinstance(value, (torch.nn.Module, torch.Tensor)))
        ):
            object.__setattr__(self, name, value)
        else:
            torch.nn.Module.__setattr__(self, name, value)

    # Not nn.Module's call: the hooks are the wrapped module's (shared), which `jit` runs
    # around the traced call as nn.Module would (executor/hooks.py), once.
    __call__ = JittedFunction.__call__

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return JittedFunction.__call__(self, *args, **kwargs)

    def train(self, mode: bool = True) -> JittedModule:
        """Train or eval mode, for the wrapped module's own flag too (its forward may read
        `self.training`; the shared table reaches only its submodules)."""
        assert self.module is not None
        self.module.train(mode)
        torch.nn.Module.train(self, mode)
        return self

    def __getattr__(self, name: str) -> Any:
        try:
            return torch.nn.Module.__getattr__(self, name)
        except AttributeError:
            return JittedFunction.__getattr__(self, name)

    def __repr__(self) -> str:
        return JittedFunction.__repr__(self)


def jit(
    fn: Callable[..., Any], *, rematerialize: bool = False, cache_size: int = 8
) -> JittedFunction:
    """Run `fn` (a function or nn.Module) through thunderviz's traces; see JittedFunction.
    `cache_size` bounds the number of traces kept (least recently used go first). A module
    gives a `JittedModule`, itself a module that can stand where the module stood."""
    if isinstance(fn, torch.nn.Module):
        return JittedModule(fn, rematerialize=rematerialize, cache_size=cache_size)
    return JittedFunction(fn, rematerialize=rematerialize, cache_size=cache_size)
