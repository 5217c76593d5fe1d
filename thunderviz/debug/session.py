"""A debugging session: one program traced, differentiated, steppable and drawable.

`Session(model, x, y)` traces the program, derives its augmented forward and backward
traces, records how the VJP and the default passes (DCE, CSE) built or changed them, and
hands out a `BackwardStepper` on real values. `session.document()` is the view document
(docs/view-format.md) that the widget, the `.tvz` file and the static picture are made of.
"""

from __future__ import annotations

from typing import Any

import torch

from thunderviz.autodiff.api import differentiate
from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.capture import trace
from thunderviz.core.inputs import InputKind
from thunderviz.core.trace import Trace
from thunderviz.debug.grad_flow import cotangent_map, grad_flow
from thunderviz.debug.gradcheck import (
    GradCheck,
    GradientReport,
    check_all,
    forward_op,
    gradcheck_op,
)
from thunderviz.debug.intervene import (
    build_plan,
    edited_forward_grads,
    replay,
    resolve_intervention,
)
from thunderviz.debug.interventions import GradEdit, Intervention, InterventionPlan
from thunderviz.debug.ledger import LedgerEntry, first_nan_note, nan_ledger
from thunderviz.debug.reference import (
    GradComparison,
    autograd_grads,
    trace_arg_values,
)
from thunderviz.debug.roles import BackwardRoles
from thunderviz.debug.stats import TensorStats
from thunderviz.debug.stepper import BackwardStepper
from thunderviz.debug.steps import StepRecord
from thunderviz.transforms import CSE, DCE, StepRecorder, Transform, TransformRun, record_transform
from thunderviz.viz.document import build_document

__all__ = ["Session"]


