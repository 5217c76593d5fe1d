"""The desync finder: the first bound symbol where ranks disagree where they should agree.

Each rank saves its session (`thunderviz.save(session, f"run.rank{rank}.tvz")` after
`session.record_backward()`), with statistics of every value its forward and backward
computed. `compare(paths)` walks the ranks' traces side by side, in execution order
(forward, then backward), and knows which values must be the same on every rank:

* the result of a collective that replicates (all_reduce, all_gather, broadcast), once
  waited on: every rank receives the same tensor;
* anything computed only from values that agree (a loss of replicated activations, the
  gradient of a replicated parameter from replicated cotangents): the same op on the same
  values gives the same result;
* the inputs the caller names as replicated (`replicated=`: e.g. DDP's parameters).

Values that may differ (each rank's data, a shard of a tensor-parallel weight, the output
of reduce_scatter or all_to_all) are followed but never reported. The first value that
should agree and does not is returned as a `Divergence`: its op, module, source line, the
ranks, and the largest difference between their statistics (min, max, mean, std, norm;
the saved files hold statistics and histograms, not whole tensors). Ranks that ran
different ops at the same place (a collective one rank skipped) are reported there.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from thunderviz.autodiff.saved import UNPACK
from thunderviz.prims.collectives import ALL_GATHER, ALL_REDUCE, BROADCAST, WAIT
from thunderviz.viz import load

__all__ = ["Divergence", "RankRow", "compare", "format_side_by_side", "side_by_side"]

_REPLICATING = {ALL_REDUCE.id, ALL_GATHER.id, BROADCAST.id}
_STAT_FIELDS = ("min", "max", "mean", "std", "norm")
_TRACE_ORDER = ("forward", "backward")


@dataclass(frozen=True)
class Divergence:
    """Where the ranks first disagree. `ranks` is the pair compared (rank 0 and the first
    rank that differs); `max_difference` the largest difference of their statistics, and
    `statistic` which one; `stats` each rank's statistics of `tensor`."""

    trace: str
    op_id: str
    op: str
    module: str
    source: str
    line: int | None
    tensor: str
    ranks: tuple[int, int]
    max_difference: float
    statistic: str
    reason: str
    stats: dict[int, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        where = f"{self.source}" + (f" [{self.module}]" if self.module else "")
        return (
            f"ranks {self.ranks[0]} and {self.ranks[1]} disagree at {self.op} "
            f"({self.trace} {self.op_id}) in {self.tensor}, at {where}: {self.reason}; "
            f"max difference {self.max_difference:.6g} ({self.statistic})"
        )


def _number(x: Any) -> float:
    if isinstance(x, str):  # "nan", "inf", "-inf" in the view document
        return float(x)
    return float(x) if x is not None else math.nan


def _difference(a: Any, b: Any, rtol: float, atol: float) -> tuple[float, str] | None:
    """None when two values' statistics agree; else (largest difference, which statistic)."""
    if a is None or b is None:
        return None  # not recorded on one side: nothing to say
    worst: tuple[float, str] | None = None
    for name in _STAT_FIELDS:
        x, y = _number(a.get(name)), _number(b.get(name))
        if math.isnan(x) and math.isnan(y) or x == y:
            continue
        diff = abs(x - y)
        if math.isnan(diff) or diff > atol + rtol * max(abs(x), abs(y)):
            if worst is None or not diff <= worst[0]:
                worst = (diff, name)
    for name in ("numel", "nan", "inf"):
        if a.get(name) != b.get(name):
            diff = abs(_number(a.get(name)) - _number(b.get(name)))
            worst = worst if worst is not None and worst[0] >= diff else (diff, name)
    if worst is None and (a.get("hist") or {}).get("counts") != (b.get("hist") or {}).get("counts"):
        worst = (0.0, "histogram")
    return worst


def _source(op: dict[str, Any]) -> tuple[str, int | None]:
    src = op.get("source") or {}
    if not src:
        return "", None
    return f"{Path(src['file']).name}:{src['line']}: {src.get('code', '')}", src["line"]


def _top_ops(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [op for op in doc["traces"][kind]["ops"] if op.get("parent") is None]


class _Walk:
    def __init__(
        self, docs: Sequence[dict[str, Any]], replicated: set[str], rtol: float, atol: float
    ) -> None:
        self.docs, self.replicated, self.rtol, self.atol = docs, replicated, rtol, atol
        self.agreed: set[str] = set()
        self.replicas: set[str] = set()  # a replicating collective's output, not yet waited on

    def stats(self, kind: str, name: str) -> list[Any]:
        return [doc["traces"][kind]["tensors"].get(name, {}).get("stats") for doc in self.docs]

    def check(
        self, kind: str, op: dict[str, Any], name: str, expected: bool, reason: str
    ) -> Divergence | None:
        """Note whether `name` agrees on all ranks; a Divergence if it should and does not."""
        per_rank = self.stats(kind, name)
        if any(s is None for s in per_rank):
            return None
        worst: tuple[float, str, int] | None = None
        for rank in range(1, len(per_rank)):
            diff = _difference(per_rank[0], per_rank[rank], self.rtol, self.atol)
            if diff is not None and (worst is None or diff[0] > worst[0]):
                worst = (diff[0], diff[1], rank)
        if worst is None:
            self.agreed.add(name)
            return None
        if not expected:
            return None
        source, line = _source(op)
        return Divergence(
            kind,
            op["id"],
            op.get("name", op.get("sym_id", "")),
            op.get("module_path", ""),
            source,
            line,
            name,
            (0, worst[2]),
            worst[0],
            worst[1],
            reason,
            dict(enumerate(per_rank)),
        )

    def inputs(self, kind: str) -> Divergence | None:
        view = self.docs[0]["traces"][kind]
        for name in view.get("inputs", []):
            op = {"id": "input", "name": f"input {name}"}
            found = self.check(
                kind,
                op,
                name,
                name in self.replicated,
                "an input named as replicated differs between ranks",
            )
            if found is not None:
                return found
        return None

    def op(self, kind: str, ops: list[dict[str, Any]]) -> Divergence | None:
        first = ops[0]
        sym = first.get("sym_id")
        other_op = next((r for r, o in enumerate(ops) if o.get("sym_id") != sym), None)
        if other_op is not None:
            return self._different_calls(kind, ops, other_op)
        known = self._known(kind)
        read = [n for n in first.get("inputs", []) if n in known]
        # an object read (a generator the op draws from) has no values to compare
        tensor_inputs = [n for n in read if "object" not in known[n]]
        draws = any(known[n].get("object") == "Generator" for n in read)
        if sym in _REPLICATING:
            self.replicas.update(first.get("outputs", []))
            return None  # read only after its wait: the value is in flight until then
        if sym == WAIT.id:
            expected = all(n in self.replicas or n in self.agreed for n in tensor_inputs)
            reason = "the result of a collective that gives every rank the same tensor"
        elif sym == UNPACK.id:
            expected, reason = False, ""
        else:
            # other collectives (reduce_scatter, all_to_all) give each rank its own part
            expected = all(n in self.agreed for n in tensor_inputs) and not (sym or "").startswith(
                "_c10d_functional."
            )
            reason = (
                "drawn from a generator in another state on each rank, from values that agree"
                if draws
                else "computed from values that agree on every rank"
            )
        # Arguments may differ with the data (a batch size); on agreeing inputs they may not.
        other_args = next(
            (r for r, o in enumerate(ops) if o.get("args_repr") != first.get("args_repr")), None
        )
        if expected and other_args is not None:
            return self._different_calls(kind, ops, other_args)
        for name in first.get("outputs", []):
            found = self.check(kind, first, name, expected, reason)
            if found is not None:
                return found
        return None

    def _different_calls(self, kind: str, ops: list[dict[str, Any]], rank: int) -> Divergence:
        first, other = ops[0], ops[rank]
        return _structural(
            kind,
            first,
            (0, rank),
            "the ranks ran different ops or arguments here: "
            f"{first.get('name')}({first.get('args_repr')}) on rank 0, "
            f"{other.get('name')}({other.get('args_repr')}) on rank {rank}",
        )

    def _known(self, kind: str) -> dict[str, Any]:
        return self.docs[0]["traces"][kind]["tensors"]


def _structural(kind: str, op: dict[str, Any], ranks: tuple[int, int], reason: str) -> Divergence:
    """The ranks disagree on what runs at `op` (not on a value): no statistic, an infinite
    difference."""
    source, line = _source(op)
    return Divergence(
        kind,
        op["id"],
        op.get("name", ""),
        op.get("module_path", ""),
        source,
        line,
        ", ".join(op.get("outputs", [])),
        ranks,
        math.inf,
        "op",
        reason,
    )


def compare(
    paths: Iterable[str | Path | dict[str, Any]],
    *,
    replicated: Iterable[str] = (),
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> Divergence | None:
    """The first place the ranks' saved sessions disagree where they should agree, or None.

    `paths`: each rank's `.tvz` file (or loaded document), in rank order.
    `replicated`: names of trace inputs every rank must hold the same (replicated
    parameters, e.g. `"fc1_weight"`); other inputs may differ (each rank's data, shards).
    """
    docs = [p if isinstance(p, dict) else load(p) for p in paths]
    if len(docs) < 2:
        raise ValueError("compare needs the files of at least two ranks")
    kinds = [k for k in _TRACE_ORDER if all(k in d["traces"] for d in docs)]
    if not any(
        s
        for d in docs
        for t in d["traces"].values()
        for s in (v.get("stats") for v in t["tensors"].values())
    ):
        raise ValueError(
            "these files hold no recorded values: call session.record_backward() "
            "before thunderviz.save(session, path) on each rank"
        )
    walk = _Walk(docs, set(replicated), rtol, atol)
    for kind in kinds:
        found = walk.inputs(kind)
        if found is not None:
            return found
        per_rank = [_top_ops(d, kind) for d in docs]
        for ops in zip(*per_rank, strict=False):
            found = walk.op(kind, list(ops))
            if found is not None:
                return found
        lengths = {len(ops) for ops in per_rank}
        if len(lengths) > 1:
            short = min(range(len(docs)), key=lambda r: len(per_rank[r]))
            longer = max(range(len(docs)), key=lambda r: len(per_rank[r]))
            extra = per_rank[longer][len(per_rank[short])]
            return _structural(
                kind,
                extra,
                (short, longer),
                f"rank {longer} runs more ops than rank {short} from here",
            )
    return None


@dataclass(frozen=True)
class RankRow:
    """One value of one op, side by side: each rank's norm, whether the op communicates."""

    op_id: str
    op: str
    tensor: str
    norms: tuple[float | None, ...]
    collective: bool

    @property
    def spread(self) -> float:
        """The largest minus the smallest norm over the ranks (0 where they agree)."""
        known = [n for n in self.norms if n is not None]
        return max(known) - min(known) if known else 0.0


def side_by_side(
    paths: Iterable[str | Path | dict[str, Any]], trace: str = "backward"
) -> list[RankRow]:
    """Each top-level op's outputs in `trace`, with every rank's norm: what a side-by-side view
    of the ranks shows (the text form; `str()` of each row is one line of a table)."""
    docs = [p if isinstance(p, dict) else load(p) for p in paths]
    rows = []
    for ops in zip(*(_top_ops(d, trace) for d in docs), strict=False):
        first = ops[0]
        sym = first.get("sym_id") or ""
        for name in first.get("outputs", []):
            stats = [d["traces"][trace]["tensors"].get(name, {}).get("stats") for d in docs]
            if all(s is None for s in stats):
                continue
            norms = tuple(None if s is None else _number(s.get("norm")) for s in stats)
            rows.append(
                RankRow(
                    first["id"],
                    first.get("name", sym),
                    name,
                    norms,
                    sym.startswith("_c10d_functional.") and sym != WAIT.id,
                )
            )
    return rows


def format_side_by_side(rows: Sequence[RankRow]) -> str:
    """The rows as a table: op, value, each rank's norm; collectives marked with `<->`."""
    n_ranks = max((len(r.norms) for r in rows), default=0)
    header = f"{'op':<44} {'value':<10} " + " ".join(
        f"{'rank ' + str(i):>12}" for i in range(n_ranks)
    )
    lines = [header]
    for r in rows:
        norms = " ".join(f"{'-' if n is None else f'{n:.6g}':>12}" for n in r.norms)
        mark = "<-> " if r.collective else "    "
        lines.append(f"{mark}{r.op[:40]:<40} {r.tensor:<10} {norms}")
    return "\n".join(lines)
