"""The view document (docs/view-format.md): everything the viewer draws, as JSON-safe data.

`build_document(session)` (or a Trace, an AutodiffResult, or {kind: Trace}) turns traces,
saved tensors, recorded backward steps, gradient flow and transform runs into plain dicts,
lists, strings and numbers. Every string in it comes from the user's program (module names,
source lines, printed arguments) and stays a string: the document is data, never markup.

One trace's view is built by `trace_view.py`. This module reads a session through its
attributes only (forward, result, steps, ...), so the viz layer does not depend on the
debugger that produces the session.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

import torch

from thunderviz.core.codegen import bsym_statement
from thunderviz.core.symbol import BoundSymbol
from thunderviz.core.trace import Trace
from thunderviz.viz import protocol
from thunderviz.viz.trace_view import (
    KIND_ORDER,
    SourceCache,
    ViewBuilder,
    json_safe,
    trace_kind,
    trace_view,
)

__all__ = ["FORMAT", "VERSION", "build_document", "trace_view", "trace_kind", "json_safe"]

FORMAT = "thunderviz"
VERSION = 1


def _created_by() -> str:
    package = sys.modules.get("thunderviz")
    version = getattr(package, "__version__", None)
    if version is None:
        try:
            version = metadata.version("thunderviz")
        except metadata.PackageNotFoundError:
            version = "unknown"
    return f"thunderviz {version}"


def _forward_index(forward: Trace) -> dict[int, int]:
    index: dict[int, int] = {}
    for i, b in enumerate(forward.bound_symbols):
        for s in b.walk():
            index.setdefault(id(s), i)
    return index


def _gather(source: Any) -> dict[str, Any]:
    """What a document is made of, from a session, an autodiff result or traces."""
    parts: dict[str, Any] = {
        "traces": {},
        "result": None,
        "arg_kinds": {},
        "steps": [],
        "grad_flow": {},
        "transforms": [],
        "forward_stats": {},
        "title": None,
        "depth": 1,
        "vjp_run": None,
    }
    if isinstance(source, Trace):
        parts["traces"] = {
            trace_kind(source) if trace_kind(source) != "other" else "forward": source
        }
        parts["title"] = source.name
        return parts
    if isinstance(source, Mapping):
        for k, t in source.items():
            if not isinstance(t, Trace):
                raise TypeError(
                    f"build_document: traces[{k!r}] is a {type(t).__name__}, not a Trace"
                )
        parts["traces"] = dict(source)
        return parts
    if hasattr(source, "augmented_forward") and hasattr(source, "saved_for_backward"):
        parts["result"] = source
        parts["traces"] = {
            "forward": source.forward,
            "augmented_forward": source.augmented_forward,
            "backward": source.backward,
        }
        parts["title"] = source.forward.meta.get("module_class") or source.forward.meta.get(
            "function"
        )
        return parts
    if hasattr(source, "forward") and hasattr(source, "transform_runs"):  # a Session
        result = getattr(source, "result", None)
        parts["traces"] = {"forward": source.forward}
        if result is not None:
            parts["traces"].update(
                augmented_forward=result.augmented_forward, backward=result.backward
            )
        parts.update(
            result=result,
            arg_kinds=dict(getattr(source, "arg_kinds", {}) or {}),
            steps=list(getattr(source, "steps", []) or []),
            transforms=list(source.transform_runs or []),
            forward_stats=dict(getattr(source, "forward_stats", {}) or {}),
            title=getattr(source, "title", None),
            depth=getattr(source, "depth", 1),
            vjp_run=getattr(source, "vjp_run", None),
        )
        gf = getattr(source, "grad_flow", None)
        parts["grad_flow"] = gf() if callable(gf) else (gf or {})
        return parts
    raise TypeError(
        "build_document takes a Session, an AutodiffResult, a Trace or "
        f"{{kind: Trace}}, not {type(source).__name__}"
    )


def build_document(
    source: Any,
    *,
    title: str | None = None,
    depth: int | None = None,
    arg_kinds: Mapping[str, str] | None = None,
    steps: Sequence[Any] | None = None,
    grad_flow: Mapping[str, Any] | None = None,
    transforms: Sequence[Any] | None = None,
    forward_stats: Mapping[str, Any] | None = None,
    trace_before_max_ops: int = 5000,
    step_text_budget: int = 2_000_000,
) -> dict[str, Any]:
    """The view document for `source` (a Session, an AutodiffResult, a Trace, or
    {kind: Trace}). Keyword arguments override what the source provides.

    trace_before_max_ops: a transform run carries its `trace_before` graph when that trace
        has at most this many ops (at all levels).
    step_text_budget: a transform run carries the full text after each step only while the
        total stays within about this many characters; beyond, steps keep their inserted /
        removed lines and `text` is null.
    """
    parts = _gather(source)
    if not parts["traces"]:
        raise ValueError("a view document needs at least one trace")
    print_depth: int = parts["depth"] if depth is None else depth
    kinds = dict(parts["arg_kinds"])
    if arg_kinds:
        kinds.update(arg_kinds)
    fstats = dict(parts["forward_stats"])
    if forward_stats:
        fstats.update(forward_stats)
    steps = list(parts["steps"] if steps is None else steps)
    bstats: dict[str, Any] = {}
    for s in steps:
        outputs = s.outputs if hasattr(s, "outputs") else s.get("outputs", {})
        bstats.update(outputs)
    sources = SourceCache()
    traces: dict[str, Trace] = parts["traces"]
    forward = traces.get("forward")
    findex = _forward_index(forward) if forward is not None else None

    builders: dict[str, ViewBuilder] = {}
    views: dict[str, Any] = {}
    for kind, tr in sorted(traces.items(), key=lambda kv: _order(kv[0])):
        stats = bstats if kind == "backward" else fstats
        b = ViewBuilder(
            kind,
            tr,
            depth=print_depth,
            arg_kinds=kinds if kind != "backward" else {},
            stats=stats,
            forward_index=findex if kind != "forward" else None,
            sources=sources,
        )
        views[kind] = b.build()
        builders[kind] = b

    result = parts["result"]
    doc: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "title": title if title is not None else (parts["title"] or "thunderviz"),
        "created_by": _created_by(),
        "traces": views,
        "saved": _saved(result, builders) if result is not None else [],
        "steps": [_step_json(s) for s in steps],
        "grad_flow": _grad_flow_json(parts["grad_flow"] if grad_flow is None else grad_flow),
        "transforms": [],
    }
    runs = parts["transforms"] if transforms is None else transforms
    doc["transforms"] = [
        _transform_json(
            run,
            k,
            traces,
            views,
            builders,
            result,
            parts["vjp_run"],
            print_depth,
            trace_before_max_ops,
            step_text_budget,
            sources,
        )
        for k, run in enumerate(runs)
    ]
    return doc


def _order(kind: str) -> int:
    return KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)


def _saved(result: Any, builders: dict[str, ViewBuilder]) -> list[dict[str, Any]]:
    aug = builders.get("augmented_forward")
    bwd = builders.get("backward")
    fwd_index = _forward_index(result.forward)
    out = []
    for s in result.saved_for_backward:
        fwd = s.fwd_bsym
        i = fwd_index.get(id(fwd)) if fwd is not None else None
        if i is None and s.producer is not None:
            i = fwd_index.get(id(s.producer))
        dtype = s.dtype
        out.append(
            {
                "name": s.name,
                "shape": list(s.shape),
                "dtype": str(dtype).removeprefix("torch.")
                if isinstance(dtype, torch.dtype)
                else None,
                "bytes": int(s.bytes),
                "producer": aug.op_ids.get(id(s.producer))
                if aug is not None and s.producer is not None
                else None,
                "fwd_op": protocol.op_id("forward", i) if i is not None else None,
                "consumers": [bwd.op_ids[id(c)] for c in s.consumers if id(c) in bwd.op_ids]
                if bwd
                else [],
                "module_path": s.module_path or "",
                "recomputed": bool(s.recomputed),
            }
        )
    return out


def _step_json(step: Any) -> dict[str, Any]:
    if isinstance(step, Mapping):
        return dict(step)
    if hasattr(step, "to_json"):
        return step.to_json()
    raise TypeError(f"a recorded step must be a StepRecord or a dict, not {type(step).__name__}")


def _grad_flow_json(flow: Mapping[str, Any]) -> dict[str, Any]:
    out = {}
    for name, entry in (flow or {}).items():
        if isinstance(entry, Mapping):
            out[str(name)] = {
                "norm": json_safe(entry.get("norm")),
                "status": str(entry.get("status", "ok")),
            }
    return out


def _transform_json(
    run: Any,
    k: int,
    traces: dict[str, Trace],
    views: dict[str, Any],
    builders: dict[str, ViewBuilder],
    result: Any,
    vjp_run: Any,
    depth: int,
    max_ops: int,
    budget: int,
    sources: SourceCache,
) -> dict[str, Any]:
    before: Trace = run.before
    is_vjp = run is vjp_run or (
        result is not None and run.after is None and run.name == "vjp" and before is result.forward
    )
    prefix = next((kind for kind, t in traces.items() if t is before), None)
    if prefix is not None:
        before_view = views[prefix]
    else:
        prefix = f"transform{k}"
        before_view = None
    if is_vjp:
        assert result is not None  # the vjp run is recorded with the result it made
        shell = result.backward.from_trace(bound_symbols=[])
        before_text = shell.python(depth)
        after_text = result.backward.python(depth)

        def text_of(bsyms: list[BoundSymbol]) -> str:
            return shell.from_trace(bound_symbols=list(bsyms)).python(depth)

        estimate = len(run.steps) * len(after_text) // 2
    else:
        before_text = before.python(depth)
        after_text = run.after.python(depth) if run.after is not None else before_text

        def text_of(bsyms: list[BoundSymbol]) -> str:
            return before.from_trace(bound_symbols=list(bsyms)).python(depth)

        estimate = len(run.steps) * max(len(before_text), len(after_text))
    with_text = estimate <= budget
    entry: dict[str, Any] = {"name": str(run.name), "before": before_text, "after": after_text}
    if before_view is None and sum(1 for _ in before.walk()) <= max_ops:
        before_view = ViewBuilder(
            "other", before, prefix=prefix, depth=depth, sources=sources
        ).build()
    if before_view is not None and len(before_view["ops"]) <= max_ops:
        entry["trace_before"] = before_view
    steps = []
    for step in run.steps:
        vi = step.visited_index
        steps.append(
            {
                "index": step.index,
                "visited": protocol.op_id(prefix, vi) if vi is not None else None,
                "visit_type": step.visit_type.value,
                "inserted": [bsym_statement(b) for b in step.inserted],
                "removed": [bsym_statement(b) for b in step.removed],
                "text": text_of(step.bound_symbols) if with_text else None,
            }
        )
    entry["steps"] = steps
    return entry
