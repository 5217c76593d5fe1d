"""The autograd bridge of `jit`: one cache entry's compiled traces, run as the forward and
backward of a `torch.autograd.Function`.

Everything here runs on every call, so it is written for a small program's per-call cost:
the Function is entered through autograd's C++ `apply` (what `Function.apply` calls after its
generic checks, done here only where they can matter), and the forward and backward do no
more Python than they must: what can be worked out once per entry is (`CompiledEntry`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch._C._functorch import unwrap_if_dead
from torch.utils import _pytree as pytree

from thunderviz.autodiff.output_hooks import output_hook_positions
from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.capture.input_aliasing import sharing
from thunderviz.capture.recorded_values import RecordedValues
from thunderviz.core.proxies import TensorProxy
from thunderviz.core.rng import RngState, generators_of
from thunderviz.core.run_errors import attribute_error
from thunderviz.core.trace import Trace, without_no_grad
from thunderviz.executor.absent_cotangents import (
    fill_absent,
    gather_repeated,
    inputs_each_output_reads,
    repeated_outputs,
)
from thunderviz.executor.double_backward import differentiable_backward, inputs_written
from thunderviz.executor.first_run import first_run
from thunderviz.executor.guards import Guard, GuardFailure, same_value
from thunderviz.executor.interpreted import interpreted
from thunderviz.executor.output_hooks import OUTPUT_HOOK_NAMES, OutputTaps, running_stack
from thunderviz.prims.randomness import draws_random

__all__ = [
    "CompiledEntry",
    "apply",
    "apply_unwrapped",
    "not_compiled",
    "running",
]


def not_compiled(*args: Any, **kwargs: Any) -> Any:
    """Stands for a trace an entry did not compile: the forward alone where something needs a
    gradient, the augmented forward and backward where nothing does (`result` tells which)."""
    raise AssertionError("thunderviz.jit ran a trace that this cache entry did not compile")


@dataclass
class CompiledEntry:
    """One cache entry: the traces for one input signature and their compiled callables."""

    forward: Trace
    result: AutodiffResult | None  # None when nothing requires grad
    run_forward: Callable[..., Any]  # what runs when nothing requires grad
    # these two when something requires grad: they compile the augmented forward and the
    # backward where each is first needed (`augmented`, `backward_in_no_grad`)
    compile_augmented: Callable[[], Callable[..., Any]] | None = None
    compile_backward: Callable[[], Callable[..., Any]] | None = None
    differentiable_outputs: list[int] = field(default_factory=list)  # flat output positions
    guards: list[Guard] = field(default_factory=list)
    executed: list[Trace] = field(default_factory=list)  # what runs, as compiled (with guards)
    attributes: tuple[tuple[Any, ...], ...] = ()  # plain attributes/globals when traced
    inputs_read: list[frozenset[int]] | None = None  # per differentiable output, made on demand
    # (module, attribute) the forward sets to tensors: the trace's output is (output, values)
    attribute_targets: tuple[tuple[torch.nn.Module, str], ...] = ()
    # (module, attribute, value): the plain values the forward assigns, after every run
    attribute_values: tuple[tuple[torch.nn.Module, str, Any], ...] = ()
    recompute: Callable[..., Any] | None = None  # for create_graph=True, made on first use
    backward_twice: Callable[..., Any] | None = None  # its backward, made on first use
    # whether the first run took its values from the trace (executor/first_run.py)
    first_run_from_trace: bool = False

    def __post_init__(self) -> None:
        # positions of the inputs the program calls `requires_grad_()` on, which did not
        # require grad when traced (capture/grad_flags.made_a_leaf); read on every call
        self.makes_leaves: tuple[int, ...] = self.forward.meta.get("inputs_made_leaves", ())
        # the compiled augmented forward and backward, once `augmented` and
        # `backward_in_no_grad` have made them
        self.run_augmented: Callable[..., Any] = not_compiled
        self.run_backward_in_no_grad: Callable[..., Any] = not_compiled
        self._backward_ran = False
        # worked out once, not on every call
        self.kwarg_names = tuple(self.forward.kwargs)
        self.output_spec = self.forward.output_spec or pytree.tree_structure(self.forward.output)
        self.single_output = isinstance(self.forward.output, TensorProxy)
        # objects the program returned that the trace cannot (executor/dropped_outputs.py)
        self.dropped_outputs = tuple(self.forward.meta.get("dropped_outputs", ()))
        self.draws_random = any(draws_random(b) for b in self.forward.bound_symbols)
        # the program's own generators (capture/generators.py), restored with torch's
        self.generators = generators_of(self.forward.constants)
        # the inputs the forward that runs writes into, by a write-back or an in-place kernel
        self.inputs_written = inputs_written(
            self.result.augmented_forward if self.result is not None else self.forward
        )
        # which inputs shared memory when traced: it matters, and is checked on every call,
        # where the program writes into an input (capture/input_aliasing.py)
        self.input_sharing = self.forward.meta.get("input_sharing", ())
        self.checks_sharing = bool(self.inputs_written)
        # positions of the saved values that are tensors; None: all of them (the common case)
        saved = self.result.augmented_forward.output[1] if self.result is not None else ()
        positions = tuple(i for i, p in enumerate(saved) if isinstance(p, TensorProxy))
        self.saved_tensor_positions = None if len(positions) == len(saved) else positions
        flat_forward_out = pytree.tree_leaves(self.forward.output)
        n_outputs = len(flat_forward_out)
        # differentiable outputs the program returns more than once (absent_cotangents.py)
        self.repeated_outputs = repeated_outputs(self.forward, self.differentiable_outputs)
        # the common case (a loss): the cotangents are autograd's grad_outputs as they come
        self.all_outputs_differentiable = self.differentiable_outputs == list(range(n_outputs))
        # outputs the program also reads, whose backward has a hook point for the hooks the
        # user registers on them after the call (executor/output_hooks.py)
        self.hook_positions = (
            output_hook_positions(self.result.backward) if self.result is not None else ()
        )
        # outputs the program called `retain_grad()` on, which the user's get called on too
        retained = self.forward.meta.get("retains_grad", ()) if self.result is not None else ()
        self.retains_grad = tuple(
            k
            for k, p in enumerate(flat_forward_out)
            if isinstance(p, TensorProxy) and p.name in retained
        )
        # outputs no gradient flows back from are marked so, but those eager gives
        # `requires_grad` all the same (a `sign`, a ReLU mask's use, what depends on the
        # inputs only through a step): their gradients are zeros there, as here
        self.non_differentiable_outputs = [
            i
            for i, p in enumerate(flat_forward_out)
            if isinstance(p, TensorProxy)
            and i not in self.differentiable_outputs
            and not p.requires_grad
        ]

    def augmented(self) -> Callable[..., Any]:
        """`run_augmented`, compiled on first use: the call that traced this entry usually
        takes its first run from the recording (executor/first_run.py), so printing and
        compiling the augmented forward (7 ms of a 12-layer GPT's first call) waits for the
        first call that runs it."""
        if self.compile_augmented is not None:
            self.run_augmented = self.compile_augmented()
            self.compile_augmented = None
        return self.run_augmented

    def backward_in_no_grad(self) -> Callable[..., Any]:
        """The backward trace, without its `@torch.no_grad()` (the engine runs a backward
        without grad already). Its first run interprets it where it can
        (executor/interpreted.py): compiling it is ~7% of a model's first call, and waits for
        the second backward."""
        if self.compile_backward is None:
            return self.run_backward_in_no_grad
        if not self._backward_ran:
            self._backward_ran = True
            # executed: [augmented forward, backward]
            run = interpreted(self.executed[-1], OUTPUT_HOOK_NAMES)
            if run is not None:
                return run
        self.run_backward_in_no_grad = without_no_grad(self.compile_backward())
        self.compile_backward = None
        return self.run_backward_in_no_grad

    def shares_as_traced(self, flat: list[Any]) -> bool:
        """Whether the call's inputs share memory as the traced ones did, where that matters."""
        return not self.checks_sharing or sharing(flat) == self.input_sharing

    def call(self, fn: Callable[..., Any], flat: Any) -> Any:
        """`fn` (one of this entry's compiled traces) on the call's flat inputs: the
        positional ones, then the keyword ones by name."""
        names = self.kwarg_names
        if not names:  # the common case: no dict to build
            return fn(*flat)
        n_pos = len(flat) - len(names)
        return fn(*flat[:n_pos], **dict(zip(names, flat[n_pos:], strict=True)))

    def from_trace(self, recorded: RecordedValues | None, flat: Any) -> tuple[Any] | None:
        """A one-tuple of the first run's output, taken from what tracing this call computed
        (`recorded`; executor/first_run.py); None: the compiled trace runs."""
        if recorded is None:
            return None
        ran = first_run(self.executed[0], recorded, flat, self.inputs_written)
        self.first_run_from_trace = ran is not None
        return ran

    def agrees_with(self, seen: dict[Any, Any]) -> bool:
        """None of this entry's guards contradicts a value this call has already shown."""
        return all(g.key not in seen or same_value(seen[g.key], g.expected) for g in self.guards)


class _TraceFunction(torch.autograd.Function):
    """Bridges one call: forward = augmented forward trace, backward = backward trace."""

    @staticmethod
    def forward(ctx: Any, entry: CompiledEntry, recorded: RecordedValues | None, *flat: Any) -> Any:
        # for a backward with create_graph=True, which recomputes the call (double_backward.py)
        ctx.inputs = flat
        if entry.draws_random:
            ctx.rng = RngState(entry.generators)
        if entry.inputs_written:
            ctx.inputs_before = [flat[i].clone() for i in entry.inputs_written]
        # the call just traced: its trace computed the values (executor/first_run.py)
        ran = entry.from_trace(recorded, flat)
        out, saved = running(entry, entry.call, entry.augmented(), flat) if ran is None else ran[0]
        ctx.entry = entry
        ctx.set_materialize_grads(False)  # an output the loss does not use: None (see backward)
        # Every saved tensor goes through save_for_backward, intermediates included, as
        # eager's own nodes save theirs: autograd checks none was modified in place before
        # the backward, frees them after it (keeps them with retain_graph=True), and runs the
        # user's saved-tensor hooks on each (save_on_cpu, non-reentrant checkpointing).
        positions = entry.saved_tensor_positions
        if positions is None:
            ctx.save_for_backward(*saved)
        else:  # a saved Python number (a size the program read) is held as it is
            ctx.save_for_backward(*(saved[i] for i in positions))
            numbers = list(saved)
            for i in positions:
                numbers[i] = None
            ctx.saved_numbers = numbers
        flat_out = (out,) if entry.single_output else tuple(pytree.tree_leaves(out))
        if entry.non_differentiable_outputs:
            ctx.mark_non_differentiable(
                *(
                    flat_out[i]
                    for i in entry.non_differentiable_outputs
                    if isinstance(flat_out[i], torch.Tensor)
                )
            )
        if entry.hook_positions:
            ctx.taps = OutputTaps(flat_out, entry.hook_positions)
        return flat_out

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        entry: CompiledEntry = ctx.entry
        saved = ctx.saved_tensors  # raises, as eager, once autograd freed them
        positions = entry.saved_tensor_positions
        if positions is not None:
            values = list(ctx.saved_numbers)  # a copy: retain_graph may run this again
            for i, t in zip(positions, saved, strict=True):
                values[i] = t
            saved = tuple(values)
        if entry.repeated_outputs:
            grad_outputs = gather_repeated(grad_outputs, entry.repeated_outputs)
        cotangents = (
            grad_outputs
            if entry.all_outputs_differentiable
            else tuple(grad_outputs[i] for i in entry.differentiable_outputs)
        )
        unreached: set[int] = set()
        if any(ct is None for ct in cotangents):
            if entry.inputs_read is None:
                entry.inputs_read = inputs_each_output_reads(
                    entry.forward, entry.differentiable_outputs
                )
            cotangents, unreached = fill_absent(
                entry.forward, entry.differentiable_outputs, cotangents, entry.inputs_read
            )
        if entry.hook_positions:
            ctx.taps.begin(grad_outputs)
            running_stack().append(ctx.taps)
        try:
            # the engine runs backward without grad unless create_graph=True
            if torch.is_grad_enabled():
                grads = running(entry, differentiable_backward, ctx, entry, cotangents)
            else:
                grads = running(entry, entry.backward_in_no_grad(), saved, cotangents)
        finally:
            if entry.hook_positions:
                running_stack().pop()
        if unreached:  # inputs only unused outputs read: None, as eager gives them
            grads = [None if i in unreached else g for i, g in enumerate(grads)]
        return (None, None, *grads)


def running(entry: CompiledEntry, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run one compiled trace; an error says which bound symbol raised it."""
    try:
        return fn(*args, **kwargs)
    except GuardFailure:
        raise
    except Exception as e:
        attribute_error(e, entry.executed)
        raise


# `Function.apply`'s C++ half: the Python half binds default arguments (only for a Function
# with `setup_context`, which this one has not), then unwraps dead functorch wrappers and calls
# this when no functorch transform is active.
_FUNCTION_APPLY = torch._C._FunctionBase.__dict__["apply"].__get__(None, _TraceFunction)


def apply(
    entry: CompiledEntry, flat_inputs: list[Any], recorded: RecordedValues | None = None
) -> tuple[Any, ...]:
    """`_TraceFunction.apply(entry, recorded, *flat_inputs)`, without the Python frame and
    generic checks of `Function.apply`, which weigh in a small program's call. `recorded`:
    what the trace of this very call computed, for its first run; None on any other call."""
    if torch._C._are_functorch_transforms_active():
        return _TraceFunction.apply(entry, recorded, *flat_inputs)  # torch's error
    return apply_unwrapped(
        entry,
        [unwrap_if_dead(a) if isinstance(a, torch.Tensor) else a for a in flat_inputs],
        recorded,
    )


def apply_unwrapped(
    entry: CompiledEntry, flat_inputs: list[Any], recorded: RecordedValues | None = None
) -> tuple[Any, ...]:
    """`apply` for inputs known to hold no functorch wrapper, while no transform is active."""
    outs = _FUNCTION_APPLY(entry, recorded, *flat_inputs)
    for k in entry.retains_grad:  # `retain_grad()` the program called (recorder.py)
        if outs[k].requires_grad:
            outs[k].retain_grad()
    return outs
