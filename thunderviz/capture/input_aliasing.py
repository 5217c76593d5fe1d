"""Inputs that share memory: `f(x, x)`, a parameter passed as an argument, `f(x, x[:2])`.

A trace reads each input as the value it held when the call began, and records an in-place
write as a new value of the input written. Where two inputs are one tensor and the program
writes into one of them, eager reads the written value through the other; the trace read the
old one (`f(z, z)` with `a.add_(1); return b * 2` returned 0 instead of 2). So:

- Inputs that are the same view of memory (same storage, offset, sizes, strides and dtype)
  run on aliases of one copy, which the recorder knows for views of each other: a write
  into one is read through the other, as in eager. Each keeps its own proxy, so where
  nothing is written each argument is read, and differentiated, as itself.
- Inputs that overlap without being the same view (`x` and `x[:2]`) get copies of their own;
  that is exact while neither is written. When the program writes into one of them the trace
  cannot say what the other reads, and capture refuses, naming both.
- `sharing(values)` is what a trace assumed about its inputs' memory (`Trace.meta`), and what
  `jit` compares each call against where it matters (executor/jit.py): a trace whose
  program writes into an input is right only for calls whose inputs share as the traced
  ones did; one that writes nothing reads each input as itself, whatever they share.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from thunderviz.capture.errors import CaptureError

__all__ = ["memory_key", "sharing", "SameViewInputs", "refuse_written_overlaps"]


def memory_key(t: torch.Tensor) -> Any:
    """Equal for two tensors exactly when they may share memory: the device and storage of
    a dense tensor with elements; anything else is only itself."""
    if (
        t.layout != torch.strided
        or isinstance(t, torch._subclasses.FakeTensor)
        or t.device.type == "meta"
    ):
        return ("object", id(t))
    if t.numel() == 0:
        return ("empty", id(t))  # no storage to share: data_ptr 0 means nothing
    return (t.device, t.untyped_storage().data_ptr())


def _view(t: torch.Tensor) -> tuple[Any, ...]:
    return (t.storage_offset(), t.shape, t.stride(), t.dtype)


def sharing(values: Sequence[Any]) -> tuple[tuple[tuple[int, tuple[Any, ...]], ...], ...]:
    """For each set of tensors among `values` that share a storage: their positions, each
    with its view of it. Empty (the common case) when no two share: jit asks on every call
    of a program that writes into an input (a BatchNorm's statistics), so that case is told
    from the storages' addresses alone (~0.1 us a tensor; the keys below cost ten times it)."""
    try:
        addresses = [v.untyped_storage().data_ptr() for v in values if isinstance(v, torch.Tensor)]
    except (RuntimeError, NotImplementedError):  # a sparse or nested tensor: no one storage
        addresses = [0]
    if 0 not in addresses and len(set(addresses)) == len(addresses):
        return ()
    keys = [memory_key(v) if isinstance(v, torch.Tensor) else None for v in values]
    present = [k for k in keys if k is not None]
    if len(set(present)) == len(present):
        return ()
    groups: dict[Any, list[int]] = {}
    for i, k in enumerate(keys):
        if k is not None:
            groups.setdefault(k, []).append(i)
    return tuple(
        tuple((i, _view(values[i])) for i in members)
        for members in groups.values()
        if len(members) > 1
    )


class SameViewInputs:
    """The copies the program runs on: one per input, where inputs that are the same view of
    the same memory get aliases of one copy (`aten.alias`: another tensor, the same memory),
    so the values the program computes are eager's. Which copy aliases which is kept for the
    recorder (`RecorderState.bind_alias`), so the trace reads a write through either name;
    each input keeps its own proxy, so where nothing is written each argument is read (and
    differentiated) as itself."""

    def __init__(self, convert: Callable[[torch.Tensor], torch.Tensor]) -> None:
        self._convert = convert
        self._made: dict[Any, torch.Tensor] = {}
        self.aliases: list[tuple[torch.Tensor, torch.Tensor]] = []  # (alias, its first copy)
        # id of each copy -> the user's tensor: what a copy does not keep (its storage
        # offset, its conjugate bit, its address) is read from there (capture/guards.py)
        self.users: dict[int, torch.Tensor] = {}

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        made = self._copy(t)
        self.users[id(made)] = t
        return made

    def _copy(self, t: torch.Tensor) -> torch.Tensor:
        key = memory_key(t)
        if key[0] == "object" or key[0] == "empty":
            return self._convert(t)
        key = (key, _view(t))
        first = self._made.get(key)
        if first is None:
            self._made[key] = copy = self._convert(t)
            return copy
        alias = torch.ops.aten.alias.default(first)
        self.aliases.append((alias, first))
        return alias


def refuse_written_overlaps(
    users: Sequence[Any], shared: Any, names: Sequence[str], written: set[int]
) -> None:
    """Raise if a written input overlaps another input without being the same view of it.
    `users`: the user's values in the trace's input order; `shared`: `sharing(users)`;
    `names`: the inputs' names; `written`: the positions the program wrote into."""
    for group in shared:
        for i, view in group:
            if i not in written:
                continue
            for j, other in group:
                if j != i and other != view and _overlap(users[i], users[j]):
                    raise CaptureError(
                        f"the program writes in place into input {names[i]!r}, which shares "
                        f"memory with input {names[j]!r} (another view of it: "
                        f"{tuple(users[j].shape)} at offset {users[j].storage_offset()} against "
                        f"{tuple(users[i].shape)} at offset {users[i].storage_offset()}). A trace "
                        "reads each input as it was when the call began, so what the other reads "
                        "after the write cannot be recorded. Pass a copy of one of them "
                        f"(`{names[j]}.clone()`), or the base tensor alone and take the view "
                        "inside the program.",
                        op="aliased inputs",
                    )


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether the bytes the two views span intersect (interleaved views that touch no common
    element count as overlapping: a conservative answer)."""

    def span(t: torch.Tensor) -> tuple[int, int]:
        start = int(t.storage_offset()) * t.element_size()
        extent = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True))
        return start, start + extent * t.element_size()

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 < b1 and b0 < a1
