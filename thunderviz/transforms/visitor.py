"""Visitor transforms, and inserting or replacing bound symbols in place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils import _pytree as pytree

from thunderviz.core.builder import TraceBuilder
from thunderviz.core.proxies import Proxy
from thunderviz.core.symbol import NO_ORIGIN, BoundSymbol
from thunderviz.core.trace import Trace, timed_provenance
from thunderviz.transforms.recording import VISIT_TYPE, StepRecorder

__all__ = ["visitor_transform", "insert_inplace", "replace_inplace", "VisitorTransform"]

Visit = Callable[[BoundSymbol], "VISIT_TYPE | tuple[VISIT_TYPE, Any]"]


def _output_renames(new_output: Any, old_output: Any) -> dict[str, Proxy]:
    """Map the proxies a replacement produced onto the names of what it replaces, so every
    later reader of the old outputs reads the new ones unchanged."""
    new = [p for p in pytree.tree_leaves(new_output) if isinstance(p, Proxy)]
    old = [p for p in pytree.tree_leaves(old_output) if isinstance(p, Proxy)]
    if len(new) != len(old):
        raise ValueError(
            f"a REPLACE visitor returned {len(new)} outputs for a bound symbol "
            f"with {len(old)}; return values matching {old}"
        )
    return {n.name: o for n, o in zip(new, old, strict=True) if n.name != o.name}


def _record(
    trace: Trace, bsym: BoundSymbol | None, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> tuple[list[BoundSymbol], Any]:
    builder = TraceBuilder(trace.names, bsym.origin if bsym else NO_ORIGIN)
    with builder:
        result = fn(*args, **kwargs)
    return builder.bound_symbols, result


def visitor_transform(
    trace: Trace,
    visit: Visit,
    *,
    name: str = "visitor transform",
    recorder: StepRecorder | None = None,
) -> Trace:
    """Show `visit` each top-level bound symbol in order. Symbols it calls are recorded; what
    it returns (a VISIT_TYPE, or (VISIT_TYPE, new outputs) for REPLACE) says where they go.
    For REPLACE the new outputs take the replaced bound symbol's names."""
    with timed_provenance(name) as prov:
        out: list[BoundSymbol] = []
        for bsym in trace.bound_symbols:
            recorded, answer = _record(trace, bsym, visit, bsym)
            visit_type, new_output = answer if isinstance(answer, tuple) else (answer, None)
            if not isinstance(visit_type, VISIT_TYPE):
                raise TypeError(
                    f"{getattr(visit, '__name__', 'the visitor')} returned "
                    f"{visit_type!r} for {bsym.sym.id}; return a VISIT_TYPE"
                )
            removed: list[BoundSymbol] = []
            if visit_type is VISIT_TYPE.NO_OP:
                recorded = []
                out.append(bsym)
            elif visit_type is VISIT_TYPE.INSERT_BEFORE:
                out.extend(recorded)
                out.append(bsym)
            elif visit_type is VISIT_TYPE.INSERT_AFTER:
                out.append(bsym)
                out.extend(recorded)
            elif visit_type is VISIT_TYPE.REPLACE:
                renames = _output_renames(new_output, bsym.output) if new_output is not None else {}
                recorded = [b.rename(renames) for b in recorded]
                out.extend(recorded)
                removed = [bsym]
            else:
                raise ValueError(f"visitor_transform does not take {visit_type}")
            if recorder is not None:
                recorder.step(bsym, visit_type, out, inserted=recorded, removed=removed)
    result = trace.from_trace(bound_symbols=out)
    result.provenance.append(prov.result)
    return result


class VisitorTransform:
    """A visitor packaged as a Transform (a name, and `__call__(trace, recorder=...)`)."""

    def __init__(self, visit: Visit, name: str | None = None) -> None:
        self.visit = visit
        self.name = name or getattr(visit, "__name__", "visitor transform")

    def __call__(self, trace: Trace, *, recorder: StepRecorder | None = None) -> Trace:
        return visitor_transform(trace, self.visit, name=self.name, recorder=recorder)


def insert_inplace(
    trace: Trace, index: int, fn: Callable[..., Any], *args: Any, **kwargs: Any
) -> Any:
    """Record `fn(*args, **kwargs)` and insert its bound symbols at `index` of `trace`
    (edits `trace`). Returns what `fn` returned (its output proxies)."""
    if not 0 <= index <= len(trace.bound_symbols):
        raise IndexError(f"insert_inplace: index {index} is outside 0..{len(trace.bound_symbols)}")
    near = trace.bound_symbols[index] if index < len(trace.bound_symbols) else None
    recorded, result = _record(trace, near, fn, *args, **kwargs)
    trace.bound_symbols[index:index] = recorded
    return result


def replace_inplace(trace: Trace, index: int, fn: Callable[..., Any]) -> None:
    """Replace bound symbol `index` of `trace` by what `fn(*its args, **its kwargs)` records;
    the new outputs take the old names (edits `trace`)."""
    if not 0 <= index < len(trace.bound_symbols):
        raise IndexError(
            f"replace_inplace: index {index} is outside 0..{len(trace.bound_symbols) - 1}"
        )
    old = trace.bound_symbols[index]
    recorded, result = _record(trace, old, fn, *old.args, **old.kwargs)
    renames = _output_renames(result, old.output)
    trace.bound_symbols[index : index + 1] = [b.rename(renames) for b in recorded]
