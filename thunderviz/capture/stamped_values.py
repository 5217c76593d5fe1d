"""A stamped block's eager run in a real trace, and the values it computes.

A real trace (what `jit` records) needs a stamped block's outputs, so the block runs eagerly,
outside the recorder's modes and its module-path hooks (`replayed`): its Python runs as in
eager, with whatever else it does, and its outputs are checked against the recording's.

Those are all a trace needs. The call's first run (`executor/first_run.py`) needs the values
inside the block too, or the compiled forward runs the whole model a second time. Where it
wants them, the eager run is watched by a light dispatch mode that keeps what each ATen op
returned (`_Collecting`). When the ops are the ones the recording saw, in its order, each
output is the value of the corresponding proxy of the block as written out. When they are
not (the block took another path this time), the block has its outputs but no values: the
first run is then made by the compiled trace.

An op the block ran in place (dropout's `bernoulli_`, `relu_`) the recording has as its
functional twin (capture/mutation.py): the tensor written now holds the twin's output, and
the write is passed on as one (`RecorderState.holds_after_write`), so that whatever shares
its storage and was bound before (a view taken earlier) keeps no value. A write into a view,
or one the recording spells otherwise (a random draw in memory order, a scatter into a base),
is not the recording's ops: no values.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.capture.dispatch_mode import DynamoSafeDispatchMode, unrecorded
from thunderviz.capture.functional_ops import functional_variant
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.rng import RngState
from thunderviz.core.symbol import BoundSymbol

__all__ = ["AtenOps", "Made", "matches_recorded", "replayed", "replaying"]

# A stamped block's eager run: the module-path hooks stand aside meanwhile
_replay = threading.local()


def replaying() -> bool:
    """Whether this thread is running a stamped block eagerly (nothing is recorded)."""
    return getattr(_replay, "active", False)


class AtenOps:
    """The ATen ops a block's recording dispatched, in the order they ran, with the proxies
    each returned."""

    def __init__(self, ops: list[BoundSymbol]) -> None:
        self._ops = [(b.sym.fn, b.output) for b in ops]

    @staticmethod
    def of(bsyms: Sequence[BoundSymbol]) -> AtenOps | None:
        """The ops of a recording's top-level bound symbols; None where one writes in place,
        or a call recorded no ATen op it dispatched."""
        ops: list[BoundSymbol] = []
        for top in bsyms:
            calls = [top] if isinstance(top.sym.fn, torch._ops.OpOverload) else top.subsymbols
            if not calls:
                return None
            for b in calls:
                fn = b.sym.fn
                if not isinstance(fn, torch._ops.OpOverload) or fn._schema.is_mutable:
                    return None
                ops.append(b)
        return AtenOps(ops)

    def values(self, ran: list[tuple[Any, Any]]) -> list[Made] | None:
        """What `ran` (each ATen op dispatched and what it returned) computed, in the order
        it did, by the recording's names; None where those are not these ops, or return
        other metadata."""
        if len(ran) != len(self._ops):
            return None
        made: list[Made] = []
        for (fn, output), (func, out) in zip(self._ops, ran):
            if func is fn:
                if not _bind(output, out, made):
                    return None
            elif _twin_of(func) is fn and _written_whole(output, out):
                made.append(Made(output.name, out, written=True))
            else:
                return None
        return made


@dataclass(frozen=True)
class Made:
    """A value the block's eager run made: `written`, by an in-place write into `tensor`."""

    name: str
    tensor: torch.Tensor
    written: bool = False


def replayed(
    out_spec: Any,
    out_leaves: Sequence[Any],
    inputs: Sequence[torch.Tensor],
    run: Callable[[], Any],
    ops: AtenOps | None = None,
) -> tuple[list[Any], list[Made]] | None:
    """The output leaves of the block run eagerly (`run()`), outside the recorder's modes
    and its module-path hooks, and, where `ops` (the recording's) are given and were what
    ran, the values inside by the recording's names (else none). None, with the generators
    put back, when the outputs are not what the recording returned (`matches_recorded`).
    `inputs`: the block's tensor inputs."""
    rng = RngState()
    collecting = _Collecting(ops) if ops is not None else None
    _replay.active = True
    try:
        with unrecorded():
            if collecting is None:
                result = run()
            else:
                with collecting:
                    result = run()
            leaves, spec = pytree.tree_flatten(result)
            # (metadata read here, where the recorder does not see it)
            same = spec == out_spec and all(
                matches_recorded(value, leaf, inputs)
                for value, leaf in zip(leaves, out_leaves, strict=True)
            )
    finally:
        _replay.active = False
    if not same:
        rng.restore()
        return None
    return leaves, (collecting.values() if collecting is not None else None) or []


def matches_recorded(value: Any, leaf: Any, inputs: Sequence[torch.Tensor]) -> bool:
    """Whether a block's output leaf is what its recording returned there: the same input
    (`("in", i)`), a new plain tensor of the recorded metadata (`("new", proxy, meta)`), or
    an equal primitive."""
    if isinstance(leaf, tuple) and leaf and leaf[0] == "in":
        return value is inputs[leaf[1]]
    if isinstance(leaf, tuple) and leaf and leaf[0] == "new":
        return (
            type(value) is torch.Tensor
            and value._base is None
            and value.storage_offset() == 0
            and (tuple(value.shape), value.stride(), value.dtype, value.device) == leaf[2]
        )
    return type(value) is type(leaf) and value == leaf


class _Collecting(DynamoSafeDispatchMode):
    """Runs each ATen op as it comes and keeps it with what it returned, to be named by the
    recording's `ops` once the run is over."""

    def __init__(self, ops: AtenOps) -> None:
        super().__init__()
        self.ops = ops
        self.ran: list[tuple[Any, Any]] = []

    def on_dispatch(self, func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
        out = func(*args, **kwargs)
        self.ran.append((func, out))
        return out

    def values(self) -> list[Made] | None:
        return self.ops.values(self.ran)


def _bind(output: Any, out: Any, made: list[Made]) -> bool:
    """Add `out`'s tensors to `made` by the names of `output`'s proxies; whether they match."""
    if isinstance(output, TensorProxy):
        if not (type(out) is torch.Tensor and output.describes(out)):
            return False
        made.append(Made(output.name, out))
        return True
    if isinstance(output, (tuple, list)):
        return (
            isinstance(out, (tuple, list))
            and len(out) == len(output)
            and all(_bind(o, v, made) for o, v in zip(output, out))
        )
    return not isinstance(output, Proxy)  # a constant output (None, a number): nothing to bind


def _twin_of(func: Any) -> Any:
    """The functional op the recorder records an in-place op as, where that is one op whose
    output is the written tensor's new value; else None."""
    if not func._schema.is_mutable:
        return None
    variant = functional_variant(func)
    return variant[0] if variant is not None and not variant[1] else None


def _written_whole(output: Any, out: Any) -> bool:
    """Whether an in-place op returned the tensor it wrote, a whole one (not a view: a write
    into a view is recorded with the scatter into its base), as the recording's proxy says."""
    return (
        isinstance(output, TensorProxy)
        and type(out) is torch.Tensor
        and out._base is None
        and output.describes(out)
    )
