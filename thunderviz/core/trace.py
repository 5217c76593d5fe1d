"""Trace: a function as a list of bound symbols over proxies, printable as runnable Python."""

from __future__ import annotations

import enum
import functools
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch._C._nn as _nn  # torch.nn.functional's bindings (gelu, silu)
from torch import _VF  # torch._C._VariableFunctions, under a name torch's stubs declare
from torch.utils import _pytree as pytree

from thunderviz.core.codegen import bsym_statement, code_statement, codeval, type_comment
from thunderviz.core.collection import collection_paused
from thunderviz.core.inputs import TraceInput, input_values
from thunderviz.core.liveness import source_freeing_dead
from thunderviz.core.proxies import NameGenerator, NumberProxy, Proxy, TensorProxy
from thunderviz.core.quoting import (
    UnsafeCodeError,
    code_line,
    comment,
    comment_text,
    is_identifier,
)
from thunderviz.core.symbol import BoundSymbol, statements

__all__ = [
    "without_no_grad",
    "Trace",
    "TraceTag",
    "Provenance",
    "PrintedLine",
    "timed_provenance",
    "source_comment",
    "forget_compiled_code",
    "compiled_op",
]


class TraceTag(enum.Enum):
    FORWARD = "FORWARD"
    AUGMENTED_FORWARD = "AUGMENTED_FORWARD"
    BACKWARD = "BACKWARD"


@dataclass(frozen=True)
class Provenance:
    """One pass that made a trace: 'Constructed by DCE (took 2 ms)'."""

    pass_name: str
    took_ms: float | None = None
    note: str = ""

    def __str__(self) -> str:
        took = f" (took {self.took_ms:.0f} ms)" if self.took_ms is not None else ""
        note = f": {self.note}" if self.note else ""
        return f"Constructed by {self.pass_name}{took}{note}"


class timed_provenance:
    """`with timed_provenance("DCE") as prov: ...; trace.provenance.append(prov.result)`."""

    def __init__(self, pass_name: str, note: str = "") -> None:
        self.pass_name, self.note = pass_name, note
        self.took_ms = 0.0
        self._result: Provenance | None = None

    def __enter__(self) -> timed_provenance:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.took_ms = (time.perf_counter() - self._t0) * 1e3
        self._result = Provenance(self.pass_name, self.took_ms, self.note)

    @property
    def result(self) -> Provenance:
        """The pass's provenance; reading it inside the `with` block is a bug in the pass."""
        if self._result is None:
            raise RuntimeError(f"{self.pass_name}: provenance read before its pass ended")
        return self._result


@dataclass(frozen=True)
class PrintedLine:
    """A line of a printed trace, with the bound symbol it shows (index path), if any."""

    text: str
    path: tuple[int, ...] | None = None


