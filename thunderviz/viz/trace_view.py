"""The TraceView of one trace (docs/view-format.md): its ops with ids, levels, modules,
printed lines and source, and its tensors with kinds, producers, consumers and statistics.

`document.py` puts the views of a program's traces together into the whole view document.
"""

from __future__ import annotations

import linecache
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.core.codegen import codeval
from thunderviz.core.proxies import NumberProxy, Proxy, TensorProxy
from thunderviz.core.quoting import comment
from thunderviz.core.symbol import BoundSymbol, SourceLocation, SymbolKind
from thunderviz.core.trace import Trace, TraceTag
from thunderviz.viz import protocol

__all__ = ["KIND_ORDER", "SourceCache", "ViewBuilder", "json_safe", "trace_kind", "trace_view"]

SOURCE_CONTEXT = 3  # lines of source shown either side of the user's line
# The trace kinds a document names, in the order it lists them.
KIND_ORDER = ("forward", "augmented_forward", "backward")


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
class SourceCache:
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


class ViewBuilder:
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
        sources: SourceCache | None = None,
    ) -> None:
        self.kind = kind
        self.prefix = prefix or kind
        self.trace = trace
        self.depth = depth
        self.arg_kinds = arg_kinds or {}
        self.stats = stats or {}
        self.forward_index = forward_index  # id(forward bsym, any level) -> top-level index
        self.sources = sources or SourceCache()
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
            if not isinstance(t, torch.Tensor):  # a Function, a generator: what it is
                entry["object"] = type(t).__qualname__
            tensors[name] = entry
        return {
            "kind": self.kind if self.kind in KIND_ORDER else "other",
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
            stats=st.to_json() if st is not None and hasattr(st, "to_json") else st,
        )
        if isinstance(p, NumberProxy):
            v = p.value
            entry["value"] = json_safe(v) if isinstance(v, (int, float, bool)) else None
        return entry


def trace_view(trace: Trace, kind: str | None = None, **options: Any) -> dict[str, Any]:
    """The TraceView of one trace (see docs/view-format.md)."""
    return ViewBuilder(kind or trace_kind(trace), trace, **options).build()
