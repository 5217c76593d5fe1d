"""Which plain attributes of a block's modules its forward reads, and what they held.

Block stamping (capture/stamping.py) may write a block out from another block's recording
only if the forward would have taken the same path: same inputs, same state, and the same
values in every attribute it reads (Dropout's `p`, a width, a flag). Attributes it never
reads may differ (a Hugging Face attention's `layer_idx`, read only with a KV cache). A run
is deterministic in what it reads, so equal values for everything the recorded run read
mean the same run, reading the same attributes.

Reads are seen through `__getattribute__`, set on the modules' classes for the duration of
one recording (only classes without one of their own) and logging only for the watched
instances, in the thread that records.
"""

from __future__ import annotations

import contextlib
import threading
import types
from collections.abc import Iterator
from typing import Any

import torch

from thunderviz.core.plain import PLAIN

__all__ = [
    "reading_attributes",
    "current_values",
    "value_signature",
    "MODULE_INTERNALS",
    "hook_free",
    "attributes_of",
    "module_globals",
    "autocast_state",
]

_PRIMITIVES = PLAIN
# What most of a file's globals are (`module_globals` signs every one): signed by identity,
# as the checks below would sign them, without making them
_BY_IDENTITY = frozenset(
    (types.FunctionType, types.ModuleType, type, types.BuiltinFunctionType, types.MethodType)
)
# nn.Module's own bookkeeping (parameter/buffer/module and hook tables; hooks are checked
# apart): not values a forward branches on
MODULE_INTERNALS = frozenset(set(torch.nn.Module().__dict__) - {"training"})


@contextlib.contextmanager
def reading_attributes(block: torch.nn.Module) -> Iterator[dict[tuple[str, str], Any] | None]:
    """Yields the reads of the block's modules' instance attributes made inside, as
    {(module's path in the block, attribute): value signature at the first read}; None
    when some class defines its own __getattribute__ (reads cannot be seen)."""
    watched = {id(m): name for name, m in block.named_modules(remove_duplicate=False)}
    classes = {type(m) for m in block.modules()}
    if any("__getattribute__" in vars(cls) for cls in classes):
        yield None
        return
    reads: dict[tuple[str, str], Any] = {}
    owner = threading.get_ident()
    getattribute = object.__getattribute__

    def logging_getattribute(obj: Any, name: str) -> Any:
        value = getattribute(obj, name)  # AttributeError: Python then asks __getattr__
        where = watched.get(id(obj))
        if (
            where is not None
            and name not in MODULE_INTERNALS
            and name in getattribute(obj, "__dict__")
            and threading.get_ident() == owner
        ):
            reads.setdefault((where, name), value_signature(value))
        return value

    patched = []
    try:
        for cls in classes:
            cls.__getattribute__ = logging_getattribute
            patched.append(cls)
        yield reads
    finally:
        for cls in patched:
            del cls.__getattribute__


def value_signature(value: Any) -> Any:
    """Primitives, stateless modules and flat containers of them by value; anything else by
    identity (a config object the blocks share is one object).

    A module holding nothing of its own is signed by its class: two of one class run the
    same code on nothing of their own. transformers (5.25, with the `kernels` package) gives
    each attention such a module in a dict, `_kernel_funcs`, which its forward reads. A
    flat dict is signed by its items, so a flag dict the model changes between blocks is
    seen as the change it is."""
    if type(value) in _BY_IDENTITY:
        return ("object", id(value))
    if type(value) in _PRIMITIVES:
        return (type(value), repr(value))
    if type(value) in (tuple, list) and all(type(v) in _PRIMITIVES for v in value):
        return (type(value), repr(value))
    if type(value) is dict and all(type(k) is str and _flat(v) for k, v in value.items()):
        return ("dict", tuple((k, value_signature(v)) for k, v in value.items()))
    if isinstance(value, torch.nn.Module) and _stateless(value):
        return ("module", type(value), value.training)
    return ("object", id(value))


def _flat(value: Any) -> bool:
    return type(value) in _PRIMITIVES or (isinstance(value, torch.nn.Module) and _stateless(value))


def _stateless(module: torch.nn.Module) -> bool:
    """No parameters, buffers, submodules, hooks or attributes of its own."""
    own = module.__dict__
    return set(own) <= MODULE_INTERNALS | {"training"} and not any(
        own[name] for name in own if name not in ("training", "_is_full_backward_hook")
    )


def current_values(block: torch.nn.Module, reads: dict[tuple[str, str], Any]) -> bool:
    """Whether the block's attributes hold what `reads` recorded."""
    modules = dict(block.named_modules(remove_duplicate=False))
    for (where, name), sig in reads.items():
        m = modules.get(where)
        if m is None or name not in m.__dict__ or value_signature(m.__dict__[name]) != sig:
            return False
    return True


# --- the rest of a block call's signature: hooks, attributes set, globals, autocast -------
_HOOK_DICTS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
    "_state_dict_hooks",
    "_forward_hooks_with_kwargs",
)


def hook_free(block: torch.nn.Module) -> bool:
    if (
        len(torch.nn.modules.module._global_forward_hooks) > 1
        or len(torch.nn.modules.module._global_forward_pre_hooks) > 1
        or torch.nn.modules.module._global_backward_hooks
        or torch.nn.modules.module._global_backward_pre_hooks
    ):
        return False  # ours are one of each: module paths
    return all(not getattr(m, d, None) for m in block.modules() for d in _HOOK_DICTS)


def attributes_of(block: torch.nn.Module) -> tuple[Any, ...]:
    """Every plain attribute of the block and its submodules, to see one set in a forward."""
    out = []
    for name, m in block.named_modules(remove_duplicate=False):
        items = []
        for key, value in m.__dict__.items():
            if key in MODULE_INTERNALS or key == "forward":
                continue
            items.append((key, value_signature(value)))
        out.append((name, type(m), tuple(items)))
    return tuple(out)


def module_globals(block: torch.nn.Module) -> tuple[Any, ...]:
    """The globals of the files the block's modules' forwards are written in: a forward
    that sets one is recorded, and a block is written out only while they are as they were
    when its recording ran (a flag the model flips between blocks)."""
    spaces = {
        id(g): g
        for g in (getattr(type(m).forward, "__globals__", None) for m in block.modules())
        if g is not None
    }
    return tuple((key, value_signature(value)) for g in spaces.values() for key, value in g.items())


def autocast_state() -> tuple[Any, ...]:
    return tuple(
        (d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")
    ) + (torch.is_autocast_cache_enabled(),)
