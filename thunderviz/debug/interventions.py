"""Interventions in the backward: edit a gradient, re-run the backward from there.

An intervention changes a gradient where the backward reads it, without re-tracing the
program or re-running its forward:

- a backward bound symbol (or a backward proxy's name): its outputs, as every later step
  sees them;
- a forward bound symbol or forward tensor name: the tensor's gradient, as a tensor hook
  (`t.register_hook`) changes it: the op that produced the tensor (and its final
  gradient, for an argument) sees the edited gradient, other tensors sharing the same
  backward value do not;
- a module path: what the module's backward hands to its inputs, as a full backward hook
  (`register_full_backward_hook`) sees it as `grad_input`.

Edits compose in the order they were made. The plan is a set of substitutions on the reads
of the backward (see `roles.py`); the stepper asks the plan to run each step, so stepping,
statistics, NaN breakpoints and gradient flow all see the edited values.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from thunderviz.core.proxies import Proxy
from thunderviz.core.symbol import BoundSymbol
from thunderviz.debug.interpret import MISSING, run_bsym
from thunderviz.debug.roles import BackwardRoles, Slot

__all__ = ["GradEdit", "Intervention", "InterventionPlan", "EDIT_KINDS"]

EDIT_KINDS = ("zero", "scale", "clip", "clamp", "noise", "custom")


@dataclass(frozen=True)
class GradEdit:
    """What to do to a gradient: `"zero"`, `("scale", k)`, `("clip", max_norm)` (scale down to
    that norm, as `clip_grad_norm_` does), `("clamp", lo, hi)` (elementwise), `("noise",
    std)` (Gaussian, from its own generator seeded with `seed`: the same seed gives the
    same noise, and the user's RNG is never drawn from), or a callable `g -> new g`."""

    kind: str
    params: tuple[float, ...] = ()
    fn: Callable[..., Any] | None = None  # the user's `g -> new g`
    seed: int = 0

    @classmethod
    def parse(cls, spec: Any, seed: int = 0) -> GradEdit:
        if isinstance(spec, GradEdit):
            return spec
        if callable(spec):
            return cls("custom", (), spec, seed)
        kind, *params = (spec,) if isinstance(spec, str) else tuple(spec)
        arity = {"zero": 0, "scale": 1, "clip": 1, "clamp": 2, "noise": 1}
        if kind not in arity:
            raise ValueError(
                f"unknown edit {spec!r}: use a callable, 'zero', ('scale', k), "
                "('clip', max_norm), ('clamp', lo, hi) or ('noise', std)"
            )
        if len(params) != arity[kind] or not all(
            isinstance(p, (int, float)) and not isinstance(p, bool) for p in params
        ):
            raise ValueError(f"{kind!r} takes {arity[kind]} number(s), got {params!r}")
        if kind == "clip" and params[0] < 0 or kind == "noise" and params[0] < 0:
            raise ValueError(f"{kind!r} takes a non-negative number, got {params[0]!r}")
        return cls(kind, tuple(float(p) for p in params), None, seed)

    def __call__(self, g: Any) -> Any:
        if not isinstance(g, torch.Tensor):
            return g
        if self.kind == "zero":
            return torch.zeros_like(g)
        if self.kind == "scale":
            return g * self.params[0]
        if self.kind == "clamp":
            return g.clamp(self.params[0], self.params[1])
        if self.kind == "clip":
            norm = torch.linalg.vector_norm(g.double())
            factor = torch.clamp(self.params[0] / (norm + 1e-6), max=1.0)
            return g * factor.to(g.dtype)
        if self.kind == "noise":
            gen = torch.Generator(device=g.device).manual_seed(self.seed)
            noise = torch.randn(g.shape, generator=gen, device=g.device, dtype=torch.float64)
            return g + (self.params[0] * noise).to(g.dtype)
        assert self.fn is not None  # the kinds above are all but "custom", which has one
        out = self.fn(g)
        if not isinstance(out, torch.Tensor) or out.shape != g.shape:
            raise ValueError(
                f"the intervention function returned {type(out).__name__}"
                f"{'' if not isinstance(out, torch.Tensor) else list(out.shape)}; "
                f"it must return a tensor of shape {list(g.shape)}"
            )
        return out

    def describe(self) -> str:
        if self.kind == "custom":
            return getattr(self.fn, "__name__", "custom")
        return (
            self.kind
            if not self.params
            else f"{self.kind}({', '.join(f'{p:g}' for p in self.params)})"
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "params": list(self.params)}
        if self.kind == "noise":
            out["seed"] = self.seed
        if self.kind == "custom":
            out["name"] = self.describe()
        return out


# --- values the plan computes: an edited gradient, or a sum of parts ----------------------
@dataclass(frozen=True, eq=False)
class _Name:
    name: str


@dataclass(frozen=True, eq=False)
class _Edited:
    key: str
    source: Any
    edit: GradEdit


@dataclass(frozen=True, eq=False)
class _Sum:
    key: str
    parts: tuple[Any, ...]


_keys = itertools.count()


def _key() -> str:
    # env names the plan's values live under: no proxy name contains '%'
    return f"%intervention{next(_keys)}"


@dataclass
class Intervention:
    """One edit as the user asked for it. `target`: what was given, in words; `kind`:
    backward_op / gradient / module / value; `names`: the tensors (or module inputs) whose
    gradients it edits; `first_step`: the first backward step it changes."""

    target: str
    kind: str
    edit: GradEdit
    names: tuple[str, ...]
    op: str | None = None  # "forward:3" / "backward:12" for op targets
    first_step: int = 0
    actions: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "target": self.target,
            "kind": self.kind,
            "edit": self.edit.to_json(),
            "names": list(self.names),
            "first_step": self.first_step,
        }
        if self.op is not None:
            out["op"] = self.op
        return out

    def __repr__(self) -> str:
        return (
            f"<intervention {self.edit.describe()} on {self.target} (from step {self.first_step})>"
        )