@dataclass(eq=False)
class Trace:
    """`args` are the trace's positional inputs in call order (for a module: the user's inputs,
    then parameters in `named_parameters()` order, then buffers in `named_buffers()` order);
    `inputs` says what each of `flat_args` stands for (`core/inputs.py`; `bind_inputs`).
    `constants` are tensors the program captured from outside (closures, globals), passed to
    the generated function by keyword. `output_spec` rebuilds the user's output structure
    (e.g. a Hugging Face ModelOutput) from the printed one.
    """

    name: str = "forward"
    args: list[Proxy] = field(default_factory=list)
    kwargs: dict[str, Proxy] = field(default_factory=dict)
    inputs: list[TraceInput] = field(default_factory=list)
    bound_symbols: list[BoundSymbol] = field(default_factory=list)
    output: Any = None
    tags: set[TraceTag] = field(default_factory=set)
    provenance: list[Provenance] = field(default_factory=list)
    constants: dict[str, torch.Tensor] = field(default_factory=dict)
    output_spec: Any = None
    names: NameGenerator = field(default_factory=NameGenerator)
    # Free-form facts a pass leaves for the UI or later passes (e.g. saved-for-backward).
    meta: dict[str, Any] = field(default_factory=dict)

    # --- derived -------------------------------------------------------------------------
    def walk(self) -> Iterator[BoundSymbol]:
        for bsym in self.bound_symbols:
            yield from bsym.walk()

    @property
    def flat_args(self) -> list[Proxy]:
        return [*self.args, *self.kwargs.values()]

    def bind_inputs(
        self, state: Any, args: Sequence[Any], kwargs: Mapping[str, Any] | None = None
    ) -> tuple[list[Any], dict[str, Any]]:
        """This trace's function's (positional, keyword) arguments for a call
        `fn(*args, **kwargs)`; `state`: `fn` or its tensors by path (`core/inputs.py`)."""
        values = input_values(self.inputs, state, args, kwargs)
        n = len(self.args)
        return values[:n], dict(zip(self.kwargs, values[n:], strict=True))

    @property
    def flat_outputs(self) -> list[Proxy]:
        return [x for x in pytree.tree_leaves(self.output) if isinstance(x, Proxy)]

    def from_trace(self, **changes: Any) -> Trace:
        """A new trace sharing this one's signature and names, with some fields replaced."""
        fields: dict[str, Any] = dict(
            name=self.name,
            args=list(self.args),
            kwargs=dict(self.kwargs),
            inputs=self.inputs,
            bound_symbols=list(self.bound_symbols),
            output=self.output,
            tags=set(self.tags),
            provenance=list(self.provenance),
            constants=dict(self.constants),
            output_spec=self.output_spec,
            names=self.names,
            meta=dict(self.meta),
        )
        fields.update(changes)
        return Trace(**fields)

    # --- printing ------------------------------------------------------------------------
    def python(self, print_depth: int = 1, include_header: bool = True) -> str:
        """Runnable Python for this trace; subsymbols appear as comments `print_depth` deep."""
        return "\n".join(line.text for line in self.printed_lines(print_depth, include_header))

    def __str__(self) -> str:
        return self.python()

    def __repr__(self) -> str:
        return f"<Trace {self.name}: {len(self.bound_symbols)} bound symbols>"

    def printed_lines(
        self, print_depth: int = 1, include_header: bool = True, *, code_only: bool = False
    ) -> list[PrintedLine]:
        """The printed trace, line by line. `code_only`: what the compiler needs of it (for
        `python_callable`), each comment an empty line, so the line numbers (which error
        attribution maps to bound symbols, core/run_errors.py) are the printed trace's, and
        statements without their type comments: printing those and compiling them was a
        tenth of a model's first call."""
        lines: list[PrintedLine] = []
        add = lambda text, path=None: lines.append(PrintedLine(text, path))  # noqa: E731
        if include_header:
            for prov in self.provenance:
                add("" if code_only else comment(prov))
            add("import torch")
            add("aten = torch.ops.aten")
            add("prims = torch.ops.prims")
            add("")
            add("@torch.no_grad()")
        params = [p.name for p in self.args]
        kwonly = [*self.kwargs, *self.constants]
        if kwonly:
            params += ["*", *kwonly]
        unsafe = [n for n in (self.name, *params) if n != "*" and not is_identifier(n)]
        if unsafe:  # names are made by NameGenerator.claim; anything else is a bug upstream
            raise UnsafeCodeError(f"trace {ascii(self.name)}: not identifiers: {ascii(unsafe)}")
        add(f"def {self.name}({', '.join(params)}):")
        for p in self.flat_args:
            if isinstance(p, TensorProxy | NumberProxy):  # what type_comment shows
                add("" if code_only else "  " + comment(type_comment([p])))
        for name, t in self.constants.items():
            if code_only:
                add("")
            elif isinstance(t, torch.Tensor):
                add(
                    "  "
                    + comment(
                        f'{name}: captured tensor "{TensorProxy.like(name, t).type_string()}"'
                    )
                )
            else:  # an object the program used (an autograd.Function, a checkpointed module)
                add("  " + comment(f"{name}: captured {type(t).__qualname__} object"))
        last_source = None
        for i, bsym in enumerate(self.bound_symbols):
            last_source = _print_bsym(bsym, (i,), 1, print_depth, add, last_source, code_only)
        add(code_line(f"  return {codeval(self.output)}"))
        return lines

    # --- execution -----------------------------------------------------------------------
    def python_callable(
        self,
        names: tuple[tuple[str, Any], ...] = (),
        *,
        free_dead: bool = False,
        flat_output: bool = False,
    ) -> Callable[..., Any]:
        """A function that runs this trace on torch (the printed source, compiled). `names`
        adds (name, value) pairs to the generated code's globals, for symbols whose printed
        name is not reachable from `torch` (the executor's guard checks). `free_dead`: each
        value is deleted after the statement that last reads it (`core/liveness.py`).
        `flat_output`: where the output is kept as flat values and a spec, return the flat
        values (as jit does the unflattening itself) rather than the structure."""
        with collection_paused():  # core/collection.py
            lines = self.printed_lines(print_depth=0, code_only=True)
            source = (
                source_freeing_dead(lines, self.bound_symbols, self.output, commented=False)
                if free_dead
                else "\n".join(line.text for line in lines)
            )
            fn = _compile(source, self.name, (*names, *self._op_namespaces()))
        if self.constants:
            fn = functools.partial(fn, **self.constants)
        spec = self.output_spec
        if spec is None or flat_output:
            return fn

        def run(*args: Any, **kwargs: Any) -> Any:
            # the flat values as returned (a None where an output was dropped counts: pytree
            # would not count it)
            return pytree.tree_unflatten(list(fn(*args, **kwargs)), spec)

        run.__name__ = self.name
        return run

    def _op_namespaces(self) -> list[tuple[str, Any]]:
        """The `torch.ops` namespaces of the ops the statements call beyond aten and prims
        (a `torch.library` custom op, called by a user's grad rule or inside a functionalized
        call's code, as a backward taken inside the program), by their printed name."""
        found = {
            b.sym.fn.namespace
            for b in statements(self.bound_symbols)
            if isinstance(b.sym.fn, torch._ops.OpOverload)
        }
        return [(ns, getattr(torch.ops, ns)) for ns in sorted(found - {"aten", "prims"})]


