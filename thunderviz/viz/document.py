"""The view document (docs/view-format.md): everything the viewer draws, as JSON-safe data.

`build_document(session)` (or a Trace, an AutodiffResult, or {kind: Trace}) turns traces,
saved tensors, recorded backward steps, gradient flow and transform runs into plain dicts,
lists, strings and numbers. Every string in it comes from the user's program (module names,
source lines, printed arguments) and stays a string: the document is data, never markup.

This module reads a session through its attributes only (forward, result, steps, ...), so
the viz layer does not depend on the debugger that produces the session.
"""

from __future__ import annotations

import linecache
import math
import sys
from collections.abc import Mapping, Sequence
from importlib import metadata
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.core.codegen import bsym_statement, codeval
from thunderviz.core.proxies import NumberProxy, Proxy, TensorProxy
from thunderviz.core.quoting import comment
from thunderviz.core.symbol import BoundSymbol, SourceLocation, SymbolKind
from thunderviz.core.trace import Trace, TraceTag
from thunderviz.viz import protocol

__all__ = ["FORMAT", "VERSION", "build_document", "trace_view", "trace_kind", "json_safe"]

FORMAT = "thunderviz"
VERSION = 1
SOURCE_CONTEXT = 3  # lines of source shown either side of the user's line
_KIND_ORDER = ("forward", "augmented_forward", "backward")


def _created_by() -> str:
    package = sys.modules.get("thunderviz")
    version = getattr(package, "__version__", None)
    if version is None:
        try:
            version = metadata.version("thunderviz")
        except metadata.PackageNotFoundError:
            version = "unknown"
    return f"thunderviz {version}"


def trace_kind(trace: Trace) -> str:
    if TraceTag.BACKWARD in trace.tags:
        return "backward"
    if TraceTag.AUGMENTED_FORWARD in trace.tags:
        return "augmented_forward"
    if TraceTag.FORWARD in trace.tags:
        return "forward"
    return "other"


def json_safe(x: Any) -> Any:
    """Numbers as the document writes them: NaN/±Inf become strings; ints stay ints."""
    if isinstance(x, float):
        if math.isnan(x):
            return "nan"
        if math.isinf(x):
            return "inf" if x > 0 else "-inf"
    return x


# --- source -------------------------------------------------------------------------------
class _SourceCache:
    def __init__(self) -> None:
        self._cache: dict[tuple[str, int, str], dict[str, Any]] = {}

    def get(self, src: SourceLocation | None) -> dict[str, Any] | None:
        if src is None:
            return None
        key = (src.filename, src.lineno, src.code)
        found = self._cache.get(key)
        if found is None:
            lines = linecache.getlines(src.filename)
            lo = max(1, src.lineno - SOURCE_CONTEXT)
            hi = min(len(lines), src.lineno + SOURCE_CONTEXT)
            context = [[n, lines[n - 1].rstrip("\r\n")] for n in range(lo, hi + 1)]
            if not context:
                context = [[src.lineno, src.code]]
            found = {
                "file": src.filename,
                "line": src.lineno,
                "code": src.code,
                "function": src.function,
                "context": context,
            }
            self._cache[key] = found
        return found


# --- one trace --------------------------------------------------------------------------
def _op_name(bsym: BoundSymbol) -> str:
    sym = bsym.sym
    return sym.name if sym.kind is SymbolKind.FUNCTION else sym.id


def _args_repr(bsym: BoundSymbol) -> str:
    try:
        parts = [codeval(a) for a in bsym.args]
        parts += [f"{k}={codeval(v)}" for k, v in bsym.kwargs.items()]
    except TypeError:
        return repr((bsym.args, bsym.kwargs))
    return ", ".join(parts)


def _names(values: Any) -> list[Proxy]:
    """The proxies among the leaves of an args/output structure, each once (tensors and
    non-number proxies: numbers are not graph edges)."""
    out: list[Proxy] = []
    seen: set[str] = set()
    for x in pytree.tree_leaves(values):
        if isinstance(x, Proxy) and not isinstance(x, NumberProxy) and x.name not in seen:
            seen.add(x.name)
            out.append(x)
    return out