class InterventionPlan:
    """The substitutions a list of interventions makes on the backward's reads."""

    def __init__(self, roles: BackwardRoles, arg_kinds: Mapping[str, str]) -> None:
        self.roles = roles
        self.arg_kinds = dict(arg_kinds)
        self.slots: dict[Slot, Any] = {}
        self.value_edits: dict[str, list[GradEdit]] = {}
        self._reads: dict[int, dict[str, Any]] = {}
        self._accumulations: dict[int, tuple[Any, Any]] = {}

    # --- building ------------------------------------------------------------------------
    def current(self, slot: Slot) -> Any:
        if slot in self.slots:
            return self.slots[slot]
        if slot.kind == "final":
            return _Name(self.roles.grad_input[slot.name])
        return _Name(slot.name)

    def _redirect(self, slots: Iterable[Slot], value: Any) -> None:
        for slot in slots:
            self.slots[slot] = value
            if slot.kind == "read":
                self._reads.setdefault(slot.step, {})[slot.name] = value
            elif slot.kind in ("old", "grad"):
                c = self.roles.accumulation_at[slot.step]
                assert c.old is not None  # accumulation_at holds accumulations only
                old, grad = self._accumulations.get(slot.step, (_Name(c.old), _Name(c.grad)))
                self._accumulations[slot.step] = (
                    (value, grad) if slot.kind == "old" else (old, value)
                )

    def edit_gradient(self, x: str, edit: GradEdit) -> int:
        """A tensor hook on forward tensor `x`. Returns the first step it changes."""
        held = self.roles.result.cotangent_of.get(x)
        slots = self.roles.gradient_slots(x, held) if held is not None else []
        if not slots:
            raise ValueError(f"no gradient of {x} is read by the backward: nothing to edit")
        self._redirect(slots, _Edited(_key(), self.current(slots[0]), edit))
        return _first(slots, len(self.roles.bsyms))

    def edit_module(
        self, path: str, edit: GradEdit, within: Callable[[str], bool]
    ) -> tuple[list[str], int]:
        """A full backward hook on the module at `path` (`within(module_path)` says whether
        an op belongs to it): edit the gradient it hands to each of its inputs."""
        roles = self.roles
        inside = roles.module_contributions(
            lambda app: within(app.bsym.module_path or app.top.module_path)
        )
        inputs: list[str] = []
        first = len(roles.bsyms)
        for x, chain in inside.items():
            producer = roles.forward_producer.get(x)
            if producer is not None and within(producer.module_path):
                continue  # made inside the module: not one of its inputs
            if x in roles.forward_args and self.arg_kinds.get(x, "input") != "input":
                continue  # a parameter or buffer: grad_input holds only the forward's inputs
            for a, b in zip(chain, chain[1:], strict=False):
                if b.old != a.total:
                    raise ValueError(
                        f"module {path!r}: gradients of {x} from inside and outside "
                        "the module interleave; intervene on its ops instead"
                    )
            parts = []
            for c in chain:
                if c.old is None:  # the first contribution: its value may be edited already
                    later = roles.gradient_slots(x, c.total)
                    parts.append(self.current(later[0]) if later else _Name(c.grad))
                else:
                    parts.append(self.current(Slot("grad", roles.producer[c.total], c.grad)))
            through = parts[0] if len(parts) == 1 else _Sum(_key(), tuple(parts))
            edited = _Edited(_key(), through, edit)
            start = chain[0]
            if start.old is not None:
                old = self.current(Slot("old", roles.producer[start.total], start.old))
                edited = _Sum(_key(), (old, edited))
            slots = roles.gradient_slots(x, chain[-1].total)
            if not slots:
                continue
            self._redirect(slots, edited)
            inputs.append(x)
            first = min(
                first, _first(slots, first), *(roles.producer.get(c.total, first) for c in chain)
            )
        if not inputs:
            raise ValueError(f"module {path!r} hands no gradient to an input")
        return inputs, first

    def edit_value(self, name: str, edit: GradEdit) -> int:
        """Edit backward value `name` where it is produced (every reader sees the edit)."""
        if name not in self.roles.producer:
            raise ValueError(f"{name!r} is not produced by the backward")
        self.value_edits.setdefault(name, []).append(edit)
        return self.roles.producer[name]

    # --- running -------------------------------------------------------------------------
    def _evaluate(
        self,
        ref: Any,
        env: dict[str, Any],
        lookup: Callable[[str], Any],
        remember: Callable[[str, Any], None] | None,
    ) -> Any:
        if isinstance(ref, _Name):
            return lookup(ref.name)
        known = env.get(ref.key, MISSING)
        if known is not MISSING:
            return known
        if isinstance(ref, _Edited):
            value = ref.edit(self._evaluate(ref.source, env, lookup, remember))
        else:
            parts = [self._evaluate(p, env, lookup, remember) for p in ref.parts]
            value = parts[0]
            for p in parts[1:]:
                value = value + p
        if remember is not None:
            remember(ref.key, value)
        return value

    def run(
        self,
        i: int,
        bsym: BoundSymbol,
        env: dict[str, Any],
        read: Callable[[Proxy], Any],
        write: Callable[[str, Any], None],
        remember: Callable[[str, Any], None],
    ) -> None:
        """Run backward step `i` with the plan's substitutions and edits."""

        def lookup(name: str) -> Any:
            return read(Proxy(name))

        accumulation = self._accumulations.get(i)
        substitutions = self._reads.get(i)
        if accumulation is not None:
            old, grad = (self._evaluate(r, env, lookup, remember) for r in accumulation)
            add = bsym.sym.fn
            assert add is not None  # an accumulation is aten.add, which runs
            write(self.roles.accumulation_at[i].total, add(old, grad))
        elif substitutions:

            def substituted(p: Proxy) -> Any:
                ref = substitutions.get(p.name)
                return read(p) if ref is None else self._evaluate(ref, env, lookup, remember)

            run_bsym(bsym, substituted, write)
        else:
            run_bsym(bsym, read, write)
        for p in bsym.flat_proxy_outs:
            for edit in self.value_edits.get(p.name, ()):
                write(p.name, edit(env[p.name]))

    def final_grads(
        self, grads: dict[str, Any], env: dict[str, Any], lookup: Callable[[str], Any]
    ) -> dict[str, Any]:
        """The forward arguments' gradients with final-gradient edits applied."""
        out = dict(grads)
        for slot, ref in self.slots.items():
            if slot.kind == "final" and out.get(slot.name) is not None:
                out[slot.name] = self._evaluate(ref, env, lookup, None)
        return out

    def gradient_of(
        self, x: str, held: str, env: dict[str, Any], lookup: Callable[[str], Any]
    ) -> Any:
        """Forward tensor `x`'s gradient as the backward uses it (after the edits)."""
        for slot in self.roles.gradient_slots(x, held):
            if slot in self.slots:
                return self._evaluate(self.slots[slot], env, lookup, None)
        return lookup(held)

    @property
    def first_step(self) -> int:
        steps = [s.step for s in self.slots if s.kind != "final"]
        steps += [self.roles.producer[n] for n in self.value_edits]
        return min(steps, default=len(self.roles.bsyms))


def _first(slots: Iterable[Slot], default: int) -> int:
    return min((s.step for s in slots if s.kind != "final"), default=default)
