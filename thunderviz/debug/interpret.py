"""Running a trace one bound symbol at a time, on an environment of named values.

The generated Python (`Trace.python_callable`) runs a whole trace at once; a debugger needs
to stop between bound symbols and look at every value. This interpreter evaluates each
bound symbol's `sym.fn` on the values of its proxies and binds what it returns to its
output proxies' names. Values are never modified in place, so undoing a step is forgetting
the names it bound.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils import _pytree as pytree

from thunderviz.autodiff.saved import UNPACK
from thunderviz.core.proxies import NumberProxy, Proxy
from thunderviz.core.symbol import BoundSymbol

__all__ = ["MISSING", "StepError", "run_bsym", "bind", "is_unpack", "where_of", "number_default"]

MISSING = object()  # "no value": distinct from None, which is a value


class StepError(RuntimeError):
    """A bound symbol failed while the debugger ran it (says which, and where it came from)."""

    def __init__(
        self, message: str, bsym: BoundSymbol | None = None, index: int | None = None
    ) -> None:
        super().__init__(message)
        self.bsym = bsym
        self.index = index


def is_unpack(bsym: BoundSymbol) -> bool:
    return bsym.sym.id == UNPACK.id


def where_of(bsym: BoundSymbol) -> str:
    """'models.py:25 (h = F.relu(self.fc1(x))) in module fc1' — for error messages."""
    src = bsym.source
    if src is None and bsym.fwd_bsym is not None:
        src = bsym.fwd_bsym.source
    parts = []
    if src is not None:
        parts.append(f"{src.filename}:{src.lineno} ({src.code!r})")
    module = bsym.module_path or (bsym.fwd_bsym.module_path if bsym.fwd_bsym is not None else "")
    if module:
        parts.append(f"in module {module!r}")
    return " ".join(parts) or "(no source location)"


def run_bsym(
    bsym: BoundSymbol, read: Callable[[Proxy], Any], write: Callable[[str, Any], None]
) -> None:
    """Evaluate `bsym`, reading argument proxies with `read` and binding outputs with
    `write(name, value)`. A functionalized bound symbol runs its subsymbols instead."""
    if bsym.executes_subsymbols:
        for sub in bsym.subsymbols:
            run_bsym(sub, read, write)
        return

    def value_of(x: Any) -> Any:
        return read(x) if isinstance(x, Proxy) else x

    if is_unpack(bsym):
        bind(bsym.output, value_of(bsym.args[0]), write)
        return
    fn = bsym.sym.fn
    if fn is None:
        raise StepError(f"{bsym.sym.id} has no torch implementation to run", bsym)
    args = pytree.tree_map(value_of, bsym.args)
    kwargs = pytree.tree_map(value_of, bsym.kwargs)
    bind(bsym.output, fn(*args, **kwargs), write)


def bind(pattern: Any, value: Any, write: Callable[[str, Any], None]) -> None:
    """Bind the proxies of an output pattern (a proxy, or nested tuples/lists of them) to
    the matching parts of `value`; constants in the pattern bind nothing."""
    if isinstance(pattern, Proxy):
        write(pattern.name, value)
        return
    if isinstance(pattern, (tuple, list)):
        if not isinstance(value, (tuple, list)) or len(value) != len(pattern):
            got = type(value).__name__ + (
                f" of {len(value)}" if isinstance(value, (tuple, list)) else ""
            )
            raise StepError(f"expected {len(pattern)} values to bind to {pattern!r}, got {got}")
        for p, v in zip(pattern, value, strict=True):
            bind(p, v, write)
        return
    if isinstance(pattern, dict) and isinstance(value, dict):
        for k, p in pattern.items():
            bind(p, value[k], write)


def number_default(p: Proxy) -> Any:
    """The value a number proxy had when traced (traces specialize on it), else MISSING."""
    return p.value if isinstance(p, NumberProxy) else MISSING
