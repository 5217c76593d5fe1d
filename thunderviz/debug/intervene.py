"""What `Session.intervene` does: name a target, build the plan, re-run the backward.

A target is a backward bound symbol, a forward bound symbol (its outputs' gradients), an op
id ("backward:12", "forward:3"), a module path ("blocks.0.mlp" or "module:blocks.0.mlp"),
or a tensor name (a forward tensor: its gradient; a backward value: that value).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from thunderviz.core.symbol import BoundSymbol
from thunderviz.debug.interventions import GradEdit, Intervention, InterventionPlan
from thunderviz.debug.roles import BackwardRoles
from thunderviz.debug.stepper import BackwardStepper
from thunderviz.debug.steps import module_within
from thunderviz.viz import protocol

__all__ = ["resolve_intervention", "build_plan", "replay", "edited_forward_grads"]


def _module_paths(roles: BackwardRoles) -> set[str]:
    paths: set[str] = set()
    for top in roles.result.forward.bound_symbols:
        for b in top.walk():
            parts = b.module_path.split(".") if b.module_path else []
            paths.update(".".join(parts[:k]) for k in range(1, len(parts) + 1))
    return paths


def _forward_op_id(roles: BackwardRoles, bsym: BoundSymbol) -> str | None:
    for i, top in enumerate(roles.result.forward.bound_symbols):
        if top is bsym:
            return protocol.op_id("forward", i)
    return None


def _forward_bsym(roles: BackwardRoles, bsym: BoundSymbol) -> bool:
    return any(b is bsym for top in roles.result.forward.bound_symbols for b in top.walk())


def _op(roles: BackwardRoles, target: str) -> BoundSymbol:
    parsed = protocol.parse_op_id(target)
    if parsed is None or len(parsed[1]) != 1:  # a top-level op only
        raise ValueError(f"{target!r} is not an op id like 'backward:12' or 'forward:3'")
    kind, (index,) = parsed
    ops = roles.bsyms if kind == "backward" else roles.result.forward.bound_symbols
    if not 0 <= index < len(ops):
        raise IndexError(f"{target!r}: the {kind} trace has {len(ops)} ops")
    return ops[index]


def resolve_intervention(roles: BackwardRoles, target: Any, edit: GradEdit) -> Intervention:
    """An `Intervention` for `target` (see the module docstring); raises ValueError for a
    target the backward does not know."""
    if isinstance(target, str) and protocol.trace_kind_of(target) in ("backward", "forward"):
        target = _op(roles, target)
    if isinstance(target, BoundSymbol):
        index = next((i for i, b in enumerate(roles.bsyms) if b is target), None)
        if index is not None:
            names = tuple(p.name for p in target.flat_proxy_outs)
            return Intervention(
                f"{protocol.op_id('backward', index)} ({target.sym.id})",
                "backward_op",
                edit,
                names,
                protocol.op_id("backward", index),
                actions=tuple(("value", n) for n in names),
            )
        if not _forward_bsym(roles, target):
            raise ValueError(f"{target!r} is in neither the forward nor the backward trace")
        cmap = roles.result.cotangent_of
        names = tuple(n for n in roles.float_outputs(target) if n in cmap)
        if not names:
            raise ValueError(f"no gradient flows to the outputs of {target.sym.id}")
        op = _forward_op_id(roles, target)
        return Intervention(
            f"{op or 'forward'} ({target.sym.id})",
            "gradient",
            edit,
            names,
            op,
            actions=tuple(("gradient", n) for n in names),
        )
    if not isinstance(target, str):
        raise TypeError(
            "an intervention target is a bound symbol, an op id, a module path or "
            f"a tensor name, not {type(target).__name__}"
        )
    in_id = protocol.module_path_of(target)
    if in_id is not None or target in _module_paths(roles):
        path = target if in_id is None else in_id
        return Intervention(
            f"module {path}",
            "module",
            edit,
            (path,),
            protocol.module_id(path),
            actions=(("module", path),),
        )
    if target in roles.result.cotangent_of or target in roles.forward_producer:
        return Intervention(
            f"tensor {target}", "gradient", edit, (target,), actions=(("gradient", target),)
        )
    if target in roles.producer:
        return Intervention(
            f"backward value {target}", "value", edit, (target,), actions=(("value", target),)
        )
    raise ValueError(f"{target!r} is no op id, module path or tensor name of this program")


def build_plan(
    roles: BackwardRoles, arg_kinds: Mapping[str, str], interventions: Sequence[Intervention]
) -> InterventionPlan:
    """The plan of `interventions`, applied in order (each one's `first_step` and, for
    modules, the inputs it edits are filled in)."""
    plan = InterventionPlan(roles, arg_kinds)
    for iv in interventions:
        first = len(roles.bsyms)
        inputs: list[str] = []
        for action, name in iv.actions:
            if action == "gradient":
                first = min(first, plan.edit_gradient(name, iv.edit))
            elif action == "value":
                first = min(first, plan.edit_value(name, iv.edit))
            else:
                edited, step = plan.edit_module(
                    name, iv.edit, lambda m, path=name: module_within(m, path)
                )
                inputs += edited
                first = min(first, step)
        iv.first_step = first
        if iv.kind == "module":
            iv.names = (iv.names[0], *inputs)
    return plan


def replay(
    steppers: Iterable[BackwardStepper | None], plan: InterventionPlan | None, start: int
) -> None:
    """Install `plan` on each stepper, re-running what it had run from step `start` on
    (earlier steps read nothing the plan changes: they are kept)."""
    for stepper in steppers:
        if stepper is None:
            continue
        position, reason = stepper.index, stepper.stop_reason
        while stepper.index > start:
            stepper.back()
        stepper.interventions = plan
        if stepper.index < position:
            stepper.run_to(position - 1, ignore_breakpoints=True)
        stepper.stop_reason = reason


def edited_forward_grads(
    plan: InterventionPlan, stepper: BackwardStepper, cotangents: Mapping[str, str]
) -> dict[str, Any]:
    """Forward tensor name -> its gradient as the backward uses it under `plan`, for the
    gradients `stepper` has computed (`cotangents`: `grad_flow.cotangent_map`)."""
    return {
        x: plan.gradient_of(x, held, {}, stepper.value)
        for x, held in cotangents.items()
        if stepper.has_value(held)
    }