def source_comment(src: Any, module_path: str) -> str:
    """`# file.py:12: \tcode  [module.path]`, the comment heading the ops of one source line.
    File name, code and module path are the user's text: quoted onto one line."""
    return _source_comment(src.short(), src.code, module_path)


# A model's blocks repeat the same few source lines under a few module paths: printed once per
# (line, module). The tab, kept as it is, would send the whole text through the per-character
# escape; escaping is per character, so the parts around it are escaped on their own (plain
# ASCII is returned as it is) and the text is the same.
@functools.lru_cache(maxsize=4096)
def _source_comment(short: str, code: str, module_path: str) -> str:
    where = f"  [{module_path}]" if module_path else ""
    return f"# {comment_text(short + ': ')}\t{comment_text(code + where)}"


def _print_bsym(
    bsym: BoundSymbol,
    path: tuple[int, ...],
    indent: int,
    print_depth: int,
    add: Callable[..., None],
    last_source: Any,
    code_only: bool = False,
) -> Any:
    pad = "  " * indent
    src = bsym.source
    statement = code_statement if code_only else bsym_statement
    if src is not None and (src, bsym.module_path) != last_source:
        add("" if code_only else pad + source_comment(src, bsym.module_path), path)
        last_source = (src, bsym.module_path)
    if bsym.header:
        add("" if code_only else pad + comment(bsym.header), path)
    if bsym.executes_subsymbols:
        # The user's call mutated in place: its functional subsymbols are the code.
        add(
            "" if code_only else pad + comment(f"{bsym_statement(bsym)}  (functionalized below)"),
            path,
        )
        for j, sub in enumerate(bsym.subsymbols):
            if sub.header:
                add("" if code_only else pad + comment(sub.header), (*path, j))
            add(code_line(pad + statement(sub)), (*path, j))
            _print_subsymbols(sub, (*path, j), indent + 1, print_depth - 1, add)
        return last_source
    add(code_line(pad + statement(bsym)), path)
    _print_subsymbols(bsym, path, indent + 1, print_depth, add)
    return last_source


def _print_subsymbols(
    bsym: BoundSymbol, path: tuple[int, ...], indent: int, depth: int, add: Callable[..., None]
) -> None:
    if depth <= 0:
        return
    pad = "  " * indent
    for j, sub in enumerate(bsym.subsymbols):
        add(pad + comment(bsym_statement(sub)), (*path, j))
        _print_subsymbols(sub, (*path, j), indent + 1, depth - 1, add)


# `aten.mm.default(` or `aten.t(` in generated code: an operator call to bind once.
_OP_CALL = re.compile(r"\b(aten|prims)\.([A-Za-z_]\w*)(?:\.([A-Za-z_]\w*))?\(")


