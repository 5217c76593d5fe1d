"""The widget's stepping commands: which sessions can step, what a run-to target or a
breakpoint of the viewer names, and the stepper's position as the viewer's `steps`.

The widget's step buttons and `w.step()`, `w.run_to(...)`, ... run the session's
`BackwardStepper` (debug/stepper.py); this module turns the viewer's ids into its targets
and its records into the `Step` entries of docs/view-format.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch

from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import BoundSymbol
from thunderviz.debug.interpret import StepError
from thunderviz.debug.session import Session
from thunderviz.debug.stepper import BackwardStepper, StepRecord, module_within
from thunderviz.viz.protocol import module_path_of, op_id
from thunderviz.widgets.selection import ViewIndex

__all__ = [
    "StepsView",
    "default_cotangents",
    "is_steppable",
    "live_stepper",
    "prepare_session",
    "run_to",
    "viewer_breakpoints",
]


def is_steppable(session: Session | None) -> bool:
    return session is not None and session.result is not None and not session.fake


def default_cotangents(session: Session) -> bool:
    """Give a session whose program returns non-scalar outputs (and no cotangents) ones as
    cotangents, as `out.sum().backward()` would; returns whether it did. Without this, its
    stepper would refuse to start."""
    result = session.result
    if result is None or session.cotangents is not None:
        return False
    outs = result.cotangent_outputs
    if all(isinstance(p, TensorProxy) and math.prod(p.shape) == 1 for p in outs):
        return False
    if not all(isinstance(p, TensorProxy) for p in outs):
        return False
    session.cotangents = [torch.ones(p.shape, dtype=p.dtype, device=p.device) for p in outs]
    return True


def prepare_session(session: Session, record: bool, problem: Callable[[str], None]) -> bool:
    """Make a steppable session ready to show: ones as cotangents where it needs them
    (returns whether it got them), and, with `record`, its whole backward recorded once.
    What does not work is reported through `problem`."""
    if not is_steppable(session):
        return False
    defaulted = default_cotangents(session)
    if defaulted:
        problem(
            "the program returns a non-scalar output: the backward starts from ones "
            "(like out.sum().backward()); pass cotangents=... to choose"
        )
    if record and not session.steps:
        try:
            session.record_backward()
        except (StepError, ValueError, RuntimeError) as e:
            problem(f"recording the backward failed: {e}")
    return defaulted


def live_stepper(session: Session | None) -> BackwardStepper:
    """The session's stepper, breaking on NaN/Inf (the viewer's "NaN/Inf" box is ticked by
    default); refuses a session that cannot step with what to do instead."""
    if session is None or not is_steppable(session):
        raise RuntimeError(
            "this widget cannot step the backward: it shows "
            + (
                "a document without a Session"
                if session is None
                else "a Session made with fake=True or backward=False"
            )
            + "; make it with thunderviz.show(model, *inputs)"
        )
    stepper = session.stepper
    stepper.break_on_nan(True)
    return stepper


def run_to(stepper: BackwardStepper, index: ViewIndex, target: Any) -> StepRecord | None:
    """Run until `target` has run: a backward op (BoundSymbol, index, id), a forward op (its
    first backward step), an augmented-forward op (its forward op), a tensor (the op that
    produces it) or a module (the first step inside it)."""
    if isinstance(target, (BoundSymbol, int)) and not isinstance(target, bool):
        return stepper.run_to(target)
    ident = index.id_of(target)
    path = module_path_of(ident)
    if path is not None:
        return _run_to_module(stepper, path)
    return stepper.run_to(index.steppable_op(ident))


def _run_to_module(st: BackwardStepper, path: str) -> StepRecord | None:
    last = None
    while not st.done:
        last = st.step()
        if last is None or last.note:  # a breakpoint fired
            return last
        if module_within(last.module_path, path):
            st.stop_reason = f"reached module {path or '(root)'}"
            last.note = st.stop_reason
            return last
    st.stop_reason = "target not reached"
    return last


def viewer_breakpoints(
    spec: Mapping[str, Any], index: ViewIndex
) -> tuple[dict[str, Any], list[str]]:
    """The viewer's breakpoint form {ops, modules, nan_inf, grad_norm_above} in the
    stepper's terms (`Breakpoints.load_json`), and the entries it cannot use. The viewer's
    ops may be any id it shows: a tensor stands for the op producing it, an augmented-forward
    op for its forward op, a module id for the module."""
    ops: list[str] = []
    modules: list[str] = []
    ignored: list[str] = []
    for op in spec.get("ops") or ():
        try:
            in_module = module_path_of(op) if isinstance(op, str) else None
            if in_module is not None:
                modules.append(in_module)
            else:
                ops.append(index.steppable_op(index.id_of(op)))
        except (ValueError, IndexError, TypeError) as e:
            ignored.append(f"{op}: {e}")
    modules += [p for p in spec.get("modules") or () if isinstance(p, str)]
    out = {
        "ops": ops,
        "modules": modules,
        "nan_inf": bool(spec.get("nan_inf", False)),
        "grad_norm_above": spec.get("grad_norm_above"),
    }
    return out, ignored


class StepsView:
    """The stepper's position as the viewer's `steps` (one entry per backward op: the
    executed ones with their statistics and notes, the rest empty) and `current_step`."""

    def __init__(self) -> None:
        self._json: dict[int, tuple[int, dict[str, Any]]] = {}  # index -> (id(record), json)

    def clear(self) -> None:
        """Forget the records' JSON (the session re-ran its steps)."""
        self._json.clear()

    def _step_json(self, record: StepRecord) -> dict[str, Any]:
        cached = self._json.get(record.index)
        if cached is None or cached[0] != id(record):
            cached = (id(record), record.to_json())
            self._json[record.index] = cached
        out = dict(cached[1])
        if record.note:
            out["note"] = record.note
        return out

    def state(self, stepper: BackwardStepper) -> tuple[list[dict[str, Any]], int]:
        """(steps, current_step) for where `stepper` is."""
        executed = [self._step_json(r) for r in stepper.history]
        reason = stepper.stop_reason
        if executed and reason and not executed[-1].get("note"):
            executed[-1]["note"] = reason
        pending = [
            {"index": i, "op": op_id("backward", i), "outputs": {}, "grads": {}}
            for i in range(len(executed), len(stepper))
        ]
        return executed + pending, len(executed) - 1
