"""Module hooks under `jit`, as eager runs them.

The jitted module's own forward pre-hooks, forward hooks and full backward hooks (and the
global ones, which apply to it too) are not traced: `jit` calls them around the traced
call on every call, the way `nn.Module.__call__` does, so a hook sees the real inputs and
output (with their autograd history), may replace them, and its side effects (appending
to a list, logging) happen on every call. A hook registered or removed later takes effect
on the next call.

Forward hooks of submodules run inside the program, so their tensor math is part of the
trace; the hooks are part of the cache key (a hook added or removed retraces). Their Python
side effects happen when the program is traced, not on every call: `jit` warns when it
traces a module with such hooks. Full backward hooks and pre-hooks of submodules run in the
backward trace, on every backward, side effects included (capture/module_backward_hooks.py);
the non-full `register_backward_hook` and global backward hooks are refused.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.modules import module as nn_module
from torch.utils.hooks import BackwardHook

__all__ = ["HookRunner", "module_key", "check_submodule_hooks", "inner_hook_dicts"]


def _hook_dicts(m: torch.nn.Module) -> tuple[Any, ...]:
    return (m._forward_pre_hooks, m._forward_hooks, m._backward_pre_hooks, m._backward_hooks)


def _globals() -> tuple[Any, ...]:
    return (
        nn_module._global_forward_pre_hooks,
        nn_module._global_forward_hooks,
        nn_module._global_backward_pre_hooks,
        nn_module._global_backward_hooks,
    )


def inner_hook_dicts(submodules: list[torch.nn.Module]) -> tuple[Any, ...]:
    """The hook dicts `module_key` reads (every submodule's but the jitted module's own, and
    the global ones), to tell in one `any()` that there are none."""
    inner = tuple(d for m in submodules[1:] for d in _hook_dicts(m))
    return inner + _globals()


def module_key(submodules: list[torch.nn.Module]) -> tuple[Any, ...]:
    """Every submodule's `training` flag, and the hooks in force (the hook objects
    themselves; none in the common case). One pass: it runs on every call."""
    flags = []
    hooks: list[Any] = []
    for i, m in enumerate(submodules):
        flags.append(m.training)
        if i and (
            m._forward_pre_hooks or m._forward_hooks or m._backward_pre_hooks or m._backward_hooks
        ):  # [0], the module itself: its hooks run around
            hooks.append((i, *(tuple(d.values()) for d in _hook_dicts(m))))
    if any(_globals()):
        hooks.append(("global", *(tuple(d.values()) for d in _globals())))
    return (tuple(flags), tuple(hooks))


def check_submodule_hooks(module: torch.nn.Module | None, name: str) -> None:
    """Before tracing: refuse backward hooks inside the module, warn about forward ones."""
    if module is None:
        return
    forward, backward = [], []
    for path, m in module.named_modules():
        if not path:
            continue  # the module's own hooks run around the trace
        if m._backward_hooks and m._is_full_backward_hook is False:
            backward.append(path)  # (full ones are traced: capture/module_backward_hooks.py)
        if m._forward_hooks or m._forward_pre_hooks:
            forward.append(path)
    if nn_module._global_backward_hooks or nn_module._global_backward_pre_hooks:
        backward.append("<global>")
    if backward:
        raise NotImplementedError(
            f"thunderviz.jit({name}): non-full or global backward hooks on submodules "
            f"({', '.join(backward)}) are not supported: torch runs them on its own graph "
            "nodes, which a trace has not. Use register_full_backward_hook (what torch "
            "recommends; jit runs those in its backward), register them on the jitted module "
            "itself, or run this module eagerly."
        )
    if forward or nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks:
        where = ", ".join(forward) or "global hooks"
        warnings.warn(
            f"thunderviz.jit({name}): forward hooks of submodules ({where}) are traced into the "
            "program: what they compute runs on every call, but their Python side effects "
            "(appending to a list, printing) happened once, while tracing. Hooks on the jitted "
            "module itself run on every call.",
            stacklevel=5,
        )


class HookRunner:
    """Calls the jitted module's own hooks around each call, as `nn.Module.__call__` does."""

    def __init__(self, module: torch.nn.Module | None) -> None:
        self.module = module
        # the dicts themselves (torch mutates them, never replaces them): checked every call
        self._dicts = (*_hook_dicts(module), *_globals()) if module is not None else ()

    @property
    def active(self) -> bool:
        return any(self._dicts)

    def call(self, inner: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        m = self.module
        assert m is not None
        for hook_id, hook in (
            *nn_module._global_forward_pre_hooks.items(),
            *m._forward_pre_hooks.items(),
        ):
            if hook_id in m._forward_pre_hooks_with_kwargs:
                result = hook(m, args, kwargs)
                if result is not None:
                    if not (isinstance(result, tuple) and len(result) == 2):
                        raise RuntimeError(
                            "forward pre-hook must return None or a tuple of "
                            f"(new_args, new_kwargs), but got {result}."
                        )
                    args, kwargs = result
            else:
                result = hook(m, args)
                if result is not None:
                    args = result if isinstance(result, tuple) else (result,)
        bw_hook = None
        if (
            m._backward_hooks
            or m._backward_pre_hooks
            or nn_module._global_backward_hooks
            or nn_module._global_backward_pre_hooks
        ):
            full, non_full = m._get_backward_hooks()
            if non_full:
                raise NotImplementedError(
                    "thunderviz.jit: register_backward_hook (the non-full form) is not supported; "
                    "use register_full_backward_hook"
                )
            bw_hook = BackwardHook(m, full, m._get_backward_pre_hooks())
            args = bw_hook.setup_input_hook(args)
        out = inner(*args, **kwargs)
        for hook_id, hook in (*nn_module._global_forward_hooks.items(), *m._forward_hooks.items()):
            if (
                hook_id in m._forward_hooks_with_kwargs
                or hook_id in nn_module._global_forward_hooks_with_kwargs
            ):
                result = hook(m, args, kwargs, out)
            else:
                result = hook(m, args, out)
            if result is not None:
                out = result
        if bw_hook is not None:
            out = bw_hook.setup_output_hook(out)
        return out
