"""The first run of a freshly traced call, from the values its trace computed.

`jit` traces a call by running the program eagerly (on copies of the inputs), so by the time
the compiled forward could first run on that call, nearly every value it computes has been
computed once already: by the same kernels, on the same data, drawing the same random
numbers. `first_run` takes the compiled trace's outputs from that recording
(`capture/recorded_values.py`) instead of computing them again, and does what else the run
would do: the writes into the inputs (BatchNorm's running statistics) and the generators
left where the program left them. For a training step's first call this saves most of a
forward.

A value the recording does not hold is computed by its statement, as the run would, from
values that are held or computed so: what a grad rule adds to the augmented forward (an
attention kernel that also returns the softmax's log-sum-exp), and every view of an input,
taken again of the user's tensor, as the run takes it (the recording's is of a copy). Only
ATen ops that write nothing are run so (one torch says may draw random numbers only where
the generators show it drew none), and calls that only take views.

It is done only where that is the run, value for value and effect for effect:

- every statement with an effect beyond its values is a write-back (done here) or a guard
  (whose values the trace has just seen on these very inputs); every input written in
  place without a write-back was written only by such kernels in the recording too;
- nothing communicates: a collective runs on every rank or none, and ranks must agree;
- autocast is off: a mode runs below autocast, so the ops a composite (`bilinear`'s
  `_trilinear`) calls inside ran uncast in the recording, where eager casts them (the
  first call under bf16 autocast came out in float32 arithmetic).

Anything else (a value only a random draw makes, a custom Function's ctx, ...) and the
compiled trace runs as on every later call.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.capture.generators import GeneratorProxy
from thunderviz.capture.recorded_values import RecordedValues
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.rng import RngState
from thunderviz.core.symbol import BoundSymbol, BsymTag, statements
from thunderviz.core.trace import Trace
from thunderviz.executor.guards import is_guard
from thunderviz.prims.aliasing import is_view_op
from thunderviz.prims.collectives import is_collective
from thunderviz.prims.randomness import draws_random
from thunderviz.transforms.dce import has_side_effects

__all__ = ["first_run"]

_COPY_BACK = "torch.Tensor.copy_"


class _Missing(Exception):
    """A value the run needs that neither the recording holds nor a statement can make."""


def first_run(
    trace: Trace, recorded: RecordedValues, flat: Sequence[Any], written: Sequence[int]
) -> tuple[Any] | None:
    """A one-tuple of `trace`'s output on `flat` (the inputs of the call the trace was made
    from, as the compiled trace takes them: positional, then keyword), taken from
    `recorded`, with the trace's writes into its inputs done and the generators as the
    program left them; `None`, having done nothing, where that would not be what running
    `trace` does (the module's text). Either way `recorded` is released: what the run
    returns holds the values it uses.
    `written`: the positions of the inputs `trace` writes into, by any statement
    (`double_backward.inputs_written`)."""
    try:
        if torch._C._is_any_autocast_enabled():
            return None  # (the module's text: not the values eager computes)
        return _from_recording(trace, recorded, flat, written)
    except _Missing:
        return None
    finally:
        recorded.release()


def _from_recording(
    trace: Trace, recorded: RecordedValues, flat: Sequence[Any], written: Sequence[int]
) -> tuple[Any]:
    params = trace.flat_args
    if len(params) != len(flat):
        raise _Missing
    values = _Values(trace, recorded, {p.name: v for p, v in zip(params, flat)})
    written_back: list[tuple[torch.Tensor, torch.Tensor]] = []
    targets: set[str] = set()  # the inputs written back
    for b in values.statements:
        if is_collective(b):
            raise _Missing
        if not has_side_effects(b) or is_guard(b):
            continue
        if BsymTag.MUTATION_EPILOGUE not in b.tags or b.sym.id != _COPY_BACK:
            raise _Missing
        target, source = b.args
        if target.name not in values.inputs:
            raise _Missing
        # the source is only read: the copy the program ran on, holding its last value, will do
        written_back.append((values.inputs[target.name], values.read(source)))
        targets.add(target.name)
    # Inputs a kernel writes into in place, unannounced (BatchNorm's running statistics in
    # training): the run's kernel leaves in the user's tensor what the recording's left in
    # its copy, where that kernel's were the only writes into it.
    in_place: list[tuple[torch.Tensor, torch.Tensor]] = []
    for i in written:
        name = params[i].name
        if name not in targets:
            after = recorded.inputs_after.get(name)
            if after is None:
                raise _Missing
            in_place.append((flat[i], after))

    output = pytree.tree_map(values.value, trace.output)
    for target, source in [*in_place, *written_back]:  # the write-backs end the run
        target.copy_(source)
    recorded.rng_after.restore()
    return (output,)


class _Values:
    """The values of one trace's proxies on the traced call."""

    def __init__(self, trace: Trace, recorded: RecordedValues, inputs: dict[str, Any]) -> None:
        self.recorded = recorded
        self.inputs = inputs
        self.statements = statements(trace.bound_symbols)
        self._made: dict[str, Any] = {}  # values computed here, by name
        self._producers: dict[str, BoundSymbol] | None = None

    def value(self, leaf: Any) -> Any:
        """What `leaf` holds as the run would make it: an input is the user's tensor, a view
        of one is a view of it, anything else a tensor of its own."""
        if not isinstance(leaf, Proxy):
            return leaf  # a constant, as the code has it
        name = leaf.name
        if name in self.inputs:
            return self.inputs[name]
        if name in self._made:
            return self._made[name]
        held = self.recorded.values.get(name) if isinstance(leaf, TensorProxy) else None
        if held is not None and not self.recorded.aliases_an_input(held):
            return held
        if held is not None and self.recorded.is_input_copy(held):
            # the copy itself, holding a later value: the run's is a tensor of its own too,
            # and so is the copy, which nothing else reads or writes from here
            return held
        return self._make(leaf)

    def read(self, leaf: Any) -> Any:
        """`value`, for a value only read here: a copy's storage will do."""
        if isinstance(leaf, TensorProxy) and leaf.name not in self.inputs:
            held = self.recorded.values.get(leaf.name)
            if held is not None:
                return held
        return self.value(leaf)

    def _make(self, leaf: Proxy) -> Any:
        """Run the statement that makes `leaf`, on values found or made the same way."""
        bsym = self._producer(leaf.name)
        if bsym is None or bsym.sym.fn is None or not _replayable(bsym):
            raise _Missing
        args, kwargs = pytree.tree_map(self.value, (bsym.args, bsym.kwargs))
        out = (
            _without_draws(bsym.sym.fn, args, kwargs)
            if draws_random(bsym)
            else bsym.sym.fn(*args, **kwargs)
        )
        names, got = pytree.tree_leaves(bsym.output), pytree.tree_leaves(out)
        if len(names) != len(got):
            raise _Missing
        for proxy, value in zip(names, got):
            if isinstance(proxy, TensorProxy) and not (
                isinstance(value, torch.Tensor) and proxy.describes(value)
            ):
                raise _Missing
            if isinstance(proxy, Proxy):
                self._made[proxy.name] = value
        return self._made[leaf.name]

    def _producer(self, name: str) -> BoundSymbol | None:
        if self._producers is None:
            self._producers = {
                p.name: b
                for b in self.statements
                for p in pytree.tree_leaves(b.output)
                if isinstance(p, Proxy)
            }
        return self._producers.get(name)


def _replayable(bsym: BoundSymbol) -> bool:
    """An ATen op that writes nothing, or a call that only takes views: run again, it makes
    what the run makes (one that may draw random numbers, if it draws none: `_without_draws`)."""
    if bsym.executes_subsymbols or has_side_effects(bsym):
        return False
    fn = bsym.sym.fn
    if isinstance(fn, torch._ops.OpOverload):
        return not fn._schema.is_mutable and not any(
            isinstance(a, torch.Generator | GeneratorProxy)
            for a in pytree.tree_leaves((bsym.args, bsym.kwargs))
        )
    inner = list(islice(bsym.walk_outline(), 1, None))
    return bool(inner) and all(
        isinstance(b.sym.fn, torch._ops.OpOverload) and is_view_op(b.sym.fn) for b in inner
    )


def _without_draws(fn: Any, args: Any, kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` for an op torch says may draw random numbers (an attention
    kernel that can drop out), where this call draws none: the generators are where they
    were after it, so its result does not depend on them. One that drew is undone."""
    before = RngState()
    out = fn(*args, **kwargs)
    if not before.same_as(RngState()):
        before.restore()
        raise _Missing
    return out
