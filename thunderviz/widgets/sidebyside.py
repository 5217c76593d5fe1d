"""The side-by-side view's document: two runs, or several ranks, in one view document.

    show(a, b) / export_html((a, b), path)          # two runs: Sessions, .tvz paths, documents
    show([p0, p1, ...]) / export_html([...], path)  # the ranks of one distributed run

A comparison document is side 0's view document with an optional `comparison` field
(docs/view-format.md): the other sides' documents, the matched ops (one op id per side) with
their relative differences (runs) or per-rank gradient norms (ranks), and the first
divergences. A reader that does not know the field shows side 0 alone; the viewer's
`mountViewer` (frontend/src/sidebyside.js) shows every side next to the others.

What matches: for two runs, `thunderviz.compare`'s pairs of top-level forward ops, and for
each pair the backward (and augmented forward) ops their grad rules produced, in order. For
ranks, the top-level ops at the same position of each trace, as
`thunderviz.distributed.compare` walks them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from thunderviz.debug.compare import Comparison, compare
from thunderviz.debug.session import Session
from thunderviz.debug.stats import json_number
from thunderviz.distributed.compare import compare as compare_ranks
from thunderviz.distributed.compare import side_by_side
from thunderviz.viz.tvz import load, validate

__all__ = ["comparison_document", "ranks_document", "is_side_by_side", "side_by_side_document"]


def is_side_by_side(obj: Any) -> bool:
    """A tuple of two runs, or a list of two or more ranks (not a document or a path)."""
    return (
        isinstance(obj, (tuple, list))
        and len(obj) >= 2
        and all(isinstance(x, (Session, Mapping, str, os.PathLike)) for x in obj)
    )


def side_by_side_document(obj: Sequence[Any], **options: Any) -> dict[str, Any]:
    """A tuple `(a, b)`: two runs (`comparison_document`); a list: ranks (`ranks_document`)."""
    if isinstance(obj, tuple):
        if len(obj) != 2:
            raise ValueError(
                f"a comparison of runs takes two of them (a, b), got {len(obj)}; "
                "pass a list for the ranks of a distributed run"
            )
        return comparison_document(obj[0], obj[1], **options)
    return ranks_document(obj, **options)


def _document(side: Any) -> dict[str, Any]:
    if isinstance(side, Session):
        return side.document()
    if isinstance(side, Mapping):
        return validate(dict(side))
    return load(Path(side))


def _derived_matches(
    doc_a: Mapping[str, Any], doc_b: Mapping[str, Any], op_a: str, op_b: str, grad: Any
) -> list[dict[str, Any]]:
    """The ops each side's grad rules made for a matched forward pair, paired in order."""

    def made_by(doc: Mapping[str, Any], fwd: str) -> dict[tuple[str, int], list[str]]:
        groups: dict[tuple[str, int], list[str]] = {}
        for kind, trace in doc["traces"].items():
            if kind == "forward":
                continue
            for op in trace["ops"]:
                if op.get("fwd_op") == fwd:
                    groups.setdefault((kind, op.get("level", 0)), []).append(op["id"])
        return groups

    made_a, made_b = made_by(doc_a, op_a), made_by(doc_b, op_b)
    return [
        {"ops": [x, y], "grad": grad}
        for key, ids in made_a.items()
        for x, y in zip(ids, made_b.get(key, ()), strict=False)
    ]


def _source_json(source: tuple[str, int, str] | None) -> dict[str, Any] | None:
    return None if source is None else {"file": source[0], "line": source[1], "code": source[2]}


def comparison_document(
    a: Any, b: Any, *, rtol: float = 1e-3, labels: Sequence[str] = ("a", "b")
) -> dict[str, Any]:
    """The side-by-side document of two runs (Sessions, .tvz paths or view documents), from
    `thunderviz.compare(a, b, rtol=rtol)`."""
    result: Comparison = compare(a, b, rtol=rtol)  # records a Session's backward first
    doc_a, doc_b = _document(a), _document(b)
    matches: list[dict[str, Any]] = []
    for row in result.rows:
        matches.append(
            {
                "ops": [row.op_a, row.op_b],
                "forward": json_number(row.forward),
                "grad": json_number(row.grad),
                **({"note": row.note} if row.note else {}),
            }
        )
        matches += _derived_matches(doc_a, doc_b, row.op_a, row.op_b, json_number(row.grad))
    divergences = []
    for what, row, value in (
        ("first forward difference", result.first_forward, "forward"),
        ("first gradient difference", result.first_grad, "grad"),
    ):
        if row is not None:
            divergences.append(
                {
                    "what": what,
                    "ops": [row.op_a, row.op_b],
                    "op": row.op,
                    "module": row.module,
                    "source": _source_json(row.source),
                    "value": json_number(getattr(row, value)),
                    "detail": row.note or f"relative difference above {rtol:g}",
                }
            )
    doc_a["comparison"] = {
        "kind": "runs",
        "labels": list(labels),
        "documents": [doc_b],
        "rtol": rtol,
        "measure": result.measure,
        "matches": matches,
        "divergences": divergences,
    }
    return validate(doc_a)


def ranks_document(
    paths: Sequence[Any], *, replicated: Sequence[str] = (), rtol: float = 1e-5, atol: float = 1e-6
) -> dict[str, Any]:
    """The side-by-side document of a distributed run's ranks (each rank's `.tvz` file or
    document, in rank order): per-rank norms of every op's first output (in the backward:
    gradient norms), collectives marked, and `thunderviz.distributed.compare`'s first desync."""
    docs = [_document(p) for p in paths]
    if len(docs) < 2:
        raise ValueError("a side-by-side view of ranks needs the files of at least two ranks")
    matches = []
    for kind in ("forward", "backward"):
        if not all(kind in d["traces"] for d in docs):
            continue
        rows = {row.op_id: row for row in reversed(side_by_side(docs, kind))}  # first output
        tops = [[op for op in d["traces"][kind]["ops"] if op.get("parent") is None] for d in docs]
        for ops in zip(*tops, strict=False):
            match: dict[str, Any] = {"ops": [op["id"] for op in ops]}
            row = rows.get(ops[0]["id"])
            if row is not None:
                match["norms"] = [json_number(n) for n in row.norms]
                match["collective"] = row.collective
            matches.append(match)
    divergences = []
    found = compare_ranks(docs, replicated=replicated, rtol=rtol, atol=atol)
    if found is not None:
        at = next((m["ops"] for m in matches if m["ops"][0] == found.op_id), [found.op_id])
        op = next(
            (
                o
                for o in docs[0]["traces"].get(found.trace, {}).get("ops", ())
                if o["id"] == found.op_id
            ),
            {},
        )
        divergences.append(
            {
                "what": "first desync",
                "ops": at,
                "op": found.op,
                "module": found.module,
                "source": op.get("source"),
                "value": json_number(found.max_difference),
                "ranks": list(found.ranks),
                "detail": f"{found.reason} ({found.tensor}, {found.statistic})",
            }
        )
    side0, *others = docs
    side0["comparison"] = {
        "kind": "ranks",
        "labels": [f"rank {i}" for i in range(len(docs))],
        "documents": others,
        "matches": matches,
        "divergences": divergences,
    }
    return validate(side0)
