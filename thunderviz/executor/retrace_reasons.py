"""Why a jitted call traced again, in words (`JittedFunction.last_retrace_reason`, and the
warning given when a function keeps retracing)."""

from __future__ import annotations

from typing import Any

from thunderviz.executor.bridge import CompiledEntry
from thunderviz.executor.keys import MISSING, changed_attribute
from thunderviz.executor.walk import ModuleWalk

__all__ = ["miss_reason", "attribute_reason", "unreplayable_warning"]

# what each part of the cache key (JittedFunction._key) holds
_KEY_PARTS = (
    "the positional arguments",
    "the keyword arguments",
    "the module's parameters or buffers",
    "the module's submodules (one was added, replaced or removed)",
    "a submodule's training flag or hooks",
    "grad mode, the default dtype, deterministic algorithms or autocast",
    "DDP's gradient sync (no_sync)",
)


def miss_reason(last_key: Any, key: Any) -> str:
    """A call whose key is new: the parts of it that differ from the last key's."""
    if last_key is None:
        return "first call"
    changed = [p for p, a, b in zip(_KEY_PARTS, key, last_key, strict=True) if a != b]
    return "a change in " + (", ".join(changed) or "the call")


def attribute_reason(entry: CompiledEntry, flat_inputs: list[Any], walk: ModuleWalk) -> str:
    """A call whose key was found but whose entry no longer holds: what changed."""
    changed = changed_attribute(entry.attributes)
    if changed is None:
        if not entry.shares_as_traced(flat_inputs):
            return "inputs sharing memory otherwise than when traced (one tensor twice?)"
        return ""
    index, state, name, value = changed
    now = state.get(name, MISSING)
    was = "not set" if value is MISSING else repr(value)
    if index < 0:
        return (
            f"a change of {name}, read by the jitted code from outside it (traced with "
            f"{was}, now {now!r})"
        )
    path = walk.paths[index] or type(walk.submodules[index]).__name__
    was = "not set on the instance" if value is MISSING else f"traced with {was}"
    return f"a change of the module attribute {path}.{name} ({was}, now {now!r})"


def unreplayable_warning(name: str, why: str) -> str:
    """The warning for a program traced again on every call, because it `why`."""
    return (
        f"thunderviz.jit({name}): the program {why}, which a trace cannot replay (it happens "
        "while tracing, and a branch taken on it or a number made of it is baked in): it is "
        "traced again on every call, correct but as slow as a first call. To trace once: draw "
        "with torch (`torch.rand`, which the trace replays), read values with `.item()` or "
        "`.tolist()` (which jit checks), print outside the jitted call (`thunderviz.Session` "
        "shows every value), set torch's global state outside it or restore it inside (`with "
        "torch.set_grad_enabled(...)`), or pass the value in as an argument."
    )