# Overloads whose torch Python binding (its C++ argument parser, an unboxed call) is a
# measurable part cheaper than the boxed `_op` (0.3 to 1 microseconds a call: reshape, mm, t,
# sum and transpose are most of a backward's statements), and whose binding picks exactly that
# overload for a trace's arguments: every parameter of these that takes a tensor gets one (a
# Python number where the schema says Tensor would become a wrapped number there and not
# here, and promote differently, so `add`, `mul` and their kin are not listed), and the other
# overloads of the name take other kinds (a Dimname, a Tensor other). Same kernel, same bits;
# a torch-function mode sees `torch.mm` instead of `aten.mm.default`.
_PYTHON_BINDINGS: dict[tuple[str, str, str], Any] = {
    ("aten", "mm", "default"): _VF.mm,
    ("aten", "bmm", "default"): _VF.bmm,
    ("aten", "t", "default"): _VF.t,
    ("aten", "transpose", "int"): _VF.transpose,
    ("aten", "permute", "default"): _VF.permute,
    ("aten", "reshape", "default"): _VF.reshape,
    ("aten", "sum", "dim_IntList"): _VF.sum,
    ("aten", "_log_softmax", "default"): _VF._log_softmax,
    ("aten", "_log_softmax_backward_data", "default"): _VF._log_softmax_backward_data,
    ("aten", "_softmax", "default"): _VF._softmax,
    ("aten", "_softmax_backward_data", "default"): _VF._softmax_backward_data,
    # a model's layers (a binding saves 1.4 us for relu, 14 us for a convolution)
    ("aten", "relu", "default"): _VF.relu,
    ("aten", "gelu", "default"): _nn.gelu,
    ("aten", "silu", "default"): _nn.silu,
    ("aten", "clone", "default"): _VF.clone,
    ("aten", "embedding", "default"): _VF.embedding,
    ("aten", "convolution", "default"): _VF.convolution,
    ("aten", "native_batch_norm", "default"): _VF.native_batch_norm,
    ("aten", "native_layer_norm", "default"): _VF.native_layer_norm,
}


def _bind_ops(source: str, namespace: dict[str, Any]) -> str:
    """Call each operator's C++ entry point directly: `aten.mm.default(a, b)` becomes
    `_op_aten_mm_default(a, b)` with that name bound to the overload's `_op` (or, for the
    few in `_PYTHON_BINDINGS`, torch's Python binding of it). Same call,
    without the Python frame of `OpOverload.__call__` and two attribute lookups, which is a
    measurable part of running a backward of hundreds of small ops. The printed trace is
    unchanged; only its compiled twin is rewritten."""

    def bind(m: re.Match[str]) -> str:
        found = _BOUND.get(m.group(0))
        if found is None:
            found = _bound(*m.groups())
            if found is None:
                return m.group(0)
            _BOUND[m.group(0)] = found
        key, fn = found
        namespace[key] = fn
        return f"{key}("

    return _OP_CALL.sub(bind, source)


# `aten.mm.default(` -> (its name in compiled code, what that name is bound to), for the calls
# found so far (an op not found is looked up again: it may be registered later)
_BOUND: dict[str, tuple[str, Any]] = {}


def _bound(ns: str, packet_name: str, overload: str | None) -> tuple[str, Any] | None:
    packet = getattr(getattr(torch.ops, ns), packet_name, None)
    if packet is None:
        return None
    if overload is None:  # printed without an overload: the packet has exactly one
        names = packet.overloads()
        if len(names) != 1:
            return None
        overload = str(names[0])  # a name, typed as one
    op = getattr(packet, overload, None)
    if not isinstance(op, torch._ops.OpOverload):
        return None
    return f"_op_{ns}_{packet_name}_{overload}", compiled_op(op)


def compiled_op(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """What compiled code calls for `op`: torch's Python binding of it where
    `_PYTHON_BINDINGS` lists one, else the overload's C++ entry point (`_bind_ops`)."""
    key = (op.namespace, op._schema.name.split("::", 1)[1], op._overloadname)
    return _PYTHON_BINDINGS.get(key) or op._op


def forget_compiled_code() -> None:
    """Drop the compiled code kept per generated source (`_compile`): the next trace of a
    program seen before compiles again, as a new program's does. For benchmarks, which
    time first calls of the same program over and over (torch's side: `dynamo.reset()`)."""
    _compile.cache_clear()


# Per generated source: a program traced again (a notebook cell run again, a new instance of
# the same model) is not compiled again.
@functools.lru_cache(maxsize=256)
def _compile(source: str, name: str, names: tuple[tuple[str, Any], ...] = ()) -> Callable[..., Any]:
    namespace: dict[str, Any] = {
        "torch": torch,
        "aten": torch.ops.aten,
        "prims": torch.ops.prims,
        **dict(names),
    }
    code = compile(_bind_ops(source, namespace), f"<thunderviz trace {name}>", "exec")
    exec(code, namespace)  # noqa: S102 - generated source; user text only through core/quoting
    return namespace[name]


def without_no_grad(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A compiled trace (`Trace.python_callable`) without its `@torch.no_grad()` wrapper:
    for callers already in no-grad (entering and leaving the mode is a measurable part of a
    small program's call), and for one whose run autograd is to record (a backward traced
    inside a program, `autodiff/inner_grad.py`)."""
    if isinstance(fn, functools.partial):
        return functools.partial(without_no_grad(fn.func), *fn.args, **fn.keywords)
    return getattr(fn, "__wrapped__", fn)
