"""Stepping through a backward trace: one bound symbol at a time, with breakpoints.

`BackwardStepper(result, forward_inputs)` runs the augmented forward on real inputs to get
the saved-for-backward tensors, then interprets the backward trace bound symbol by bound
symbol. After every step it records a `StepRecord` (statistics of what the step produced
and of the parameter gradients it finished), so any step can be looked at, stepped back
over, or exported.

Breakpoints (`debug/breakpoints.py`) are checked on the step that just ran; records are
`debug/steps.py`'s `StepRecord`. `current` is always the next bound symbol to run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.symbol import BoundSymbol
from thunderviz.debug.breakpoints import Breakpoints, OpIndex, OpTarget
from thunderviz.debug.forward_run import cotangent_values, env_reader, run_forward
from thunderviz.debug.interpret import MISSING, StepError, is_unpack, run_bsym, where_of
from thunderviz.debug.reference import GradComparison, autograd_grads, compare_grad
from thunderviz.debug.stats import TensorStats
from thunderviz.debug.steps import StepRecord, StepRecorder, module_of, module_within

# StepRecord, StepError and module_within are re-exported for the importers that take them
# from here (widgets/stepping.py).
__all__ = ["BackwardStepper", "StepRecord", "StepError", "module_within"]


class BackwardStepper:
    """Run `result.backward` one bound symbol at a time.

    `forward_inputs`: the values of the forward trace's arguments in trace-argument order
    (the user's positional inputs, then parameters, then buffers, then keyword inputs'
    values). `cotangents`: one per forward output that takes a cotangent
    (`result.cotangent_outputs`), as a sequence in that order, a dict by forward output
    name, or a single tensor; by default ones for scalar outputs.
    `record_forward=True` interprets the augmented forward too and keeps statistics of
    every forward tensor in `forward_stats`.
    """

    def __init__(
        self,
        result: AutodiffResult,
        forward_inputs: Sequence[Any],
        cotangents: Any = None,
        *,
        record_forward: bool = False,
    ) -> None:
        self.result = result
        self.trace = result.backward
        self.bsyms: list[BoundSymbol] = list(result.backward.bound_symbols)
        fwd_args = result.forward.flat_args
        forward_inputs = list(forward_inputs)
        if len(forward_inputs) != len(fwd_args):
            raise ValueError(
                f"BackwardStepper needs one value per forward argument ({len(fwd_args)}: "
                f"{', '.join(p.name for p in fwd_args)}), got {len(forward_inputs)}. Pass the "
                "user's inputs, then the module's parameters and buffers, then keyword values."
            )
        self.forward_inputs = forward_inputs
        forward = run_forward(result, forward_inputs, record_forward)
        self.forward_values = forward.values
        self.forward_stats: dict[str, TensorStats] = forward.stats
        self.cotangents = cotangent_values(result, self.forward_values, cotangents)
        self._ops = OpIndex(result)
        self._recorder = StepRecorder(result, self._ops.top_forward_of)
        self._breakpoints = Breakpoints(self._ops)
        self.stop_reason = ""
        # an InterventionPlan (debug/interventions.py) that runs each step with its edits
        self.interventions: Any = None
        self.reset()

    # --- state ---------------------------------------------------------------------------
    def reset(self) -> None:
        """Back to before the first backward step."""
        bwd = self.trace
        self._env: dict[str, Any] = dict(bwd.constants)
        if len(bwd.args) >= 2:
            saved_unpack = self.bsyms[0] if self.bsyms and is_unpack(self.bsyms[0]) else None
            saved_names = (
                [p.name for p in pytree.tree_leaves(saved_unpack.output)] if saved_unpack else []
            )
            missing = [n for n in saved_names if n not in self.forward_values]
            if missing:
                raise StepError(f"the augmented forward did not produce saved tensors {missing}")
            self._env[bwd.args[0].name] = tuple(self.forward_values[n] for n in saved_names)
            self._env[bwd.args[1].name] = tuple(self.cotangents)
        self._index = 0
        self._undo: list[list[tuple[str, Any]]] = []
        self.history: list[StepRecord] = []
        self._stats: dict[str, TensorStats] = {}
        self.stop_reason = ""

    @property
    def index(self) -> int:
        """How many backward bound symbols have run (= the index of `current`)."""
        return self._index

    @property
    def done(self) -> bool:
        return self._index >= len(self.bsyms)

    @property
    def current(self) -> BoundSymbol | None:
        """The next bound symbol to run, or None at the end."""
        return None if self.done else self.bsyms[self._index]

    def __len__(self) -> int:
        return len(self.bsyms)

    def value(self, name: str) -> Any:
        """The value of a proxy by name: backward values computed so far, saved tensors,
        forward values the stepper knows (inputs, outputs, saved; all with record_forward)."""
        if name in self._env:
            return self._env[name]
        if name in self.forward_values:
            return self.forward_values[name]
        raise KeyError(
            f"{name!r} has no value yet (step {self._index} of {len(self.bsyms)}): "
            "it is computed by a later step, or it is not a name of this program"
        )

    def has_value(self, name: str) -> bool:
        return name in self._env or name in self.forward_values

    def stats_of(self, name: str) -> TensorStats | None:
        """Statistics of a value a step has produced (as recorded), or of a forward value
        (with record_forward); None if unknown."""
        found = self._stats.get(name)
        return found if found is not None else self.forward_stats.get(name)

    @property
    def grads(self) -> dict[str, Any]:
        """Gradient per forward argument (None where none flows or not computed yet)."""
        out: dict[str, Any] = {}
        for p, g in zip(self.result.forward.flat_args, self.result.grad_inputs, strict=True):
            out[p.name] = self._env.get(g.name) if g is not None else None
        if self.interventions is not None:
            out = self.interventions.final_grads(out, self._env, self.value)
        return out

    # --- running -------------------------------------------------------------------------
    def _execute(self) -> StepRecord:
        i = self._index
        bsym = self.bsyms[i]
        undo: list[tuple[str, Any]] = []
        produced: list[str] = []
        env = self._env

        def write(name: str, value: Any) -> None:
            undo.append((name, env.get(name, MISSING)))
            env[name] = value
            produced.append(name)

        def remember(name: str, value: Any) -> None:  # a value of the interventions' own
            undo.append((name, env.get(name, MISSING)))
            env[name] = value

        try:
            with torch.no_grad():
                if self.interventions is None:
                    run_bsym(bsym, env_reader(env, self.forward_values), write)
                else:
                    self.interventions.run(
                        i, bsym, env, env_reader(env, self.forward_values), write, remember
                    )
        except Exception as e:
            _undo(env, undo)
            if isinstance(e, StepError) and e.index is not None:
                raise
            raise StepError(
                f"backward step {i} ({bsym.sym.id}) failed {where_of(bsym)}: "
                f"{type(e).__name__}: {e}",
                bsym,
                i,
            ) from e
        self._undo.append(undo)
        self._index += 1
        record = self._recorder.record(i, bsym, produced, env)
        self.history.append(record)
        self._stats.update(record.outputs)
        return record

    def step(self) -> StepRecord | None:
        """Run the next bound symbol. Returns its record (None when already at the end)."""
        if self.done:
            self.stop_reason = "end of backward"
            return None
        record = self._execute()
        reason = self._breakpoints.reason(record, self._previous_module())
        record.note = reason or ""
        self.stop_reason = reason or ("end of backward" if self.done else "")
        return record

    def _previous_module(self) -> str | None:
        """Module of the step before the one just run (None at the first step)."""
        return self.history[-2].module_path if len(self.history) >= 2 else None

    def _run(
        self,
        stop_after: Callable[[StepRecord], str | None],
        stop_before: Callable[[BoundSymbol], str | None] | None = None,
        breakpoints: bool = True,
        end_reason: str = "end of backward",
    ) -> StepRecord | None:
        last = None
        while not self.done:
            if last is not None and stop_before is not None:
                reason = stop_before(self.bsyms[self._index])
                if reason:
                    self.stop_reason = reason
                    return last
            last = self._execute()
            reason = (
                self._breakpoints.reason(last, self._previous_module()) if breakpoints else None
            )
            reason = reason or stop_after(last)
            if reason:
                last.note = reason
                self.stop_reason = reason
                return last
        self.stop_reason = end_reason
        return last

    def continue_(self) -> StepRecord | None:
        """Run until a breakpoint fires (on the step that just ran) or the backward ends."""
        return self._run(lambda r: None)

    def finish(self) -> StepRecord | None:
        """Run to the end, ignoring breakpoints."""
        return self._run(lambda r: None, breakpoints=False)

    def step_over(self) -> StepRecord | None:
        """Run the current op and everything after it in the same module (and its
        submodules); stop before the first op outside it. At the root module: one step."""
        if self.done:
            return self.step()
        module = module_of(self.bsyms[self._index])
        if module == "":
            return self.step()
        return self._run(
            lambda r: None,
            stop_before=lambda b: (
                None if module_within(module_of(b), module) else f"stepped over {module}"
            ),
        )

    def run_to(self, target: OpTarget, *, ignore_breakpoints: bool = False) -> StepRecord | None:
        """Run until `target` has run: a backward bound symbol or its index (or op id
        "backward:12"), or a forward op (bound symbol or "forward:3"): the first backward
        step that belongs to it. A backward target that already ran is stepped back to."""
        ops = self._ops.resolve(target)
        if ops.backward and not ops.forward:
            k = min(ops.backward)
            if k < self._index:
                while self._index > k + 1:
                    self.back()
                self.stop_reason = "reached target"
                return self.history[-1] if self.history else None

        def hit(r: StepRecord) -> str | None:
            return "reached target" if r in ops else None

        return self._run(hit, breakpoints=not ignore_breakpoints, end_reason="target not reached")

    def back(self) -> StepRecord | None:
        """Undo the last step: forget the values it produced. Returns the new last record."""
        if not self._undo:
            self.stop_reason = "at the start"
            return None
        _undo(self._env, self._undo.pop())
        self._index -= 1
        for name in self.history.pop().outputs:
            self._stats.pop(name, None)
        self.stop_reason = ""
        return self.history[-1] if self.history else None

    def first_nan(self) -> StepRecord | None:
        """The first step whose outputs (or finished gradients) hold NaN or Inf. Looks at the
        steps already run, then runs on (ignoring other breakpoints) until one is found or
        the backward ends; the stepper stays there. None when there is no NaN/Inf."""
        for r in self.history:
            if r.has_nan_or_inf:
                return r
        rec = self._run(
            lambda r: "first NaN/Inf" if r.has_nan_or_inf else None,
            breakpoints=False,
            end_reason="no NaN/Inf in the backward",
        )
        return rec if rec is not None and rec.has_nan_or_inf else None

    def record_all(self) -> list[StepRecord]:
        """Run every step from the start (ignoring breakpoints) and return the records."""
        self.reset()
        self.finish()
        return list(self.history)

    # --- breakpoints (debug/breakpoints.py) ---------------------------------------------
    def break_on_op(self, target: OpTarget, enabled: bool = True) -> None:
        """Stop after `target` runs: a backward op (bound symbol, index, "backward:i") or a
        forward op (every backward step derived from it)."""
        self._breakpoints.on_op(target, enabled)

    def break_on_module(self, path: str, enabled: bool = True) -> None:
        """Stop after the first step that enters module `path` (or a submodule of it)."""
        self._breakpoints.on_module(path, enabled)

    def break_on_nan(self, enabled: bool = True) -> None:
        """Stop after the first step whose outputs or finished gradients hold NaN/Inf."""
        self._breakpoints.nan_inf = bool(enabled)

    def break_on_grad_norm(self, threshold: float | None) -> None:
        """Stop after a step that produces a gradient (or finishes a parameter gradient)
        whose norm exceeds `threshold` (None: off). The saved-tensor unpack is not a gradient
        and never fires it."""
        self._breakpoints.grad_norm_above = None if threshold is None else float(threshold)

    def clear_breakpoints(self) -> None:
        self._breakpoints.clear()

    @property
    def breakpoints(self) -> dict[str, Any]:
        """The breakpoints in the viewer's form: {ops, modules, nan_inf, grad_norm_above}."""
        return self._breakpoints.to_json()

    def set_breakpoints(self, spec: Mapping[str, Any]) -> None:
        """Replace all breakpoints from the viewer's form (see `breakpoints`)."""
        self._breakpoints.load_json(spec)

    # --- checking against torch.autograd -------------------------------------------------
    def compare_with_autograd(
        self,
        reference_grads: Mapping[str, Any],
        *,
        rtol: float | None = None,
        atol: float | None = None,
    ) -> list[GradComparison]:
        """Compare the final gradients with `reference_grads` (forward argument name ->
        tensor or None, e.g. from `autograd_grads`). Runs the backward to the end first."""
        if not self.done:
            self.finish()
        ours = self.grads
        out = []
        for name, ref in reference_grads.items():
            if name not in ours:
                raise KeyError(f"{name!r} is not a forward argument; they are {list(ours)}")
            out.append(compare_grad(name, ours[name], ref, rtol, atol))
        return out

    def autograd_reference(self, fn: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """torch.autograd's gradients for the same program, keyed by forward argument name
        (see `thunderviz.debug.reference.autograd_grads`)."""
        return autograd_grads(
            self.result.forward, fn, args, kwargs, cotangents=list(self.cotangents)
        )


def _undo(env: dict[str, Any], undo: list[tuple[str, Any]]) -> None:
    """Put back the values a step's writes replaced (forget the names it bound)."""
    for name, old in reversed(undo):
        if old is MISSING:
            env.pop(name, None)
        else:
            env[name] = old
