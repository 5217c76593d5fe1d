"""`thunderviz.jit`: run a function or module through our traces, trained by torch.autograd.

The forward runs the augmented forward trace; the backward runs the backward trace, inside a
`torch.autograd.Function`, so `loss.backward()`, `.grad` accumulation and optimizers work as
with eager PyTorch.

A trace is one run of the program, so a cache entry is only reused when nothing it specialised
on changed. Checked before a call (the key, `executor/keys.py`): tensor metadata, the values of
every other argument, each submodule's `training` flag and hooks, grad mode and autocast; then
the entry's snapshot of submodules' plain attributes and of the closure/global values the code
reads. Checked while the trace runs (guards, `executor/guards.py`): the values it read into
Python (`if x.sum() > 0`, `.item()`, `.tolist()`) and the sizes values chose (`nonzero`,
`x[mask]`). A failed guard restores the RNG state and retraces; entries for both outcomes stay
cached. The cache is an LRU of `cache_size` entries and warns once when the function keeps
retracing.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch
from torch.nn.parameter import is_lazy
from torch.utils import _pytree as pytree

from thunderviz.autodiff.api import differentiate
from thunderviz.autodiff.remat import rematerialize
from thunderviz.capture.api import trace_for_jit
from thunderviz.capture.recorded_values import RecordedValues
from thunderviz.core.dataclass_nodes import opened_leaves
from thunderviz.core.proxies import TensorProxy
from thunderviz.core.rng import RngState
from thunderviz.core.trace import without_no_grad
from thunderviz.core.working import working
from thunderviz.executor.attribute_writes import (
    assign_attributes,
    attribute_values,
    with_attribute_writes,
    without_rewritten,
)
from thunderviz.executor.bridge import (
    CompiledEntry,
    apply,
    not_compiled,
    running,
)
from thunderviz.executor.buffer_reuse import reusing_dead_inputs
from thunderviz.executor.closure import (
    FunctionModules,
    function_modules,
    referenced_modules,
    refuse_captured_grads,
)
from thunderviz.executor.code_reads import code_constants
from thunderviz.executor.ddp import DDPSync
from thunderviz.executor.dropped_outputs import with_dropped
from thunderviz.executor.guards import GUARD_NAMES, GuardFailure, guard_trace
from thunderviz.executor.hooks import HookRunner, check_submodule_hooks, module_key
from thunderviz.executor.keys import (
    ambient_change,
    ambient_key,
    arguments_key,
    changed_argument,
    changed_attribute,
    layout_key,
    module_attributes,
)
from thunderviz.executor.output_hooks import OUTPUT_HOOK_NAMES
from thunderviz.executor.repeat import RepeatedCall
from thunderviz.executor.retrace_reasons import (
    attribute_reason,
    miss_reason,
    unreplayable_warning,
)
from thunderviz.executor.runnable import without_identity_reshapes
from thunderviz.executor.walk import ModuleWalk
from thunderviz.executor.write_backs import saved_before_write_backs

__all__ = ["JittedFunction", "CompiledEntry"]

# A call whose guards keep failing after this many fresh traces reads values that change
# between tracing and running (a nondeterministic kernel): refused rather than looped.
_MAX_RETRACES_PER_CALL = 3


class JittedFunction:
    """What `thunderviz.jit` returns. Call it like the original."""

    def __init__(
        self, fn: Callable[..., Any], *, rematerialize: bool = False, cache_size: int = 8
    ) -> None:
        if not callable(fn):
            raise TypeError(
                f"thunderviz.jit expects a function or an nn.Module, got {type(fn).__name__}"
            )
        if not isinstance(cache_size, int) or cache_size < 1:
            raise ValueError(f"cache_size must be a positive int, got {cache_size!r}")
        self.ddp = DDPSync.of(fn)  # DistributedDataParallel: its module, DDP's sync in backward
        if self.ddp is not None:
            fn = self.ddp.module
        self.fn = fn
        self.module = fn if isinstance(fn, torch.nn.Module) else None
        self.rematerialize = rematerialize
        self.cache_size = cache_size
        # key -> entries for that key (one per combination of guard outcomes), most recent last
        self._cache: OrderedDict[Any, list[CompiledEntry]] = OrderedDict()
        # the last key looked up, and the check for calls that repeat it when it came twice
        # running (the most recently used key of the cache, so a call it holds for moves
        # nothing)
        self._previous_key: Any = None
        self._repeated: RepeatedCall | None = None
        self._generations = itertools.count(1)  # of module walks: part of the cache key
        # a plain function's roots and walks by the identities of their modules, most recent
        # last: a call given (or reading) other modules finds the walk, and so the key, of
        # the last call with those modules
        self._roots: OrderedDict[tuple[int, ...], tuple[Any, ModuleWalk]] = OrderedDict()
        # what is traced as a module: the jitted module, or a plain function's own (the modules
        # it reads from outside or is given, executor/closure.py), or None
        self._root: torch.nn.Module | None = self.module
        self._walk = ModuleWalk(self.module)
        if self.module is None:
            self._use_modules(referenced_modules(fn))
        self._hooks = HookRunner(self.module)
        self.last: CompiledEntry | None = None
        self.cache_misses = 0
        self.guard_failures = 0
        self.last_retrace_reason = ""
        self._warned = False
        self._warned_unreplayable = False
        functools.update_wrapper(
            self, fn if not self.module else type(self.module).forward, updated=()
        )

    # --- calling ---------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._hooks.active:
            return self._hooks.call(self._call, args, kwargs)
        return self._call(*args, **kwargs)

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        repeated = self._repeated
        if repeated is not None and not kwargs:
            outs = repeated.run_if_repeated(args)
            if outs is not None:  # the common case in a training loop
                entry = self.last = repeated.entry
                return self._unflatten(entry, list(outs))
        if self.ddp is not None:
            self.ddp.before_forward()
        if self.module is None:  # a plain function: the modules it reads, or is given
            self._use_modules(function_modules(self.fn, args, kwargs))
        if self._walk.changed():  # a submodule was added, replaced or removed
            self._walk = ModuleWalk(self._root, next(self._generations))
            if self.module is None:
                self._roots[next(reversed(self._roots))] = (self._root, self._walk)
        arg_leaves, state = _leaves(args), self._walk.state()
        if self._walk.lazy and self.ddp is None:
            if any(is_lazy(t) for t in state):
                return self._materializing_call(args, kwargs)
            self._walk.lazy = False
        flat_inputs = [*arg_leaves, *state, *_leaves(kwargs)] if kwargs else [*arg_leaves, *state]
        key, entries, repeats = self._lookup(args, kwargs, state)
        if entries is not None:
            last = entries[-1]
            if (
                not last.guards
                and changed_attribute(last.attributes) is None
                and last.shares_as_traced(flat_inputs)
                and not last.makes_leaves
            ):
                self.last = last  # nothing to check while running
                self._repeated = (
                    RepeatedCall.of(key, last, args, state, self._walk)
                    if repeats and self.ddp is None
                    else None
                )
                return self._run(last, flat_inputs)
        self._repeated = None
        seen: dict[Any, Any] = {}  # guard key -> the value this call showed
        reason = (
            miss_reason(next(reversed(self._cache), None), key)
            if entries is None
            else attribute_reason(entries[-1], flat_inputs, self._walk)
        )
        for _ in range(_MAX_RETRACES_PER_CALL + 1):
            entry = next(
                (
                    e
                    for e in reversed(entries or ())
                    if e.agrees_with(seen)
                    and changed_attribute(e.attributes) is None
                    and e.shares_as_traced(flat_inputs)
                ),
                None,
            )
            # A first call's collections wait until its first run is over (core/collection.py),
            # and torch._dynamo and sympy stay unimported through it (core/deferred_imports.py)
            paused = working() if entry is None else contextlib.nullcontext()
            rng: RngState | None = None
            recorded: RecordedValues | None = None  # what tracing this call computed
            try:
                with paused:
                    if entry is None:
                        entry, recorded = self._compile(args, kwargs, key[:2])
                        entries = self._store(key, entry, reason)
                    elif entries is not None and entries[-1] is not entry:  # found in entries
                        entries.remove(entry)
                        entries.append(entry)
                    if entry.makes_leaves:
                        return self._as_leaves(entry, flat_inputs, args, kwargs)
                    self.last = entry
                    rng = RngState(entry.generators) if entry.guards else None
                    return self._run(entry, flat_inputs, recorded)
            except GuardFailure as failure:
                assert entry is not None
                self.guard_failures += 1
                guard = entry.guards[failure.index]
                seen[guard.key] = failure.got
                reason = guard.describe(failure.got)
                if rng is not None:
                    rng.restore()
        raise RuntimeError(
            f"thunderviz.jit: {reason} changed between tracing and running "
            f"{_MAX_RETRACES_PER_CALL} times in one call; the program reads a value that is "
            "not the same on two runs with the same inputs (a nondeterministic op?). Compute "
            "it outside the jitted function and pass it in."
        )

    def _as_leaves(
        self,
        entry: CompiledEntry,
        flat_inputs: list[Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> Any:
        """The program makes some of its inputs leaves that require grad
        (`x.requires_grad_()`, as a physics-informed loss does before taking du/dx): eager's
        effect on the user's tensors, then the call again, which finds (or traces) the
        entry where they require grad from the start, so that their gradients flow, as in
        eager. This entry only redirects."""
        for i in entry.makes_leaves:
            flat_inputs[i].requires_grad_()
        return self._call(*args, **kwargs)

    def _materializing_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """The call that gives lazy modules (nn.LazyLinear) their parameters runs eagerly, as
        it would without jit: the parameters' shapes come from the inputs it sees and their
        initial values from the random generator at that point of the program, which a
        trace, made on parameters of known shapes, cannot do. Calls after it are traced."""
        if self.module is None:
            return self.fn(*args, **kwargs)
        return self.module.forward(*args, **kwargs)  # (its own hooks run around `_call`)

    def _run(
        self, entry: CompiledEntry, flat_inputs: list[Any], recorded: RecordedValues | None = None
    ) -> Any:
        """Run `entry` on the call's inputs; with `recorded` (the call was just traced), from
        what its trace computed where it can be (executor/first_run.py)."""
        if entry.result is None:
            ran = entry.from_trace(recorded, flat_inputs)
            out = (
                running(entry, entry.call, entry.run_forward, flat_inputs)
                if ran is None
                else ran[0]
            )
            # (a trace whose output pytree does not hold returns its flat outputs, None where
            # an output was dropped, which pytree would not count: executor/dropped_outputs.py)
            flat = list(out) if entry.forward.output_spec is not None else pytree.tree_leaves(out)
            return self._unflatten(entry, flat)
        outs = apply(entry, flat_inputs, recorded)
        return self._unflatten(entry, list(outs))

    def _use_modules(self, modules: dict[str, torch.nn.Module]) -> None:
        """Make the root and walk those of `modules` (a plain function's)."""
        ident = tuple(map(id, modules.values()))
        found = self._roots.get(ident)
        if found is None:
            root = FunctionModules(self.fn, modules) if modules else None
            found = (root, ModuleWalk(root, next(self._generations)))
            self._roots[ident] = found  # holds the modules: their ids are not reused
            if len(self._roots) > self.cache_size:
                self._roots.popitem(last=False)
        else:
            self._roots.move_to_end(ident)
        self._root, self._walk = found

    def _lookup(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], state: list[torch.Tensor]
    ) -> tuple[Any, list[CompiledEntry] | None, bool]:
        """The call's cache key, its entries (None: not cached), most recent first, and
        whether the last call had the same key."""
        ddp = self.ddp is not None and self.ddp.syncing
        rest = (self._walk.generation, module_key(self._walk.submodules), ambient_key(), ddp)
        key = self._key(args, kwargs, state, rest)
        entries = self._cache.get(key)
        if entries is not None:
            self._cache.move_to_end(key)
        # A key seen twice running is likely to come again: worth the check's set-up.
        repeats = entries is not None and self._previous_key == key
        self._previous_key = key
        return key, entries, repeats

    def _key(
        self,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        state: list[torch.Tensor],
        rest: tuple[Any, ...],
    ) -> Any:
        params = tuple(
            [(t.shape, t.dtype, t.device, t.requires_grad, layout_key(t)) for t in state]
        )
        return (*arguments_key(args, kwargs), params, *rest)

    def _store(self, key: Any, entry: CompiledEntry, reason: str) -> list[CompiledEntry]:
        self.cache_misses += 1
        self.last_retrace_reason = reason
        unreplayable = entry.forward.meta.get("unreplayable")
        if unreplayable:
            self._warn_unreplayable(unreplayable)
            return []  # a trace of this call alone: the next one traces again
        entries = self._cache.setdefault(key, [])
        entries.append(entry)
        self._cache.move_to_end(key)
        while sum(len(v) for v in self._cache.values()) > self.cache_size:
            oldest_key = next(iter(self._cache))
            oldest = self._cache[oldest_key]
            oldest.pop(0)
            if not oldest:
                del self._cache[oldest_key]
        if self.cache_misses > self.cache_size and not self._warned:
            self._warned = True
            warnings.warn(
                f"thunderviz.jit({self._name()}) has traced {self.cache_misses} times, more than "
                f"its cache holds (cache_size={self.cache_size}); the last retrace was for "
                f"{reason}. Each retrace costs a trace and an autodiff. A trace specialises on "
                "non-tensor arguments, Python branches on tensor values, .item()/.tolist() "
                "results and data-dependent sizes: pass values that change as tensors, or raise "
                "cache_size.",
                stacklevel=4,
            )
        return entries

    def _warn_unreplayable(self, why: str) -> None:
        self.last_retrace_reason = f"the program {why}"
        if self._warned_unreplayable:
            return
        self._warned_unreplayable = True
        warnings.warn(unreplayable_warning(self._name(), why), stacklevel=5)  # (the caller's)

    def _compile(
        self, args: tuple[Any, ...], kwargs: dict[str, Any], arguments: tuple[Any, Any]
    ) -> tuple[CompiledEntry, RecordedValues | None]:
        """The call's cache entry, and what its trace computed (None: not for its run).
        `arguments`: the arguments' part of the call's key, as the program got them."""
        check_submodule_hooks(self._root, self._name())
        # as they are before the program runs
        subs = self._walk.submodules
        attributes = module_attributes(subs) + code_constants(self.fn, subs, (args, kwargs))
        ambient = ambient_key()
        # under DDP every rank runs the forward it broadcast buffers for: nothing to keep
        traced, recorded = trace_for_jit(
            self._root or self.fn, args, kwargs, keep_values=self.ddp is None
        )
        changed = changed_argument(arguments, args, kwargs)
        if changed and not traced.meta.get("unreplayable"):
            # a Python object the call was given, changed by the program (a KV cache it
            # fills, a counter it bumps): what no run of a trace does, so each call runs it
            traced.meta["unreplayable"] = f"changes {changed}, which it is given"
        left = ambient_change(ambient, ambient_key())
        if left:
            # the program's call changes torch's global state (eager's next call starts from
            # that), which no run of a trace does: each call runs the program again (the
            # reason told, over any other: what the program most likely did not mean)
            traced.meta["unreplayable"] = f"leaves torch's global state changed ({left})"
        forward, attribute_targets = with_attribute_writes(traced, self._root)
        attributes = without_rewritten(attributes, subs, attribute_targets, traced.constants)
        if torch.is_grad_enabled():
            refuse_captured_grads(forward, self._name(), self.module)
        needs_grad = torch.is_grad_enabled() and any(
            isinstance(p, TensorProxy) and p.requires_grad for p in forward.flat_args
        )
        if not needs_grad:
            guarded, guards = guard_trace(forward, forward)
            entry = CompiledEntry(
                forward,
                None,
                guarded.python_callable(GUARD_NAMES, flat_output=True),
                guards=guards,
                executed=[guarded],
                attributes=attributes,
                attribute_targets=attribute_targets,
                attribute_values=attribute_values(traced, self._root),
            )
            return entry, recorded
        result = differentiate(forward, hook_outputs=True)
        if self.rematerialize:
            result = rematerialize(result)
        if self.ddp is not None:
            result = self.ddp.add_gradient_sync(result)
        augmented, guards = guard_trace(saved_before_write_backs(result.augmented_forward), forward)
        backward = without_identity_reshapes(result.backward)
        flat_out = pytree.tree_leaves(forward.output)
        wanted = {p.name for p in result.cotangent_outputs}
        positions: list[int] = []
        for i, p in enumerate(flat_out):
            if (
                isinstance(p, TensorProxy)
                and p.name in wanted
                and p.name not in {flat_out[j].name for j in positions}
            ):
                positions.append(i)
        entry = CompiledEntry(
            forward,
            result,
            not_compiled,  # the forward alone never runs here
            # autograd.Function.forward already runs without grad: skip the trace's no_grad
            compile_augmented=lambda: without_no_grad(
                reusing_dead_inputs(augmented).python_callable(GUARD_NAMES, free_dead=True)
            ),
            compile_backward=lambda: reusing_dead_inputs(backward).python_callable(
                OUTPUT_HOOK_NAMES, free_dead=True
            ),
            differentiable_outputs=positions,
            guards=guards,
            executed=[augmented, backward],
            attributes=attributes,
            attribute_targets=attribute_targets,
            attribute_values=attribute_values(traced, self._root),
        )
        return entry, recorded

    def _unflatten(self, entry: CompiledEntry, flat_out: list[Any]) -> Any:
        for module, name, value in entry.attribute_values:  # as the traced forward set them
            setattr(module, name, value)
        if entry.single_output:
            return flat_out[0]
        out = pytree.tree_unflatten(flat_out, entry.output_spec)
        if entry.dropped_outputs:  # (executor/dropped_outputs.py)
            out = with_dropped(out, entry.dropped_outputs, self._name())
        if entry.attribute_targets:
            return assign_attributes(entry.attribute_targets, out)
        return out

    # --- inspection ------------------------------------------------------------------
    def _name(self) -> str:
        return getattr(self.fn, "__name__", type(self.fn).__name__)

    def __repr__(self) -> str:
        return f"<thunderviz.jit of {self._name()}>"

    # --- copying -----------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """What a copy (`copy.deepcopy(model)` of a model holding a jitted submodule, an
        EMA copy, `torch.save`) takes: everything but the compiled traces, which belong to
        the tensors and modules they were made for (and hold C++ checks that cannot be
        copied). The copy traces again on its first call."""
        state = dict(self.__dict__)
        state.update(
            _cache=OrderedDict(),
            _repeated=None,
            _previous_key=None,
            last=None,
        )
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __getattr__(self, name: str) -> Any:
        # jm.parameters(), jm.train(), jm.eval() ... reach the wrapped module
        if name in ("fn", "module") or self.__dict__.get("module") is None:
            raise AttributeError(name)
        return getattr(self.__dict__["module"], name)


def _leaves(tree: Any) -> list[Any]:
    if type(tree) in (tuple, list) and all(isinstance(x, torch.Tensor) for x in tree):
        return list(tree)  # the common case, without pytree's overhead
    return opened_leaves(tree)  # (a dataclass's fields too: core/dataclass_nodes.py)
