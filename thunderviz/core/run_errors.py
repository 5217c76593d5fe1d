"""Errors raised while a trace runs, attributed to the bound symbol that raised them.

Generated code is compiled under the file name `<thunderviz trace NAME>`, one statement per
line of `trace.python(print_depth=0)`, so the line a traceback points at names a bound
symbol, and that bound symbol carries the user's source line and module (a backward one
also links the forward call it differentiates). The error keeps its type (a user's
`except RuntimeError` still catches it) and gains a note saying where it came from.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any

from thunderviz.core.symbol import BoundSymbol
from thunderviz.core.trace import Trace

__all__ = ["attribute_error", "attribute_statement", "bsym_at_line", "run_attributed"]

_PREFIX = "<thunderviz trace "
_NOTE_MARK = "thunderviz: raised while running"


def bsym_at_line(trace: Trace, lineno: int) -> BoundSymbol | None:
    """The bound symbol whose statement is line `lineno` (1-based) of the compiled trace."""
    lines = trace.printed_lines(print_depth=0)
    path = lines[lineno - 1].path if 1 <= lineno <= len(lines) else None
    if path is None:
        return None
    bsym = trace.bound_symbols[path[0]]
    for i in path[1:]:
        bsym = bsym.subsymbols[i]
    return bsym


def _generated_frame(tb: TracebackType | None) -> tuple[str, int] | None:
    """(trace name, line) of the innermost frame in generated code."""
    found = None
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith(_PREFIX):
            found = (filename[len(_PREFIX) : -1], tb.tb_lineno)
        tb = tb.tb_next
    return found


def attribute_error(error: BaseException, traces: list[Trace]) -> None:
    """Add a note naming the bound symbol, source line and module that raised `error`."""
    if any(_NOTE_MARK in n for n in getattr(error, "__notes__", ())):
        return
    frame = _generated_frame(error.__traceback__)
    if frame is None:
        return
    name, lineno = frame
    trace = next((t for t in traces if t.name == name), None)
    bsym = bsym_at_line(trace, lineno) if trace is not None else None
    if bsym is None:
        error.add_note(f"{_NOTE_MARK} the thunderviz {name} trace, line {lineno}")
        return
    error.add_note(f"{_NOTE_MARK} the {name} trace, line {lineno}: {describe(bsym)}")


def attribute_statement(error: BaseException, trace: Trace, index: int) -> None:
    """`attribute_error` for an error raised by `trace`'s top-level statement `index` run
    outside compiled code (executor/interpreted.py): the same note, the same line number."""
    if any(_NOTE_MARK in n for n in getattr(error, "__notes__", ())):
        return
    lines = trace.printed_lines(print_depth=0)
    lineno = 1 + max(i for i, line in enumerate(lines) if line.path == (index,))
    bsym = trace.bound_symbols[index]
    error.add_note(f"{_NOTE_MARK} the {trace.name} trace, line {lineno}: {describe(bsym)}")


def run_attributed(trace: Trace, *args: Any, **kwargs: Any) -> Any:
    """Compile and run `trace` once; an error it raises names its bound symbol."""
    try:
        return trace.python_callable()(*args, **kwargs)
    except Exception as e:
        attribute_error(e, [trace])
        raise


def describe(bsym: BoundSymbol) -> str:
    """`aten.mm.default (t12 = ...) from model.py:74 'x = self.fc(x)' in module 'fc'`."""
    origin = bsym.fwd_bsym if bsym.fwd_bsym is not None and bsym.source is None else bsym
    parts = [bsym.sym.id]
    if bsym.fwd_bsym is not None:
        parts.append(f"(the backward of {bsym.fwd_bsym.sym.id})")
    src = origin.source
    if src is not None:
        parts.append(f"from {src.filename}:{src.lineno} `{src.code.strip()}`")
    if origin.module_path:
        parts.append(f"in module {origin.module_path!r}")
    return " ".join(parts)
