"""Symbols (operations) and bound symbols (an operation applied to proxies in a trace)."""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from thunderviz.core.context import current_builder
from thunderviz.core.proxies import Proxy, TensorProxy, leaves, map_proxies

__all__ = [
    "SymbolKind",
    "Symbol",
    "BoundSymbol",
    "BsymTag",
    "SourceLocation",
    "Origin",
    "NO_ORIGIN",
    "statements",
]


class SymbolKind(enum.Enum):
    FUNCTION = "function"  # printed as  name(args)
    METHOD = "method"  # printed as  self.name(args)
    OPERATOR = "operator"  # printed as  a + b, -a, a[idx]
    ATTRIBUTE = "attribute"  # printed as  self.name


class BsymTag(enum.Enum):
    """Facts about one bound symbol that passes and the UI act on."""

    # Members are singletons compared by identity: hashed by it too, in C (Enum's own hash
    # is a Python call, made for every `tag in bsym.tags`).
    __hash__ = object.__hash__

    FUNCTIONALIZED = "FUNCTIONALIZED"  # the user's call mutated: its functional subsymbols run
    NON_CORE = "NON_CORE"  # an ATen op outside Core ATen with no decomposition
    NO_GRAD = "NO_GRAD"  # recorded under torch.no_grad(): never differentiated
    DATA_DEPENDENT = "DATA_DEPENDENT"  # read a tensor's value into Python (.item(), bool())
    RECOMPUTE_IN_BACKWARD = "RECOMPUTE_IN_BACKWARD"  # rematerialized instead of saved
    MUTATION_EPILOGUE = "MUTATION_EPILOGUE"  # writes a new value back into an input (buffers)


@dataclass(frozen=True)
class SourceLocation:
    """The user's frame that made a call (never a frame inside torch or thunderviz)."""

    filename: str
    lineno: int
    code: str
    function: str = ""

    def short(self) -> str:
        return f"{self.filename.rsplit('/', 1)[-1]}:{self.lineno}"


@dataclass(frozen=True)
class Origin:
    """Where in the user's program a bound symbol comes from: the line that made the call
    (`source`, None for code thunderviz wrote) and the nn.Module it ran in (`module_path`,
    "" at the top level). One value, so that the two travel together: rules, passes and
    stamped blocks hand on an origin, never one half of it."""

    source: SourceLocation | None = None
    module_path: str = ""


NO_ORIGIN = Origin()


