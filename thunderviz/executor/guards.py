"""Guards: what a trace specialised on is checked where the running trace computes it.

A trace is one run of the program, so it holds what that run saw when it read tensor values:
the branch `if x.sum() > 0:` took (`Tensor.__bool__`), the number `.item()` returned, the
list `.tolist()` made, the size `nonzero` / `x[mask]` / `masked_select` / `unique` chose.
Capture tags those bound symbols `DATA_DEPENDENT` (`capture/guards.py`). Here each becomes
a guard statement in the trace the executor runs, right after the statement that computes
the value:

    g0 = torch.Tensor.__bool__(t3)
    thunderviz_guard_value(g0, True, 0)        # raises GuardFailure if the branch flipped
    t7 = aten.nonzero.default(x)
    thunderviz_guard_size(t7, (2, 1), 1)        # raises GuardFailure if the count changed

so a run whose values differ stops before anything used the stale value: no wrong result,
no crash from a baked-in size. `jit` catches the failure, restores the RNG state, traces
again for the new values (both variants stay cached) and reruns. The mechanism is generic:
any bound symbol capture tags as data-dependent gets a guard, whatever op made it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from thunderviz.core.proxies import NameGenerator, Proxy
from thunderviz.core.symbol import BoundSymbol, BsymTag, Symbol, statements
from thunderviz.core.trace import Trace

__all__ = [
    "Guard",
    "GuardFailure",
    "guard_trace",
    "is_guard",
    "same_value",
    "GUARD_NAMES",
]


@dataclass(frozen=True)
class Guard:
    """One value the trace specialised on. `key` names the value the same way in every trace
    derived from one program path (proxy names are deterministic), so traces of two branches
    can be told apart by the guards they agree on."""

    key: tuple[Any, ...]
    expected: Any
    bsym: BoundSymbol  # the forward bound symbol that computed it (source line, module)

    def describe(self, got: Any = None) -> str:
        src = self.bsym.source
        where = f"{src.short()} ({src.code.strip()})" if src is not None else "an unknown line"
        module = f" in module {self.bsym.module_path!r}" if self.bsym.module_path else ""
        what = f"the size of {self.key[1]}" if self.key[0] == "size" else f"{self.bsym.sym.name}"
        seen = "" if got is None else f": the trace has {self.expected!r}, this call {got!r}"
        return f"{what} at {where}{module}{seen}"


class GuardFailure(Exception):
    """A running trace met a value other than the one it was traced with."""

    def __init__(self, index: int, got: Any) -> None:
        super().__init__(f"guard {index} failed (value {got!r})")
        self.index = index
        self.got = got


def same_value(got: Any, expected: Any) -> bool:
    if got == expected:
        return True
    if isinstance(got, float) and isinstance(expected, float):
        return math.isnan(got) and math.isnan(expected)
    if isinstance(got, (list, tuple)) and isinstance(expected, (list, tuple)):
        return len(got) == len(expected) and all(map(same_value, got, expected))
    return False


def check_value(got: Any, expected: Any, index: int) -> None:
    if got is not expected and not same_value(got, expected):
        raise GuardFailure(index, got)


def check_size(tensor: Any, expected: tuple[int, ...], index: int) -> None:
    if tensor.shape != expected:
        raise GuardFailure(index, tuple(tensor.shape))


_VALUE = Symbol(name="thunderviz_guard_value", id="thunderviz.guard_value", fn=check_value)
_SIZE = Symbol(name="thunderviz_guard_size", id="thunderviz.guard_size", fn=check_size)
# What the generated code needs in its globals to run guard statements.
GUARD_NAMES: tuple[tuple[str, Any], ...] = ((_VALUE.name, check_value), (_SIZE.name, check_size))


def is_guard(bsym: BoundSymbol) -> bool:
    return bsym.sym.id in (_VALUE.id, _SIZE.id)


def _value_key(bsym: BoundSymbol) -> tuple[Any, ...]:
    """The call by its symbol and arguments, values by name (`x.stride(0)` and `x.stride(-1)`
    are two values)."""
    named = lambda a: a.name if isinstance(a, Proxy) else repr(a)  # noqa: E731
    args = tuple(named(a) for a in bsym.args)
    kwargs = tuple(sorted((k, named(v)) for k, v in bsym.kwargs.items()))
    return ("value", bsym.sym.id, args, kwargs)


def specialisations(forward: Trace) -> list[Guard]:
    """The guards of a forward trace, in program order."""
    guards: list[Guard] = []
    for b in statements(forward.bound_symbols):
        if BsymTag.DATA_DEPENDENT not in b.tags:
            continue
        tensors = b.flat_tensor_outs
        if tensors:  # a size chosen by values: every tensor it made
            guards += [Guard(("size", t.name), tuple(t.shape), b) for t in tensors]
        elif b.sym.id == "aten._local_scalar_dense.default" or not b.flat_proxy_outs:
            value = b.output.value if hasattr(b.output, "value") else b.output
            guards.append(Guard(_value_key(b), value, b))
    return guards


def guard_trace(executed: Trace, forward: Trace) -> tuple[Trace, list[Guard]]:
    """`executed` (the forward itself or the augmented forward made from it) with a guard
    statement after each statement computing a value `forward` specialised on."""
    guards = specialisations(forward)
    if not guards:
        return executed, []
    placer = _Placer(guards, executed.names)
    bsyms = placer.visit(executed.bound_symbols)
    missing = [i for i in range(len(guards)) if i not in placer.placed]
    if missing:
        bsyms = placer.place_missing(bsyms, executed, missing)
    return executed.from_trace(bound_symbols=bsyms), guards


class _Placer:
    def __init__(self, guards: list[Guard], names: NameGenerator) -> None:
        self.guards = guards
        self.names = names
        self.by_key = {g.key: i for i, g in enumerate(guards)}
        self.placed: set[int] = set()

    def visit(self, bsyms: list[BoundSymbol], only: set[int] | None = None) -> list[BoundSymbol]:
        out: list[BoundSymbol] = []
        for b in bsyms:
            if b.executes_subsymbols:
                b = b.with_changes(subsymbols=self.visit(b.subsymbols, only))
            index = self.by_key.get(_value_key(b))
            if index is not None and not b.flat_tensor_outs and (only is None or index in only):
                value = b.output
                if not isinstance(value, Proxy):  # `_ = x.item()`: bind the value to check it
                    value = Proxy(self.names.fresh("g"))
                    b = b.with_changes(output=value)
                out += [b, _guard_bsym(_VALUE, value, self.guards[index], index)]
                self.placed.add(index)
                continue
            out.append(b)
            for t in b.flat_tensor_outs:
                index = self.by_key.get(("size", t.name))
                if (
                    index is not None
                    and index not in self.placed
                    and (only is None or index in only)
                ):
                    out.append(_guard_bsym(_SIZE, t, self.guards[index], index))
                    self.placed.add(index)
        return out

    def place_missing(
        self, bsyms: list[BoundSymbol], executed: Trace, missing: list[int]
    ) -> list[BoundSymbol]:
        """A guarded value the executed trace does not compute as a statement of its own (a
        rule replaced the call): recompute it with the forward's bound symbol as soon as its
        inputs exist, and check it there."""
        available = {p.name for p in executed.flat_args} | set(executed.constants)
        out: list[BoundSymbol] = []
        pending = list(missing)

        def flush() -> None:
            for i in list(pending):
                bsym = self.guards[i].bsym
                if all(p.name in available for p in bsym.flat_proxy_args):
                    pending.remove(i)
                    out.extend(self.visit([bsym], only={i}))

        flush()
        for b in bsyms:
            out.append(b)
            available.update(p.name for p in b.flat_proxy_outs)
            flush()
        if pending:
            raise RuntimeError(
                "thunderviz.jit could not place the checks for "
                + "; ".join(self.guards[i].describe() for i in pending)
            )
        return out


def _guard_bsym(sym: Symbol, value: Proxy, guard: Guard, index: int) -> BoundSymbol:
    b = guard.bsym
    return BoundSymbol(
        sym=sym,
        args=(value, guard.expected, index),
        kwargs={},
        output=None,
        origin=b.origin,
    )
