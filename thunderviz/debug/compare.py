"""Comparing two runs of the same program: where do their values and gradients part?

`compare(a, b)` takes two Sessions (or `.tvz` files / view documents) of one program —
fp32 and bf16, before and after a change, two seeds, two devices — and matches their
top-level forward ops by (module path, op) in order, with a diff (longest matching blocks),
so an inserted cast or an added or removed op shifts nothing else. Casts are left out of
the matching altogether.

What is compared:
- Sessions: the values. Each matched op's outputs (the forward) and their gradients (the
  backward's accumulated cotangents), as the relative difference ||b - a|| / ||a|| in
  float64 (`a` is the reference), and every forward argument's final gradient.
- Documents and .tvz files keep statistics, not values: the relative difference of the
  norms, | ||b|| - ||a|| | / ||a||, which never exceeds the true relative difference (so
  anything it flags differs at least that much; it can miss a change that keeps the norm).
"""

from __future__ import annotations

import difflib
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import torch

from thunderviz.core.symbol import BoundSymbol
from thunderviz.debug.session import Session
from thunderviz.debug.stats import json_number
from thunderviz.debug.stepper import BackwardStepper
from thunderviz.viz import protocol
from thunderviz.viz.tvz import load

__all__ = ["compare", "Comparison", "OpDifference", "CAST_OPS"]

# left out of the matching: a run in another dtype inserts them without changing the program
CAST_OPS = frozenset(
    {
        "torch.Tensor.to",
        "torch.Tensor.float",
        "torch.Tensor.double",
        "torch.Tensor.half",
        "torch.Tensor.bfloat16",
        "torch.Tensor.type",
        "torch.Tensor.type_as",
        "aten._to_copy.default",
        "aten.to.dtype",
        "prims.convert_element_type.default",
    }
)


@dataclass
class _Op:
    """One top-level forward op of one side, and how to get its values."""

    op_id: str
    sym: str
    module: str
    source: tuple[str, int, str] | None  # file, line, code
    outputs: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str]:
        return self.module, self.sym


@dataclass
class OpDifference:
    """One row of the table: a matched pair of ops and their relative differences (None
    where there is nothing to compare: no float output, no gradient, shapes differ)."""

    op_a: str
    op_b: str
    op: str
    module: str
    source: tuple[str, int, str] | None
    forward: float | None
    grad: float | None
    note: str = ""

    def where(self) -> str:
        line = f" at {os.path.basename(self.source[0])}:{self.source[1]}" if self.source else ""
        return f"{self.op} [{self.module or '(root)'}]{line}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "op_a": self.op_a,
            "op_b": self.op_b,
            "op": self.op,
            "module": self.module,
            "forward": json_number(self.forward),
            "grad": json_number(self.grad),
        }
        if self.source is not None:
            out["source"] = {"file": self.source[0], "line": self.source[1], "code": self.source[2]}
        if self.note:
            out["note"] = self.note
        return out


