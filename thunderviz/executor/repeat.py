"""The check that a call repeats the last one, so it can run that call's cache entry at once.

A training loop calls `jit` with tensors of the same metadata, the same module state and the
same global state, step after step. For a small program, building and hashing the cache key,
flattening the arguments twice and going through the general lookup were the larger part of
jit's per-call cost (issue 14: 31 against 25 microseconds for eager's forward). A
`RepeatedCall` is made for a key seen twice running whose entry has nothing to check while it
runs; it holds what it needs to tell, without building anything, that a new call would build
the same key and pick the same entry:

- the tensors' type, dispatch keys, dtype, device, requires_grad, sizes and strides, checked
  in C++ by dynamo's `TensorGuards` (stricter than the key's tensor part: contiguity is a
  function of sizes and strides);
- the module tree, each submodule's `training` flag, and that no submodule or global hook
  exists (a call with such hooks keys every call, as the key holds the hook objects);
- grad mode, the default dtype and autocast, and that no functorch transform is active;
- the entry's snapshot of plain attributes and of the globals its code reads;
- where the entry's program writes into an input, that the inputs share memory as when
  traced (capture/input_aliasing.py).

Anything else is keyed as before: keyword arguments, non-tensor arguments, DDP (whose sync
state is in the key), a torch build without `TensorGuards`.
"""

from __future__ import annotations

from typing import Any

import torch

from thunderviz.executor.bridge import CompiledEntry, apply_unwrapped
from thunderviz.executor.keys import ambient_key, changed_attribute
from thunderviz.executor.walk import ModuleWalk

__all__ = ["RepeatedCall"]

# A private torch API: where a torch build lacks it (or its signature moved), every call is
# keyed. Read as attributes: the C extension registers the submodule when torch is imported.
TensorGuards = getattr(
    getattr(getattr(torch._C, "_dynamo", None), "guards", None), "TensorGuards", None
)


class RepeatedCall:
    """The last call's key and entry, and the check that a new call repeats it."""

    __slots__ = ("key", "entry", "_n_args", "_n_state", "_tensors", "_walk", "_flags", "_ambient")

    def __init__(
        self,
        key: Any,
        entry: CompiledEntry,
        args: tuple[Any, ...],
        state: list[torch.Tensor],
        walk: ModuleWalk,
        tensors: Any,
    ) -> None:
        self.key, self.entry = key, entry
        self._n_args, self._n_state = len(args), len(state)
        self._tensors = tensors
        self._walk = walk
        self._flags = [m.training for m in walk.submodules]
        self._ambient = ambient_key()

    @staticmethod
    def of(
        key: Any, entry: CompiledEntry, args: tuple[Any, ...], state: list[Any], walk: ModuleWalk
    ) -> RepeatedCall | None:
        """The check for calls like this one, or None where it cannot be made: an argument
        that is not a dense tensor (keyed by value, or sparse), hooks inside the module, an
        entry with guards or that runs without autograd, a torch build without the C++
        check."""
        if (
            TensorGuards is None
            or entry.result is None
            or entry.guards
            or entry.kwarg_names
            or any(walk.hooks)
            or not all(isinstance(t, torch.Tensor) for t in (*args, *state))
            or any(t.layout is not torch.strided for t in args)  # (a sparse one: no strides)
        ):
            return None
        tensors = [*args, *state]
        try:
            # one list a tensor, as dynamo passes them (torch's stub says one list in all)
            check = TensorGuards(
                *tensors,
                dynamic_dims_sizes=[list(t.shape) for t in tensors],  # pyright: ignore[reportArgumentType]
                dynamic_dims_strides=[list(t.stride()) for t in tensors],  # pyright: ignore[reportArgumentType]
            )
        except TypeError:  # another torch's signature: key every call, as without the check
            return None
        return RepeatedCall(key, entry, args, state, walk, check)

    def run_if_repeated(self, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        """The entry's flat outputs for `args` (a call without keyword arguments), or None
        when the call differs from the one this was made for in anything its key or its
        entry's snapshot holds."""
        walk = self._walk
        if (
            len(args) != self._n_args
            or any(walk.hooks)
            or ambient_key() != self._ambient
            or torch._C._are_functorch_transforms_active()
            or walk.changed()
            or [m.training for m in walk.submodules] != self._flags
        ):
            return None
        state = walk.state()
        if (
            len(state) != self._n_state
            or not self._tensors.check(*args, *state)
            or changed_attribute(self.entry.attributes) is not None
            or (self.entry.checks_sharing and not self.entry.shares_as_traced([*args, *state]))
        ):
            return None
        # The check saw these tensors' dispatch keys: no functorch wrapper, dead or alive.
        return apply_unwrapped(self.entry, [*args, *state])
