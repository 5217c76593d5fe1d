"""Checking one op's recorded backward: against torch.autograd and finite differences.

For a top-level forward op, the recorded backward is what its rules computed in the run:
the gradient they handed to each of the op's inputs (summed over the op's contributions),
given the cotangent of its outputs the backward had at that point. The references run the
op alone, on float64 copies of its recorded inputs, with the same cotangent:

- torch.autograd: `torch.autograd.grad` of the op, run eagerly (no thunderviz rule);
- finite differences: for each input, a central difference of <cotangent, op(x + eps h)>
  along a random direction h (from a seeded generator of its own), against <grad, h>.

The verdict is autograd's (finite differences go wrong at kinks, relu at 0); both are
shown side by side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol, SourceLocation
from thunderviz.debug.interpret import MISSING, StepError, number_default, run_bsym
from thunderviz.debug.roles import BackwardRoles
from thunderviz.debug.stepper import BackwardStepper
from thunderviz.prims.randomness import draws_random
from thunderviz.viz import protocol

__all__ = ["GradCheck", "GradientReport", "gradcheck_op", "check_all", "forward_op", "TOLERANCES"]

# relative tolerance of ||recorded - autograd|| / ||autograd|| per dtype the run used
TOLERANCES = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 5e-2}
_EPS = 1e-6


@dataclass
class GradCheck:
    """One op's recorded gradients against torch.autograd and finite differences, per
    input: `recorded`, `autograd` (float64 tensors), `error` (relative norm of their
    difference), and the directional derivatives `fd` (finite differences), `fd_recorded`
    and `fd_autograd` along the same direction. `ok`: every error within `tolerance`.
    `skipped`: why the op could not be checked (then `ok` is None)."""

    op_id: str
    op: str
    module: str
    source: SourceLocation | None
    recorded: dict[str, torch.Tensor] = field(default_factory=dict)
    autograd: dict[str, torch.Tensor | None] = field(default_factory=dict)
    error: dict[str, float] = field(default_factory=dict)
    fd: dict[str, float] = field(default_factory=dict)
    fd_recorded: dict[str, float] = field(default_factory=dict)
    fd_autograd: dict[str, float] = field(default_factory=dict)
    tolerance: float = 0.0
    skipped: str = ""

    @property
    def ok(self) -> bool | None:
        if self.skipped:
            return None
        return all(e <= self.tolerance for e in self.error.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "op": self.op_id,
            "ok": self.ok,
            "skipped": self.skipped or None,
            "inputs": {
                n: {
                    "error": self.error.get(n),
                    "fd": self.fd.get(n),
                    "fd_recorded": self.fd_recorded.get(n),
                    "fd_autograd": self.fd_autograd.get(n),
                }
                for n in self.recorded
            },
        }

    def __repr__(self) -> str:
        where = f" at {self.source.short()}" if self.source is not None else ""
        if self.skipped:
            return f"<gradcheck {self.op_id} {self.op}{where}: skipped ({self.skipped})>"
        rows = [
            f"  {n}: error {self.error[n]:.3g}; along a direction: recorded "
            f"{self.fd_recorded[n]:.6g}, autograd {self.fd_autograd[n]:.6g}, "
            f"finite differences {self.fd[n]:.6g}"
            for n in self.recorded
        ]
        verdict = "ok" if self.ok else "DISAGREES with torch.autograd"
        return "\n".join([f"<gradcheck {self.op_id} {self.op}{where}: {verdict}", *rows]) + ">"


@dataclass
class GradientReport:
    """`Session.check_gradients()`: one `GradCheck` per differentiated forward op, in
    forward order; `first_failure`: the first op whose recorded backward disagrees."""

    checks: list[GradCheck]

    @property
    def first_failure(self) -> GradCheck | None:
        return next((c for c in self.checks if c.ok is False), None)

    @property
    def ok(self) -> bool:
        return self.first_failure is None

    def __repr__(self) -> str:
        done = [c for c in self.checks if c.ok is not None]
        head = f"{len(done)} ops checked, {sum(1 for c in self.checks if c.skipped)} skipped"
        first = self.first_failure
        return f"<GradientReport: {head}; " + (
            f"first disagreement: {first!r}>" if first else "all agree>"
        )


def _draws_random_numbers(bsym: BoundSymbol, values: dict[str, Any]) -> bool:
    """Whether the op's result depends on the random numbers it draws (an op that may draw,
    like attention with `dropout_p=0`, is run twice under two seeds to see). The user's RNG
    is left as it was."""
    if not draws_random(bsym):
        return False
    runs = []
    for seed in (0, 1):
        with torch.random.fork_rng(), torch.no_grad():  # every device's RNG restored
            torch.manual_seed(seed)
            runs.append(_run(bsym, values))
    return any(
        not torch.equal(v, runs[1][k]) for k, v in runs[0].items() if isinstance(v, torch.Tensor)
    )


def _run(bsym: BoundSymbol, values: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def read(p: Proxy) -> Any:
        v = values.get(p.name, MISSING)
        v = number_default(p) if v is MISSING else v
        if v is MISSING:
            raise StepError(f"gradcheck: no recorded value for {p.name}", bsym)
        return v

    run_bsym(bsym, read, out.__setitem__)
    return out


def gradcheck_op(
    roles: BackwardRoles, stepper: BackwardStepper, bsym: BoundSymbol, op_id: str, *, seed: int = 0
) -> GradCheck:
    """Check top-level forward op `bsym` with the values of `stepper` (a finished stepper
    that recorded the forward: `record_forward=True`)."""
    check = GradCheck(op_id, bsym.sym.id, bsym.module_path, bsym.source)
    apps = [a for a in roles.applications if a.top is bsym]
    inputs = list(dict.fromkeys(p.name for p in bsym.flat_proxy_args if isinstance(p, TensorProxy)))
    contributions = [c for a in apps for c in a.contributions if c.x in inputs]
    if not contributions:
        check.skipped = "no gradient flows through it"
        return check
    cmap = roles.result.cotangent_of
    outputs = [n for n in roles.float_outputs(bsym)]
    dtype = next((stepper.value(c.grad).dtype for c in contributions), torch.float32)
    check.tolerance = TOLERANCES.get(dtype, 1e-4)

    def as64(v: Any) -> Any:
        return (
            v.detach().to(torch.float64)
            if isinstance(v, torch.Tensor) and v.is_floating_point()
            else v
        )

    base = {
        p.name: as64(stepper.value(p.name))
        for p in bsym.flat_proxy_args
        if stepper.has_value(p.name)
    }
    if _draws_random_numbers(bsym, base):
        check.skipped = "it draws random numbers: a rerun would draw others"
        return check
    cts = {}
    for y in outputs:
        held = cmap.get(y)
        if held is not None and stepper.has_value(held):
            cts[y] = as64(stepper.value(held))
    wrt = [x for x in inputs if any(c.x == x for c in contributions)]
    for x in wrt:
        total = None
        for c in contributions:
            if c.x == x:
                g = as64(stepper.value(c.grad))
                total = g if total is None else total + g
        assert total is not None  # x is in wrt: some contribution is to it
        check.recorded[x] = total

    def loss(vals: dict[str, Any]) -> torch.Tensor:
        out = _run(bsym, vals)
        terms = [(out[y].to(torch.float64) * ct).sum() for y, ct in cts.items() if y in out]
        return torch.stack(terms).sum() if terms else torch.zeros((), dtype=torch.float64)

    leaves = {x: base[x].clone().requires_grad_(True) for x in wrt}
    with torch.enable_grad():
        value = loss({**base, **leaves})
        grads = (
            torch.autograd.grad(value, [leaves[x] for x in wrt], allow_unused=True)
            if value.requires_grad
            else [None] * len(wrt)
        )
    gen = torch.Generator().manual_seed(seed)
    for x, ref in zip(wrt, grads, strict=True):
        rec = check.recorded[x]
        ref = torch.zeros_like(rec) if ref is None else ref
        check.autograd[x] = ref
        scale = float(ref.norm())
        diff = float((rec - ref).norm())
        check.error[x] = diff / scale if scale > 0 else diff
        h = torch.randn(rec.shape, generator=gen, dtype=torch.float64)
        with torch.no_grad():
            plus = loss({**base, x: base[x] + _EPS * h})
            minus = loss({**base, x: base[x] - _EPS * h})
        check.fd[x] = float((plus - minus) / (2 * _EPS))
        check.fd_recorded[x] = float((rec * h).sum())
        check.fd_autograd[x] = float((ref * h).sum())
    return check


def check_all(
    roles: BackwardRoles,
    stepper: BackwardStepper,
    keep: Callable[[BoundSymbol], bool] = lambda b: True,
) -> GradientReport:
    """`gradcheck_op` for every top-level forward op that has a backward (and `keep` accepts)."""
    checks = []
    has_rule = {id(a.top) for a in roles.applications if a.contributions}
    for i, b in enumerate(roles.result.forward.bound_symbols):
        if id(b) in has_rule and keep(b):
            checks.append(gradcheck_op(roles, stepper, b, protocol.op_id("forward", i)))
    return GradientReport(checks)


def forward_op(roles: BackwardRoles, target: Any) -> tuple[BoundSymbol, str]:
    """The top-level forward op (and its id) that `target` names: itself, "forward:3",
    a subsymbol of it, or a backward bound symbol / "backward:12" derived from it."""
    tops = roles.result.forward.bound_symbols
    if isinstance(target, str):
        parsed = protocol.parse_op_id(target)
        if parsed is None or parsed[0] not in ("forward", "backward"):
            raise ValueError(f"{target!r} is not an op id like 'forward:3' or 'backward:12'")
        kind, (i, *_) = parsed  # a subsymbol's id names its top-level op
        ops = tops if kind == "forward" else roles.bsyms
        if not 0 <= i < len(ops):
            raise IndexError(f"{target!r}: the {kind} trace has {len(ops)} ops")
        target = ops[i]
    if not isinstance(target, BoundSymbol):
        raise TypeError(f"gradcheck takes a bound symbol or an op id, not {type(target).__name__}")
    for i, top in enumerate(tops):
        if top is target or top is target.fwd_bsym or any(b is target for b in top.walk()):
            return top, protocol.op_id("forward", i)
    raise ValueError(f"{target!r} belongs to no forward op of this program")
