"""The values a real trace computed, kept for the one call that was traced.

Capture runs the program eagerly, on copies of its inputs: when `jit` traces a call, every
value of the forward has already been computed once, by the same kernels on the same data,
before the compiled trace first runs on that call. Running the compiled forward then would
compute them all again. `RecordedValues` keeps what the recording computed, so that the
first run can take a value from it instead (`executor/first_run.py` says when it may).

A value is kept only where the tensor that computed it still holds it: its proxy is the
tensor's latest (a later in-place write moves the tensor to a new proxy, and the old one's
value is gone), and nothing wrote into it since (`ValueTracker`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.rng import RngState

__all__ = ["RecordedValues", "ValueTracker"]


@dataclass
class RecordedValues:
    """What one real trace of one call computed. It holds the forward's every value, as
    the recording did: `release` lets go of them once the first run took what it needs,
    or found it cannot (before the compiled forward runs, so that the two never hold their
    activations at once)."""

    values: dict[str, torch.Tensor]  # proxy name -> the tensor that still holds its value
    # data pointers of the copies the program ran on instead of the user's inputs: a value
    # in them is not the user's tensor, nor a view of it
    input_storages: frozenset[int | None]
    # input proxy name -> the copy it ran on, where the recording saw no write into it: what
    # a kernel that writes its argument unannounced (BatchNorm's running statistics) left
    inputs_after: dict[str, torch.Tensor]
    copies: dict[int, torch.Tensor]  # id -> each copy the program ran on
    rng_after: RngState  # the generators as the program left them

    def aliases_an_input(self, t: torch.Tensor) -> bool:
        """Whether `t` shares storage with a copy the program ran on (is one, or a view);
        a tensor without a storage of its own might."""
        storage = _storage(t)
        return storage is None or storage in self.input_storages

    def is_input_copy(self, t: torch.Tensor) -> bool:
        return self.copies.get(id(t)) is t

    def release(self) -> None:
        self.values.clear()
        self.inputs_after.clear()
        self.copies.clear()


class ValueTracker:
    """Whether each tensor the recording bound still holds its proxy's value, told by two
    clocks: the tensor's version counter (autograd's, for writes the recording did not see:
    a kernel that writes an argument its schema does not announce) and the writes the
    recording saw, by storage (an op whose outputs share their input's storage without
    sharing its version counter, `unsafe_split`, whose in-place updates then change the
    input unannounced). A tensor holds its value while neither moved since it was bound."""

    def __init__(self) -> None:
        self._bound: dict[int, tuple[int, int]] = {}  # id -> (version, write clock) at binding
        self._writes: dict[int | None, int] = {}  # storage (`_storage`) -> clock of last write
        self._clock = 0

    def bound(self, t: torch.Tensor, written: bool = False) -> None:
        """`t` was bound to a proxy; `written`: by an in-place write of the ATen op being
        recorded, which autograd counts in `t`'s version counter once the op returns."""
        if written:
            self._writes[_storage(t)] = self._clock
        self._hold(t, pending_writes=int(written))

    def written(self, t: torch.Tensor) -> None:
        """`t` was written in place by an op that has returned (its version counter already
        counts the write): what shares its storage and was bound before no longer holds
        its value, and `t` holds its new one."""
        self.next_write()
        self._writes[_storage(t)] = self._clock
        self._hold(t, pending_writes=0)

    def _hold(self, t: torch.Tensor, pending_writes: int) -> None:
        """`t` holds its proxy's value from now, once its version counter has counted
        `pending_writes` more writes."""
        try:
            self._bound[id(t)] = (t._version + pending_writes, self._clock)
        except RuntimeError:  # an inference tensor counts no versions: its value is not kept
            self._bound.pop(id(t), None)

    def forget(self, t: torch.Tensor) -> None:
        self._bound.pop(id(t), None)

    def next_write(self) -> None:
        """An in-place write begins: what was bound before it may no longer hold its value."""
        self._clock += 1

    def holds(self, t: torch.Tensor) -> bool:
        """Whether `t` still holds the value of the proxy it was last bound to. An empty
        tensor holds no values to lose (and all empty tensors share storage address 0,
        so a write into one would count as a write into every one)."""
        if not t.numel():
            return True
        bound = self._bound.get(id(t))
        return (
            bound is not None
            and bound[0] == t._version
            and (not self._writes or self._writes.get(_storage(t), -1) <= bound[1])
        )

    def recorded(
        self,
        proxies: dict[int, Proxy],
        tensors: list[torch.Tensor],
        inputs: list[tuple[torch.Tensor, Proxy]],
        generators: list[torch.Generator],
    ) -> RecordedValues:
        """`RecordedValues` of a recording: `proxies` maps a tensor's id to its latest proxy,
        `tensors` holds every tensor bound, `inputs` the copies the program ran on with their
        input proxies, `generators` those of the program's own that outlive it. Call it where
        the program has just ended, so that `rng_after` is the state it left."""
        values: dict[str, torch.Tensor] = {}
        for t in {id(t): t for t in tensors}.values():
            proxy = proxies.get(id(t))
            if (
                isinstance(proxy, TensorProxy)
                and self.holds(t)
                and proxy.describes(t)  # not a meta tensor a decomposition was recorded on
            ):
                values[proxy.name] = t
        storages = frozenset(_storage(t) for t, _ in inputs)
        after = {p.name: t for t, p in inputs if proxies.get(id(t)) is p}
        copies = {id(t): t for t, _ in inputs}
        return RecordedValues(values, storages, after, copies, RngState(generators))


def _storage(t: torch.Tensor) -> int | None:
    """Where `t`'s storage starts; None for a tensor without one of its own (sparse): all
    such tensors count as one storage, so a write into any of them is one into all."""
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