@dataclass
class Comparison:
    """`rows`: matched ops in a's forward order; `first_forward`: the first whose outputs
    differ by more than `rtol`; `first_grad`: the first, in the order the backward runs,
    whose outputs' gradients do; `grads`: per forward argument, its final gradient's
    difference; `only_in_a` / `only_in_b`: unmatched ops; `measure`: "values" or "norms"."""

    rows: list[OpDifference]
    grads: dict[str, float | None]
    only_in_a: list[str]
    only_in_b: list[str]
    rtol: float
    measure: str
    first_forward: OpDifference | None = field(init=False)
    first_grad: OpDifference | None = field(init=False)

    def __post_init__(self) -> None:
        def above(x: float | None) -> bool:
            return x is not None and (math.isnan(x) or x > self.rtol)

        self.first_forward = next((r for r in self.rows if above(r.forward)), None)
        self.first_grad = next((r for r in reversed(self.rows) if above(r.grad)), None)

    @property
    def same(self) -> bool:
        return (
            self.first_forward is None
            and self.first_grad is None
            and not self.only_in_a
            and not self.only_in_b
            and all(v is None or v <= self.rtol for v in self.grads.values())
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "rtol": self.rtol,
            "measure": self.measure,
            "rows": [r.to_json() for r in self.rows],
            "grads": {k: json_number(v) for k, v in self.grads.items()},
            "only_in_a": self.only_in_a,
            "only_in_b": self.only_in_b,
            "first_forward": self.first_forward.op_a if self.first_forward else None,
            "first_grad": self.first_grad.op_a if self.first_grad else None,
        }

    def table(self, only_above: bool = False) -> str:
        """The per-op table as text: op ids, op, module, forward and gradient differences
        (`only_above`: just the rows above `rtol`)."""

        def cell(x: float | None) -> str:
            return "-" if x is None else f"{x:.3g}"

        rows = [
            r
            for r in self.rows
            if not only_above
            or any(v is not None and (math.isnan(v) or v > self.rtol) for v in (r.forward, r.grad))
        ]
        lines = [f"{'a':<12} {'b':<12} {'forward':>9} {'grad':>9}  op [module]"]
        lines += [
            f"{r.op_a:<12} {r.op_b:<12} {cell(r.forward):>9} {cell(r.grad):>9}  {r.where()}"
            + (f"  ({r.note})" if r.note else "")
            for r in rows
        ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        if self.same:
            return f"<Comparison: no difference above {self.rtol:g} ({self.measure})>"
        lines = [f"<Comparison ({self.measure}, rtol {self.rtol:g})"]
        if self.first_forward:
            lines.append(
                f"  first forward difference: {self.first_forward.where()} "
                f"({self.first_forward.forward:.3g})"
            )
        if self.first_grad:
            lines.append(
                f"  first gradient difference: {self.first_grad.where()} "
                f"({self.first_grad.grad:.3g})"
            )
        if self.only_in_a or self.only_in_b:
            lines.append(f"  only in a: {self.only_in_a}; only in b: {self.only_in_b}")
        return "\n".join(lines) + ">"


class _Side:
    """Ops and values of one run: a Session's real values, or a document's statistics."""

    def __init__(self, source: Any) -> None:
        doc = load(source) if isinstance(source, (str, os.PathLike)) else source
        self.doc: Mapping[str, Any] | None = doc if isinstance(doc, Mapping) else None
        self.stepper: BackwardStepper | None = None
        if self.doc is not None:
            forward = self.doc["traces"]["forward"]
            self.ops = [
                _Op(
                    o["id"],
                    o.get("sym_id") or o["name"],
                    o.get("module_path") or "",
                    _doc_source(o.get("source")),
                    tuple(o.get("outputs") or ()),
                )
                for o in forward["ops"]
                if o.get("parent") is None
            ]
            self.tensors = forward.get("tensors", {})
            if not any(t.get("stats") for t in self.tensors.values()):
                raise ValueError(
                    "this document has no statistics to compare: save the Session "
                    "after `record_backward()` (or compare the Sessions themselves)"
                )
            self.flow = self.doc.get("grad_flow", {}) or {}
            self.args = [
                name for name, t in self.tensors.items() if t.get("kind") in ("input", "param")
            ]
            return
        if not (hasattr(source, "forward") and hasattr(source, "record_backward")):
            raise TypeError(
                f"compare takes Sessions, .tvz paths or view documents, not {type(source).__name__}"
            )
        session = cast(Session, source)  # a Session, checked by attribute above
        if session.result is None or session.fake:
            raise ValueError("compare needs Sessions with real values and a backward")
        self.stepper = session.recording if session.recording is not None else None
        if self.stepper is None:
            session.record_backward()
            self.stepper = session.recording
        self.result = session.result
        self.ops = [
            _Op(
                protocol.op_id("forward", i),
                b.sym.id,
                b.module_path,
                _bsym_source(b),
                tuple(p.name for p in b.flat_proxy_outs),
            )
            for i, b in enumerate(session.forward.bound_symbols)
        ]
        self.args = [p.name for p in session.forward.flat_args]

    def value(self, name: str) -> Any:
        return (
            self.stepper.forward_values.get(name)
            if self.stepper is not None
            else self.tensors.get(name)
        )

    def grad(self, name: str) -> Any:
        if self.stepper is None:
            return self.flow.get(name)
        if name in self.result.cotangent_of and self.stepper.has_value(
            self.result.cotangent_of[name]
        ):
            return self.stepper.value(self.result.cotangent_of[name])
        return None


def _doc_source(src: Mapping[str, Any] | None) -> tuple[str, int, str] | None:
    return (src.get("file", ""), int(src.get("line", 0)), src.get("code", "")) if src else None


def _bsym_source(b: BoundSymbol) -> tuple[str, int, str] | None:
    return (b.source.filename, b.source.lineno, b.source.code) if b.source is not None else None


def _relative(a: Any, b: Any) -> float | None:
    """||b - a|| / ||a|| for tensors; for statistics (dicts with a "norm"), the norms'."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if not (a.is_floating_point() and b.is_floating_point()) or a.shape != b.shape:
            return None
        a64, b64 = a.detach().to("cpu", torch.float64), b.detach().to("cpu", torch.float64)
        return _ratio(
            float(torch.linalg.vector_norm(b64 - a64)), float(torch.linalg.vector_norm(a64))
        )
    na, nb = _norm_of(a), _norm_of(b)
    if na is None or nb is None:
        return None
    return _ratio(abs(nb - na), abs(na))


def _norm_of(x: Any) -> float | None:
    """The norm in a document's statistics: a tensor's `{"stats": {...}}` or a grad-flow
    entry's `{"norm": ...}`."""
    if not isinstance(x, Mapping):
        return None
    if "stats" in x:
        x = x.get("stats") or {}
    return _number(x.get("norm"))


def _number(x: Any) -> float | None:
    if isinstance(x, str):
        return {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}.get(x)
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _ratio(diff: float, scale: float) -> float:
    if math.isnan(diff) or math.isnan(scale):
        return math.nan
    if diff == 0:
        return 0.0
    return diff / scale if scale > 0 else math.inf


def _worst(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    if any(math.isnan(v) for v in known):
        return math.nan
    return max(known, default=None)


def _pairs(a: list[_Op], b: list[_Op]) -> tuple[list[tuple[_Op, _Op, str]], list[_Op], list[_Op]]:
    """Matched ops (with a note for a changed op), and the ops only a or only b has."""
    ka = [op.key for op in a]
    kb = [op.key for op in b]
    pairs: list[tuple[_Op, _Op, str]] = []
    only_a: list[_Op] = []
    only_b: list[_Op] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, ka, kb, autojunk=False).get_opcodes():
        if tag == "equal":
            pairs += [(a[i1 + k], b[j1 + k], "") for k in range(i2 - i1)]
        elif (
            tag == "replace"
            and i2 - i1 == j2 - j1
            and all(a[i1 + k].module == b[j1 + k].module for k in range(i2 - i1))
        ):
            # the same place in the same module with another op: a changed op
            pairs += [
                (a[i1 + k], b[j1 + k], f"op changed: {a[i1 + k].sym} -> {b[j1 + k].sym}")
                for k in range(i2 - i1)
            ]
        else:
            only_a += a[i1:i2]
            only_b += b[j1:j2]
    return pairs, only_a, only_b


def compare(a: Any, b: Any, *, rtol: float = 1e-3) -> Comparison:
    """Compare two runs of one program (Sessions, .tvz paths or view documents); see the
    module docstring for what is compared. A Session without a recorded backward records it
    (`Session.record_backward`)."""
    side_a, side_b = _Side(a), _Side(b)
    measure = "values" if side_a.stepper is not None and side_b.stepper is not None else "norms"
    ops_a = [op for op in side_a.ops if op.sym not in CAST_OPS]
    ops_b = [op for op in side_b.ops if op.sym not in CAST_OPS]
    pairs, only_a, only_b = _pairs(ops_a, ops_b)
    rows = []
    for oa, ob, note in pairs:
        fwd: list[float | None] = []
        grad: list[float | None] = []
        for na, nb in zip(oa.outputs, ob.outputs, strict=False):
            fwd.append(
                _relative(
                    _as_stats(side_a, side_a.value(na), measure),
                    _as_stats(side_b, side_b.value(nb), measure),
                )
            )
            grad.append(
                _relative(
                    _as_stats(side_a, side_a.grad(na), measure),
                    _as_stats(side_b, side_b.grad(nb), measure),
                )
            )
        rows.append(
            OpDifference(
                oa.op_id, ob.op_id, oa.sym, oa.module, oa.source, _worst(fwd), _worst(grad), note
            )
        )
    grads = {
        name: _relative(
            _as_stats(side_a, side_a.grad(name), measure),
            _as_stats(side_b, side_b.grad(name), measure),
        )
        for name in side_a.args
        if name in side_b.args
    }
    return Comparison(
        rows,
        grads,
        [f"{o.op_id} {o.sym}" for o in only_a],
        [f"{o.op_id} {o.sym}" for o in only_b],
        rtol,
        measure,
    )


def _as_stats(side: _Side, value: Any, measure: str) -> Any:
    """A Session's tensor stands in as its norm when the other side only has statistics."""
    if measure == "norms" and isinstance(value, torch.Tensor):
        return {
            "norm": float(torch.linalg.vector_norm(value.detach().double()))
            if value.is_floating_point()
            else None
        }
    return value