def _line_ranges(trace: Trace, depth: int) -> tuple[str, dict[tuple[int, ...], list[int]]]:
    """The printed text and, per index path, the 1-based [first, last] line that shows it.
    A top-level op's "# file.py:12: code" section comment is not part of its range (it
    heads every op that came from that line)."""
    lines = trace.printed_lines(depth)
    ranges: dict[tuple[int, ...], list[int]] = {}
    bsyms = trace.bound_symbols
    for n, line in enumerate(lines, start=1):
        path = line.path
        if path is None:
            continue
        if len(path) == 1:
            src = bsyms[path[0]].source
            if src is not None and line.text.lstrip().startswith(comment(f"{src.short()}: \t")):
                continue
        r = ranges.get(path)
        if r is None:
            ranges[path] = [n, n]
        else:
            r[1] = n
    return "\n".join(line.text for line in lines), ranges


class _ViewBuilder:
    def __init__(
        self,
        kind: str,
        trace: Trace,
        *,
        prefix: str | None = None,
        depth: int = 1,
        arg_kinds: Mapping[str, str] | None = None,
        stats: Mapping[str, Any] | None = None,
        forward_index: Mapping[int, int] | None = None,
        sources: _SourceCache | None = None,
    ) -> None:
        self.kind = kind
        self.prefix = prefix or kind
        self.trace = trace
        self.depth = depth
        self.arg_kinds = arg_kinds or {}
        self.stats = stats or {}
        self.forward_index = forward_index  # id(forward bsym, any level) -> top-level index
        self.sources = sources or _SourceCache()
        self.op_ids: dict[int, str] = {}  # id(bsym) -> op id, every level

    def build(self) -> dict[str, Any]:
        trace = self.trace
        python, ranges = _line_ranges(trace, self.depth)
        ops: list[dict[str, Any]] = []
        producer: dict[str, str] = {}
        consumers: dict[str, tuple[int, list[str]]] = {}
        proxies: dict[str, Proxy] = {}

        def visit(bsym: BoundSymbol, path: tuple[int, ...], parent: dict[str, Any] | None) -> None:
            op_id = protocol.op_id(self.prefix, *path)
            self.op_ids[id(bsym)] = op_id
            level = len(path) - 1
            ins = _names((bsym.args, bsym.kwargs))
            outs = _names(bsym.output)
            for p in ins:
                proxies.setdefault(p.name, p)
                known = consumers.get(p.name)
                if known is None or level < known[0]:
                    consumers[p.name] = (level, [op_id])
                elif level == known[0]:
                    known[1].append(op_id)
            for p in outs:
                proxies.setdefault(p.name, p)
                producer.setdefault(p.name, op_id)
            r = ranges.get(path)
            fwd_op = None
            if self.forward_index is not None:
                target = bsym.fwd_bsym if bsym.fwd_bsym is not None else bsym
                i = self.forward_index.get(id(target))
                if i is None and bsym.fwd_bsym is not None:
                    i = self.forward_index.get(id(bsym))
                if i is not None:
                    fwd_op = protocol.op_id("forward", i)
                elif parent is not None:
                    fwd_op = parent["fwd_op"]
            op = {
                "id": op_id,
                "parent": parent["id"] if parent is not None else None,
                "level": level,
                "name": _op_name(bsym),
                "label": bsym.sym.label,
                "sym_id": bsym.sym.id,
                "is_prim": bool(bsym.sym.is_prim),
                "module_path": bsym.module_path or "",
                "inputs": [p.name for p in ins],
                "outputs": [p.name for p in outs],
                "args_repr": _args_repr(bsym),
                "line": r[0] if r else None,
                "line_end": r[1] if r else None,
                "source": self.sources.get(bsym.source),
                "tags": sorted(t.value for t in bsym.tags),
                "fwd_op": fwd_op,
            }
            ops.append(op)
            for j, sub in enumerate(bsym.subsymbols):
                visit(sub, (*path, j), op)

        for i, bsym in enumerate(trace.bound_symbols):
            visit(bsym, (i,), None)

        inputs = [p for p in trace.flat_args if isinstance(p, Proxy)]
        for p in inputs:
            proxies.setdefault(p.name, p)
        output_names = [p.name for p in trace.flat_outputs]
        for p in trace.flat_outputs:
            proxies.setdefault(p.name, p)
        input_names = {p.name for p in inputs} | set(trace.constants)
        outputs = set(output_names)
        tensors: dict[str, Any] = {}
        for name, p in proxies.items():
            if isinstance(p, NumberProxy):
                kind = "number"
            elif name in input_names:
                kind = self.arg_kinds.get(name, "input")
            elif name in outputs:
                kind = "output"
            else:
                kind = "intermediate"
            tensors[name] = self._tensor(p, kind, producer.get(name), consumers.get(name))
        for name, t in trace.constants.items():
            captured = (
                TensorProxy.like(name, t, requires_grad=False)
                if isinstance(t, torch.Tensor)
                else Proxy(name)
            )
            entry = self._tensor(captured, "buffer", producer.get(name), consumers.get(name))
            entry["constant"] = True
            tensors[name] = entry
        return {
            "kind": self.kind if self.kind in _KIND_ORDER else "other",
            "name": trace.name,
            "provenance": "\n".join(str(p) for p in trace.provenance),
            "python": python,
            "inputs": [p.name for p in inputs] + [n for n in trace.constants],
            "outputs": output_names,
            "ops": ops,
            "tensors": tensors,
        }

    def _tensor(
        self, p: Proxy, kind: str, producer: str | None, consumers: tuple[int, list[str]] | None
    ) -> dict[str, Any]:
        if isinstance(p, TensorProxy):
            entry: dict[str, Any] = {
                "shape": list(p.shape),
                "dtype": str(p.dtype).removeprefix("torch."),
                "device": str(p.device),
                "requires_grad": bool(p.requires_grad),
            }
        elif isinstance(p, NumberProxy):
            entry = {
                "shape": [],
                "dtype": type(p.value).__name__,
                "device": None,
                "requires_grad": False,
            }
        else:  # a non-tensor value (the backward's saved_for_backward / cotangents tuples)
            entry = {"shape": None, "dtype": None, "device": None, "requires_grad": False}
        st = self.stats.get(p.name)
        entry.update(
            kind=kind,
            producer=producer,
            consumers=list(consumers[1]) if consumers else [],
            stats=st.to_json() if hasattr(st, "to_json") else st,
        )
        if isinstance(p, NumberProxy):
            v = p.value
            entry["value"] = json_safe(v) if isinstance(v, (int, float, bool)) else None
        return entry


