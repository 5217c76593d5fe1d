"""A trace's first run, statement by statement, before its compiled twin exists.

Compiling a trace costs CPython about 10 microseconds a statement (and printing its source a
few more): 7-9 ms for a 12-layer GPT's 530-statement backward, ~7% of the whole first call,
paid before the backward's first kernel runs. A backward made only of ATen calls needs no
compiler to run once: this runs it by calling, statement after statement, exactly what the
compiled twin would call (`core.trace.compiled_op`: the same entry point, the same
arguments, in the same order), freeing each value after the statement that last reads it as
the compiled twin does (`core/liveness.py`), and an error gets the note the compiled twin's
would (`core/run_errors.py`). `jit` runs an entry's first backward so and compiles the
backward for its second (`CompiledEntry.backward_in_no_grad`): the cost moves to a call that
has its kernels warm and the user's attention elsewhere, and a trace run once (a notebook
cell's one step, a debugging session's) never pays it.

Only traces made of statements this runs as the compiled twin does are run so: each an
ATen or prims overload printed as its own call (`aten_symbol`), the unpacking of an input,
or a call of a name the compiled twin binds too (`names`, as `Trace.python_callable` takes
them: a backward's hook points for outputs, executor/output_hooks.py). A backward's are;
anything else, a collective of DDP's gradient sync, is compiled at once: `interpreted`
returns None. An argument is a value by name, a literal the printer writes
out as it is, a tuple or list of those, or else whatever its printed text evaluates to.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from thunderviz.core.codegen import codeval
from thunderviz.core.liveness import dying_names
from thunderviz.core.proxies import Proxy
from thunderviz.core.run_errors import attribute_statement
from thunderviz.core.symbol import BoundSymbol, SymbolKind
from thunderviz.core.trace import Trace, compiled_op
from thunderviz.prims.aten import aten_symbol

__all__ = ["interpreted"]

# Constants the printer writes as literals that evaluate back to an equal value of the same
# type (core/codegen.py `codeval`): passed as they are. Any other constant is evaluated from
# its printed text, as the compiled statement has it.
_LITERALS = frozenset((
    int, float, bool, str, complex, type(None), type(Ellipsis), torch.dtype, torch.device,
    torch.layout, torch.memory_format,
))  # fmt: skip
_NAMESPACE = {"torch": torch, "aten": torch.ops.aten, "prims": torch.ops.prims}


def _value(x: Any, env: dict[str, Any]) -> Any:
    """Argument `x`'s value as the compiled statement's expression makes it."""
    if isinstance(x, Proxy):
        return env[x.name]
    kind = type(x)
    if kind in _LITERALS:
        return x
    if kind is tuple or kind is torch.Size:  # a Size prints as a tuple
        return tuple([_value(v, env) for v in x])
    if kind is list:
        return [_value(v, env) for v in x]
    return eval(codeval(x), _NAMESPACE, env)  # noqa: S307 - the printer's own text, as compiled


def _bind(output: Any, value: Any, env: dict[str, Any]) -> None:
    """Bind `value` to the statement's assignment target (`codegen.output_pattern`)."""
    if isinstance(output, Proxy):
        env[output.name] = value
    elif isinstance(output, (tuple, list)):
        if len(value) != len(output):  # as unpacking in the compiled statement would
            raise ValueError(f"expected {len(output)} values to unpack, got {len(value)}")
        for o, v in zip(output, value, strict=True):
            _bind(o, v, env)


class _NotRunnable(Exception):
    """A statement this module does not run as the compiled twin would."""


def _callable(bsym: BoundSymbol, bound: dict[str, Any]) -> Callable[..., Any] | None:
    """What `bsym`'s compiled statement calls; None: the statement unpacks its argument.
    `bound`: the names the compiled twin's globals bind, by printed name."""
    sym = bsym.sym
    if sym.fn is None and sym.name in bound and sym.kind is SymbolKind.FUNCTION:
        return bound[sym.name]
    if bsym.executes_subsymbols:
        raise _NotRunnable("a functionalized call")
    if sym.kind is SymbolKind.OPERATOR and sym.operator == "unpack":
        if len(bsym.args) != 1 or bsym.kwargs:
            raise _NotRunnable("unpack")
        return None
    found = _CALLABLES.get(sym.id)
    if found is not None and found[0] is sym:
        return found[1]
    op = sym.fn
    if (
        not isinstance(op, torch._ops.OpOverload)
        or op.namespace not in ("aten", "prims")
        or aten_symbol(op) is not sym  # printed as something other than the op's own call
    ):
        raise _NotRunnable(sym.id)
    _CALLABLES[sym.id] = sym, compiled_op(op)
    return _CALLABLES[sym.id][1]


# symbol id -> (the symbol, what compiled code calls for it); a backward repeats a few dozen
_CALLABLES: dict[str, tuple[Any, Callable[..., Any]]] = {}


def interpreted(trace: Trace, names: tuple[tuple[str, Any], ...] = ()) -> Callable[..., Any] | None:
    """A function running `trace` statement by statement as its compiled twin runs it,
    without the twin's `@torch.no_grad()` (`runnable.without_no_grad`); None where a statement
    is not one this module runs (the trace must then be compiled). `names`: what the twin's
    globals bind beyond torch's (`Trace.python_callable`'s)."""
    if trace.kwargs or trace.output_spec is not None:
        return None
    bsyms = trace.bound_symbols
    try:
        bound = dict(names)
        fns = [_callable(b, bound) for b in bsyms]
    except _NotRunnable:
        return None
    params = [p.name for p in trace.args]
    constants = dict(trace.constants)  # the compiled twin's keyword-only parameters
    dying = dying_names(bsyms, trace.output)

    def run(*values: Any) -> Any:
        env = {**constants, **dict(zip(params, values, strict=True))}
        i = 0
        try:
            for i, (bsym, fn) in enumerate(zip(bsyms, fns, strict=True)):  # noqa: B007
                # the argument list is a temporary, as in the compiled call
                if fn is None:
                    out = _value(bsym.args[0], env)
                elif bsym.kwargs:
                    out = fn(
                        *[_value(a, env) for a in bsym.args],
                        **{k: _value(v, env) for k, v in bsym.kwargs.items()},
                    )
                else:
                    out = fn(
                        *[env[a.name] if isinstance(a, Proxy) else _value(a, env)
                          for a in bsym.args]
                    )  # fmt: skip
                _bind(bsym.output, out, env)
                out = None  # a tuple result holds its parts: they die with their names
                dead = dying.get(i)
                if dead:
                    for name in dead:
                        del env[name]
        except Exception as e:
            attribute_statement(e, trace, i)
            raise
        return _value(trace.output, env)

    run.__name__ = trace.name
    return run