@dataclass(frozen=True, eq=False)
class Symbol:
    """An operation: what it is called when printed, whether it is a prim, how it runs on torch.

    `name` is the expression the printed trace calls ("torch.nn.functional.linear",
    "aten.addmm"); `id` is a stable key for rule lookup ("torch.nn.functional.linear",
    "aten.addmm.default"); `fn` runs it on real tensors. `meta`, when given, computes output
    proxies from input proxies (used when grad rules build new traces).
    """

    name: str
    id: str
    fn: Callable[..., Any] | None
    is_prim: bool = False
    kind: SymbolKind = SymbolKind.FUNCTION
    operator: str | None = None  # for OPERATOR symbols: "+", "neg", "getitem", ...
    meta: Callable[..., Any] | None = None
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", _default_label(self.id))

    def __repr__(self) -> str:
        return f"Symbol({self.id})"

    def __hash__(self) -> int:
        return hash(self.id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Symbol) and other.id == self.id

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Record this symbol in the trace being built, or run it on tensors when none is."""
        builder = current_builder()
        if builder is not None:
            return builder.record(self, args, kwargs)
        if self.fn is None:
            raise TypeError(f"symbol {self.id} has no torch implementation")
        return self.fn(*args, **kwargs)


def _default_label(sym_id: str) -> str:
    parts = sym_id.split(".")
    if sym_id.startswith(("aten.", "prims.")) and len(parts) >= 3:
        return parts[1]
    return parts[-1]


@dataclass(eq=False)
class BoundSymbol:
    """A symbol applied to arguments in a trace, producing `output`.

    `subsymbols` are what it is made of one level down (a torch-level call's ATen ops, a
    non-core ATen op's decomposition). `origin` is where it came from: the user's line
    (`source`) and the nn.Module it ran in (`module_path`). Backward bound symbols point at
    the forward one they came from through `fwd_bsym`, which is how the UI links "the
    backward of this op".
    """

    sym: Symbol
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    output: Any
    subsymbols: list[BoundSymbol] = field(default_factory=list)
    origin: Origin = NO_ORIGIN
    tags: set[BsymTag] = field(default_factory=set)
    header: str = ""  # a comment printed above the line (e.g. what the user called)
    fwd_bsym: BoundSymbol | None = None

    @property
    def source(self) -> SourceLocation | None:
        return self.origin.source

    @property
    def module_path(self) -> str:
        return self.origin.module_path

    # --- flat views the DAG and the passes walk ---------------------------------------
    @property
    def flat_args(self) -> list[Any]:
        return leaves(self.kwargs, leaves(self.args, []))

    # The unique proxies read and written are asked for again and again (autodiff, the
    # block sweep, printing, liveness): kept with the argument and output objects they were
    # computed from, and computed again when either is another object (passes replace them
    # rather than change them in place). Each caller gets its own list.
    @property
    def flat_proxy_args(self) -> list[Proxy]:
        kept = self.__dict__.get("_proxy_args")
        if kept is None or kept[0] is not self.args or kept[1] is not self.kwargs:
            kept = self.__dict__["_proxy_args"] = (
                self.args,
                self.kwargs,
                _unique_proxies(self.flat_args),
            )
        return list(kept[2])

    @property
    def flat_tensor_args(self) -> list[TensorProxy]:
        return [p for p in self.flat_proxy_args if isinstance(p, TensorProxy)]

    @property
    def flat_outs(self) -> list[Any]:
        return leaves(self.output, [])

    @property
    def flat_proxy_outs(self) -> list[Proxy]:
        kept = self.__dict__.get("_proxy_outs")
        if kept is None or kept[0] is not self.output:
            kept = self.__dict__["_proxy_outs"] = (self.output, _unique_proxies(self.flat_outs))
        return list(kept[1])

    @property
    def flat_tensor_outs(self) -> list[TensorProxy]:
        return [p for p in self.flat_proxy_outs if isinstance(p, TensorProxy)]

    @property
    def executes_subsymbols(self) -> bool:
        """A functionalized call has no functional torch-level form: its subsymbols run."""
        return BsymTag.FUNCTIONALIZED in self.tags

    def walk(self) -> Iterator[BoundSymbol]:
        """This bound symbol and all its subsymbols, depth first, parents first."""
        yield self
        for sub in self.subsymbols:
            yield from sub.walk()

    def with_changes(self, **changes: Any) -> BoundSymbol:
        """A copy with some fields replaced (bound symbols are treated as values by passes).
        Deferred subsymbols stay deferred unless `subsymbols` is among the changes."""
        pending = self.__dict__.get(_PENDING)
        fields: dict[str, Any] = dict(
            sym=self.sym,
            args=self.args,
            kwargs=self.kwargs,
            output=self.output,
            subsymbols=[] if pending else self.subsymbols,
            origin=self.origin,
            tags=set(self.tags),
            header=self.header,
            fwd_bsym=self.fwd_bsym,
        )
        fields.update(changes)
        copy = BoundSymbol(**fields)
        if pending and "subsymbols" not in changes:
            copy.defer_subsymbols(*pending)
        return copy

    def rename(self, mapping: Mapping[str, Proxy]) -> BoundSymbol:
        """Replace proxies by name everywhere in this bound symbol and its subsymbols."""
        if not mapping:
            return self
        mapping = dict(mapping)  # as it is now: the caller may go on filling it
        return self._renamed(mapping)

    def _renamed(self, mapping: dict[str, Proxy]) -> BoundSymbol:
        swap = lambda p: mapping.get(p.name, p)  # noqa: E731
        return self.with_mapped_subsymbols(
            lambda s: s._renamed(mapping),
            args=map_proxies(self.args, swap),
            kwargs=map_proxies(self.kwargs, swap),
            output=map_proxies(self.output, swap),
        )

    def with_mapped_subsymbols(
        self, fn: Callable[[BoundSymbol], BoundSymbol], **changes: Any
    ) -> BoundSymbol:
        """`with_changes(**changes)` with each subsymbol replaced by `fn(subsymbol)`, when
        they are first read: the copy's subsymbols are deferred (`defer_subsymbols`), with
        these as their outline. `fn` must give the same result whenever it runs, and keep
        symbols, tags and nesting (a renaming, a move to another module)."""
        copy = self.with_changes(**changes)
        pending = self.__dict__.get(_PENDING)
        if pending:
            build, like = pending
            copy.defer_subsymbols(lambda: [fn(s) for s in build()], like)
        elif self.subsymbols:
            subs = list(self.subsymbols)  # as they are now, whatever becomes of the list
            copy.defer_subsymbols(lambda: [fn(s) for s in subs], subs)
        return copy

    def defer_subsymbols(
        self, build: Callable[[], list[BoundSymbol]], like: list[BoundSymbol]
    ) -> None:
        """Let `subsymbols` be built by `build` when first read. A decomposition recorded once
        is instantiated for every call of its op (a BatchNorm's for each layer), and the
        executor and most rules never read it. `build` must give the same list whenever it
        runs (it may not draw names or read state that changes); `like` are bound symbols of
        the same symbols, tags and nesting, names aside, which `walk_outline()` reads."""
        self.__dict__.pop("subsymbols", None)
        self.__dict__[_PENDING] = (build, like)

    def walk_outline(self) -> Iterator[BoundSymbol]:
        """What `walk()` yields, but deferred subsymbols are not built: their outline (`like`)
        stands in, with the same symbols, tags and nesting under other names. For questions
        about which ops run, not on which values."""
        yield self
        pending = self.__dict__.get(_PENDING)
        for sub in self.subsymbols if pending is None else pending[1]:
            yield from sub.walk_outline()

    def __getstate__(self) -> dict[str, Any]:
        """A copy holds built subsymbols, not the function that builds them."""
        _ = self.subsymbols
        return self.__dict__

    def __repr__(self) -> str:
        outs = ", ".join(p.name for p in self.flat_proxy_outs)
        ins = ", ".join(p.name for p in self.flat_proxy_args)
        return f"<BoundSymbol {outs} = {self.sym.id}({ins})>"


_PENDING = "_pending_subsymbols"


class _DeferredSubsymbols:
    """`BoundSymbol.subsymbols` where `defer_subsymbols` left it unbuilt. A non-data
    descriptor: a built list lives in the instance's `__dict__`, which Python reads before
    this, so reading subsymbols costs nothing extra once built (or when never deferred)."""

    def __get__(self, bsym: BoundSymbol | None, owner: type) -> Any:
        if bsym is None:
            return self
        pending = bsym.__dict__.pop(_PENDING, None)
        built = [] if pending is None else pending[0]()
        bsym.__dict__["subsymbols"] = built
        return built


# After @dataclass has made __init__ (which assigns `self.subsymbols`, into the instance's
# __dict__) and taken the field's default factory from the class body.
BoundSymbol.subsymbols = _DeferredSubsymbols()  # type: ignore[assignment]


def _unique_proxies(leaves: list[Any]) -> list[Proxy]:
    seen: set[str] = set()
    out: list[Proxy] = []
    for x in leaves:
        if isinstance(x, Proxy) and x.name not in seen:
            seen.add(x.name)
            out.append(x)
    return out


def statements(bsyms: list[BoundSymbol]) -> list[BoundSymbol]:
    """The bound symbols that run as code: top level, and a functionalized call's pieces."""
    out: list[BoundSymbol] = []
    for b in bsyms:
        out.append(b)
        if b.executes_subsymbols:
            out.extend(statements(b.subsymbols))
    return out