def trace_view(trace: Trace, kind: str | None = None, **options: Any) -> dict[str, Any]:
    """The TraceView of one trace (see docs/view-format.md)."""
    return _ViewBuilder(kind or trace_kind(trace), trace, **options).build()


# --- the whole document -----------------------------------------------------------------
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
    depth = parts["depth"] if depth is None else depth
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
    sources = _SourceCache()
    traces: dict[str, Trace] = parts["traces"]
    forward = traces.get("forward")
    findex = _forward_index(forward) if forward is not None else None

    builders: dict[str, _ViewBuilder] = {}
    views: dict[str, Any] = {}
    for kind, tr in sorted(traces.items(), key=lambda kv: _order(kv[0])):
        stats = bstats if kind == "backward" else fstats
        b = _ViewBuilder(
            kind,
            tr,
            depth=depth,
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
            depth,
            trace_before_max_ops,
            step_text_budget,
            sources,
        )
        for k, run in enumerate(runs)
    ]
    return doc


def _order(kind: str) -> int:
    return _KIND_ORDER.index(kind) if kind in _KIND_ORDER else len(_KIND_ORDER)


def _saved(result: Any, builders: dict[str, _ViewBuilder]) -> list[dict[str, Any]]:
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


def _stats_json(st: Any) -> Any:
    return st.to_json() if hasattr(st, "to_json") else st


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
    builders: dict[str, _ViewBuilder],
    result: Any,
    vjp_run: Any,
    depth: int,
    max_ops: int,
    budget: int,
    sources: _SourceCache,
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
        before_view = _ViewBuilder(
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