class Session:
    """Trace `fn_or_module(*args, **kwargs)` and get everything the debugger shows.

    fake: trace with FakeTensors (no values: no autodiff, no stepping).
    backward: derive the augmented forward and backward traces (needs grad rules for every
        op on the path to the parameters).
    depth: how many levels of subsymbols the printed Python shows as comments.
    record_transforms: record DCE and CSE over the forward trace (and the VJP construction)
        so the transform stepper can replay them.
    cotangents: for programs with non-scalar outputs, one cotangent per output (see
        `BackwardStepper`).
    """

    def __init__(
        self,
        fn_or_module: Any,
        *args: Any,
        fake: bool = False,
        backward: bool = True,
        depth: int = 1,
        record_transforms: bool = True,
        title: str | None = None,
        cotangents: Any = None,
        **kwargs: Any,
    ) -> None:
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 0:
            raise ValueError(f"depth must be a non-negative integer, got {depth!r}")
        self.fn = fn_or_module
        self.args = args
        self.kwargs = kwargs
        self.fake = fake
        self.depth = depth
        self.cotangents = cotangents
        self.title = title or _title_of(fn_or_module)
        self.forward: Trace = trace(fn_or_module, *args, fake=fake, **kwargs)
        self.arg_kinds: dict[str, str] = {  # as the view document names them
            p.name: _DOCUMENT_KINDS[inp.kind]
            for p, inp in zip(self.forward.flat_args, self.forward.inputs, strict=True)
        }
        for name in self.forward.constants:
            self.arg_kinds.setdefault(name, "constant")
        self.result: AutodiffResult | None = None
        self.vjp_run: TransformRun | None = None
        if backward and not fake:
            recorder = StepRecorder("vjp", self.forward) if record_transforms else None
            self.result = differentiate(self.forward, recorder=recorder)
            if self.result.construction is not None:
                self.vjp_run = self.result.construction.run
        self.transform_runs: list[TransformRun] = []
        if record_transforms:
            if self.vjp_run is not None:
                self.transform_runs.append(self.vjp_run)
            self.record_transform(DCE())
            self.record_transform(CSE())
        self._stepper: BackwardStepper | None = None
        self._recording: BackwardStepper | None = None
        self.steps: list[StepRecord] = []
        self.forward_stats: dict[str, TensorStats] = {}
        self._cotangents: dict[str, str] | None = None
        self._interventions: list[Intervention] = []
        self._plan: InterventionPlan | None = None
        self._roles: BackwardRoles | None = None
        self._final: BackwardStepper | None = None  # run to the end, for grads()
        self._checking: BackwardStepper | None = None  # every value, no interventions

    # --- parts ---------------------------------------------------------------------------
    @property
    def augmented_forward(self) -> Trace | None:
        return self.result.augmented_forward if self.result is not None else None

    @property
    def backward(self) -> Trace | None:
        return self.result.backward if self.result is not None else None

    def forward_values(self) -> list[Any]:
        """The forward trace's argument values, in trace order (inputs, params, buffers,
        keyword values)."""
        return trace_arg_values(self.forward, self.fn, self.args, self.kwargs)

    def _require_values(self, what: str) -> AutodiffResult:
        if self.fake:
            raise RuntimeError(
                f"{what} needs real values; this session traced with fake=True. "
                "Make a Session without fake=True (on smaller inputs if memory is short)."
            )
        if self.result is None:
            raise RuntimeError(
                f"{what} needs the backward trace; this session was made with backward=False."
            )
        return self.result

    @property
    def stepper(self) -> BackwardStepper:
        """The interactive stepper (made on first use; `new_stepper()` for a fresh one)."""
        if self._stepper is None:
            self._stepper = self.new_stepper()
            self._stepper.interventions = self._plan
        return self._stepper

    def new_stepper(
        self, cotangents: Any = None, *, record_forward: bool = False
    ) -> BackwardStepper:
        result = self._require_values("stepping through the backward")
        return BackwardStepper(
            result,
            self.forward_values(),
            cotangents if cotangents is not None else self.cotangents,
            record_forward=record_forward,
        )

    def record_transform(self, transform: Transform, trace_: Trace | None = None) -> TransformRun:
        """Run `transform` on the forward trace (or `trace_`), recording every step."""
        run = record_transform(transform, trace_ if trace_ is not None else self.forward)
        self.transform_runs.append(run)
        return run

    def record_backward(self) -> list[StepRecord]:
        """Run the whole backward once, keeping every step's statistics (and every forward
        tensor's) for a static export. The interactive `stepper` is not moved."""
        self._recording = self.new_stepper(record_forward=True)
        self._recording.interventions = self._plan
        self.steps = self._recording.record_all()
        self.forward_stats = dict(self._recording.forward_stats)
        return self.steps

    @property
    def recording(self) -> BackwardStepper | None:
        """The stepper `record_backward` ran (every forward and backward value), or None."""
        return self._recording

    def grad_flow(self) -> dict[str, dict[str, Any]]:
        """Gradient norm and status per forward tensor (from the recorded run, else from the
        interactive stepper's position). Empty without a backward."""
        if self.result is None or self.fake:
            return {}
        source = self._recording or self._stepper
        if source is None:
            return {}
        if self._cotangents is None:
            self._cotangents = cotangent_map(self.result)
        if self._plan is not None:
            return grad_flow(
                self.result, edited_forward_grads(self._plan, source, self._cotangents)
            )
        return grad_flow(self.result, source, cotangents=self._cotangents)

    # --- interventions (debug/interventions.py) ----------------------------------------
    @property
    def interventions(self) -> list[Intervention]:
        """The interventions in force, in the order they apply."""
        return list(self._interventions)

    def intervene(self, target: Any, fn: Any, *, seed: int = 0) -> Intervention:
        """Edit a gradient and re-run the backward from the first step that reads it.

        target: a backward bound symbol (its outputs), a forward bound symbol (its outputs'
            gradients, as a tensor hook), an op id ("backward:12" / "forward:3"), a module
            path (what its backward hands to its inputs, as a full backward hook's
            `grad_input`), or a tensor name (forward: its gradient; backward: that value).
        fn: a callable `g -> new g`, or "zero", ("scale", k), ("clip", max_norm),
            ("clamp", lo, hi), ("noise", std) (seeded with `seed`).
        `grads()`, `grad_flow()`, the steppers and the recorded steps see the edit.
        """
        result = self._require_values("an intervention")
        if self._roles is None:
            self._roles = BackwardRoles(result)
        iv = resolve_intervention(self._roles, target, GradEdit.parse(fn, seed))
        self._apply([*self._interventions, iv])
        return iv

    def clear_interventions(self) -> None:
        """Remove every intervention; the backward is re-run where they had changed it."""
        if self._interventions:
            self._apply([])

    def _apply(self, interventions: list[Intervention]) -> None:
        # only reached once an intervention was made: there is a backward and its roles
        assert self.backward is not None and self._roles is not None
        old_start = (
            self._plan.first_step if self._plan is not None else len(self.backward.bound_symbols)
        )
        plan = build_plan(self._roles, self.arg_kinds, interventions) if interventions else None
        new_start = plan.first_step if plan is not None else old_start
        self._interventions, self._plan = interventions, plan
        replay((self._stepper, self._recording, self._final), plan, min(old_start, new_start))
        if self._recording is not None:
            self.steps = list(self._recording.history)

    def grads(self) -> dict[str, torch.Tensor | None]:
        """The gradient of each forward argument (input, parameter, buffer; by trace
        argument name), interventions included; None where none flows."""
        return self._finished().grads

    def _finished(self) -> BackwardStepper:
        """A stepper that has run the whole backward (the recording, else one of its own)."""
        if self._recording is not None:
            return self._recording
        if self._final is None:
            self._final = self.new_stepper()
            self._final.interventions = self._plan
            self._final.finish()
        return self._final

    # --- gradient checks (debug/gradcheck.py) ------------------------------------------
    def _check_run(self) -> tuple[BackwardRoles, BackwardStepper]:
        result = self._require_values("a gradient check")
        if self._roles is None:
            self._roles = BackwardRoles(result)
        if self._checking is None:
            self._checking = self.new_stepper(record_forward=True)
            self._checking.finish()
        return self._roles, self._checking

    def gradcheck(self, target: Any) -> GradCheck:
        """One forward op's recorded backward (a bound symbol, its op id, or a backward op
        of it) against torch.autograd and finite differences on its recorded inputs, in
        float64. Interventions are not applied: this checks the rules."""
        roles, stepper = self._check_run()
        bsym, op_id = forward_op(roles, target)
        return gradcheck_op(roles, stepper, bsym, op_id)

    def check_gradients(self) -> GradientReport:
        """`gradcheck` for every forward op with a backward; `first_failure` names the
        first op whose recorded gradient disagrees with torch.autograd."""
        return check_all(*self._check_run())

    # --- NaN/Inf (debug/ledger.py) -----------------------------------------------------
    def nan_ledger(self) -> list[LedgerEntry]:
        """Every backward step's status: clean, born (non-finite out, finite in),
        propagated, or healed (non-finite in, finite out), with its forward op and line."""
        self._require_values("the NaN/Inf ledger")
        return nan_ledger(self._finished())

    def first_nan(self) -> StepRecord | None:
        """Move the interactive stepper to the first step that produces NaN/Inf (see
        `BackwardStepper.first_nan`); its note says whether it is healed later or which
        gradients it reaches. None when the backward has no NaN/Inf."""
        record = self.stepper.first_nan()
        if record is not None:
            finished = self._finished()
            note = first_nan_note(record, nan_ledger(finished), finished.grads)
            if note not in record.note:
                record.note = f"{record.note}; {note}" if record.note else note
        return record

    def autograd_reference(self, cotangents: Any = None) -> dict[str, torch.Tensor | None]:
        """torch.autograd's gradients of the same program, keyed by forward argument name
        (`cotangents` as for `BackwardStepper`, in `result.cotangent_outputs` order)."""
        result = self._require_values("the autograd reference")
        cts = cotangents if cotangents is not None else self.cotangents
        if isinstance(cts, torch.Tensor):
            cts = [cts]
        elif isinstance(cts, dict):
            cts = [cts[p.name] for p in result.cotangent_outputs]
        return autograd_grads(
            self.forward,
            self.fn,
            self.args,
            self.kwargs,
            cotangents=list(cts) if cts is not None else None,
        )

    def compare_with_autograd(self) -> list[GradComparison]:
        """Our final gradients against torch.autograd's (runs a fresh stepper to the end)."""
        stepper = self.new_stepper()
        return stepper.compare_with_autograd(self.autograd_reference(stepper.cotangents))

    def document(self, **options: Any) -> dict[str, Any]:
        """The view document (docs/view-format.md). Options go to `build_document`."""
        doc = build_document(self, **options)
        if self._interventions:
            doc["interventions"] = [iv.to_json() for iv in self._interventions]
        if self._recording is not None and self.steps:  # steps not listed are clean
            doc["nan_ledger"] = [
                e.to_json() for e in nan_ledger(self._recording) if e.status != "clean"
            ]
        return doc

    def __repr__(self) -> str:
        parts = [f"forward: {len(self.forward.bound_symbols)} ops"]
        if self.result is not None:
            parts.append(f"backward: {len(self.result.backward.bound_symbols)} ops")
            parts.append(
                f"saved: {len(self.result.saved_for_backward)} tensors, {self.result.saved_bytes} B"
            )
        if self.steps:
            parts.append(f"{len(self.steps)} recorded steps")
        return f"<thunderviz.Session {self.title}: {'; '.join(parts)}>"


# Trace input kinds as the view document (and InterventionPlan) names them.
_DOCUMENT_KINDS = {
    InputKind.POSITIONAL: "input",
    InputKind.KEYWORD: "input",
    InputKind.PARAMETER: "param",
    InputKind.BUFFER: "buffer",
}


def _title_of(fn: Any) -> str:
    if isinstance(fn, torch.nn.Module):
        return type(fn).__name__
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__
