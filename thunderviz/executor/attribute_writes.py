"""Module attributes the forward sets to tensors (`self.last_attention = att.detach()`), made
by `jit` after every call as the forward makes them in eager.

Capture notes such writes (`capture/attribute_writes.py`); here the forward trace returns
their values beside its own output, and the jitted call assigns them once the traced
program has run, so the attribute holds this call's tensor, not the traced call's.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.core.trace import Trace
from thunderviz.executor.keys import RewrittenTensor

__all__ = [
    "with_attribute_writes",
    "assign_attributes",
    "without_rewritten",
    "attribute_values",
]

Targets = tuple[tuple[torch.nn.Module, str], ...]


def with_attribute_writes(forward: Trace, root: torch.nn.Module | None) -> tuple[Trace, Targets]:
    """`forward` returning (its output, the written values), and the attributes they go to
    (none: `forward` as it is)."""
    writes = forward.meta.get("attribute_writes") or []
    if not writes or root is None:
        return forward, ()
    targets = tuple((root.get_submodule(path), name) for path, name, _ in writes)
    values = tuple(proxy for _, _, proxy in writes)
    if forward.output_spec is None:
        return forward.from_trace(output=(forward.output, values)), targets
    flat = list(forward.output)
    spec = pytree.tree_structure((pytree.tree_unflatten(flat, forward.output_spec), values))
    return forward.from_trace(output=(*flat, *values), output_spec=spec), targets


def attribute_values(
    forward: Trace, root: torch.nn.Module | None
) -> tuple[tuple[torch.nn.Module, str, Any], ...]:
    """(module, attribute, value) for each plain value the traced forward assigned to a
    module attribute (capture/attribute_writes.py): jit assigns it after every run."""
    writes = forward.meta.get("attribute_values") or []
    if root is None:
        return ()
    return tuple((root.get_submodule(path), name, value) for path, name, value in writes)


def assign_attributes(targets: Targets, output: Any) -> Any:
    """The program's own output, after assigning the written values to their attributes."""
    out, values = output
    for (module, name), value in zip(targets, values, strict=True):
        setattr(module, name, value)
    return out


def without_rewritten(
    attributes: tuple[tuple[Any, ...], ...],
    submodules: list[torch.nn.Module],
    targets: Targets,
    constants: dict[str, Any],
) -> tuple[tuple[Any, ...], ...]:
    """The attribute snapshot, where a tensor attribute the program rewrites every call
    without reading its values (the weight a spectral_norm or weight_norm hook sets from its
    parameters) is held by its metadata, not its identity: jit assigns a new tensor to it
    after every call, which the snapshot would otherwise see as a change, tracing every call
    again. One the trace did read is a constant of it (captured by reference) and stays."""
    written = {(id(module), name) for module, name in targets}
    if not written:
        return attributes
    read = {id(c) for c in constants.values()}
    return tuple(
        (index, state, name, RewrittenTensor(value))
        if index >= 0
        and (id(submodules[index]), name) in written
        and isinstance(value, torch.Tensor)
        and id(value) not in read
        else (index, state, name, value)
        for index, state, name, value in attributes
    )
