"""User-defined `torch.autograd.Function`s: recorded as one call whose backward is the user's.

`torch.autograd.Function.apply` never reaches a TorchFunctionMode, and it runs the Function's
forward under no_grad: recorded op by op, its output would look like it needs no gradient
and the user's `backward` would never be used. So while a trace runs, `Function.apply` is
intercepted (for the tracing thread only) and each call becomes ONE bound symbol
`t5 = ScaleGrad.apply(t4, 0.5)` whose subsymbols are the ops its forward ran (for viewing).

The Function is a constant of the trace (`ScaleGrad` above is an `AutogradFunctionCall`
passed to the generated code like a captured tensor), with three entry points:

* `apply(...)`: the user's `Function.apply`, as written (the forward trace);
* `forward_with_ctx(needs_input_grad, ...) -> (outputs, ctx)`: the user's forward on a fresh
  `FunctionContext` (the augmented forward; the ctx is saved for backward);
* `backward(ctx, *grad_outputs, accumulated=(...)) -> grads`: the user's `backward` (or
  `vjp`) on that ctx, its result checked and fitted to the inputs as the autograd engine
  does (the backward trace).

Tensors the forward reads without taking them as arguments (a checkpointed block's
parameters) are listed as `reads=(...)`. A reentrant backward
(`torch.utils.checkpoint(..., use_reentrant=True)`) accumulates their gradients into `.grad`;
`backward` collects those accumulations as gradients of the trace and leaves `.grad` as it was.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.function import Function, FunctionCtx

from thunderviz.capture.errors import CaptureError, where
from thunderviz.capture.recorder import _Frame
from thunderviz.capture.source import user_source
from thunderviz.core.codegen import codeval
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol, BsymTag, Symbol, SymbolKind

__all__ = ["APPLY_ID", "AutogradFunctionCall", "FunctionContext", "ObjectProxy",
           "intercepting_function_apply", "has_backward"]

APPLY_ID = "torch.autograd.Function.apply"
FORWARD_ID = "torch.autograd.Function.forward_with_ctx"
BACKWARD_ID = "torch.autograd.Function.backward"


@dataclass(frozen=True, eq=False)
class ObjectProxy(Proxy):
    """A Python object the trace captured from outside (a Function, a checkpointed module):
    passed to the generated code by keyword, like a captured tensor."""

    value: Any = None


def has_backward(cls: type) -> bool:
    """Whether the Function defines `backward` or `vjp` (one that defines only `jvp` cannot
    be differentiated in reverse mode, in eager either)."""
    return cls.backward is not Function.backward or cls.vjp is not Function.vjp


class FunctionContext(FunctionCtx):
    """The `ctx` of one call, as the user's forward and backward see it in eager:
    `save_for_backward`/`saved_tensors`, `needs_input_grad`, `mark_non_differentiable`,
    `set_materialize_grads`, and any attribute the forward sets."""

    def __init__(self, needs_input_grad: tuple[bool, ...]) -> None:
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True
        self.to_save: tuple[Any, ...] = ()
        self.non_differentiable: tuple[Any, ...] = ()
        self.dirty_tensors: tuple[Any, ...] = ()

    @property
    def saved_tensors(self) -> tuple[Any, ...]:
        return tuple(self.to_save)

    saved_variables = saved_tensors


@dataclass(frozen=True)
class _TensorMeta:
    shape: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device

    @staticmethod
    def of(t: torch.Tensor) -> _TensorMeta:
        return _TensorMeta(tuple(t.shape), t.dtype, t.device)

    def zeros(self) -> torch.Tensor:
        return torch.zeros(self.shape, dtype=self.dtype, device=self.device)


@dataclass
class _CallRecord:
    """What one forward_with_ctx call left on its ctx for the backward."""

    inputs: list[_TensorMeta | None]  # per forward argument (None: not a tensor)
    outputs: list[_TensorMeta | None]  # per output (None: not a tensor)
    non_differentiable: set[int]  # output positions marked non-differentiable


class AutogradFunctionCall:
    """One call site of a user's `torch.autograd.Function` (see the module docstring).

    `outputs` is the call's output as recorded (proxies), `source` the user's line."""

    def __init__(self, cls: type, outputs: Any, source: Any, module_path: str) -> None:
        self.cls = cls
        self.outputs = outputs
        self.source = source
        self.module_path = module_path

    def __repr__(self) -> str:
        return f"<autograd.Function {self.cls.__module__}.{self.cls.__qualname__}>"

    # --- the forward trace ---------------------------------------------------------------
    def apply(self, *args: Any, reads: tuple[Any, ...] = (), **kwargs: Any) -> Any:
        """The user's call, as written (`reads` only names what the forward reads)."""
        return self.cls.apply(*args, **kwargs)

    # --- the augmented forward -----------------------------------------------------------
    def forward_with_ctx(self, needs_input_grad: tuple[bool, ...], *args: Any,
                         **kwargs: Any) -> tuple[Any, FunctionContext]:
        """Run the user's forward as `Function.apply` does (no_grad, a fresh ctx) and return
        its outputs and the ctx. Inputs that need a gradient reach the forward as tensors
        that require grad, as in eager (a reentrant backward detaches them and asks for
        their `.grad`)."""
        ctx = FunctionContext(needs_input_grad)
        run_args = tuple(
            a.detach().requires_grad_(True) if need and isinstance(a, torch.Tensor) else a
            for a, need in zip(args, needs_input_grad, strict=True))
        with torch.no_grad():
            out = run_forward(self.cls, ctx, run_args, kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        aliased = [_alias_if_input(o, run_args) for o in outs]
        out = tuple(aliased) if isinstance(out, tuple) else aliased[0]
        non_diff = {i for i, o in enumerate(outs) if any(o is t for t in ctx.non_differentiable)}
        ctx._thunderviz_call = _CallRecord(
            [_TensorMeta.of(a) if isinstance(a, torch.Tensor) else None for a in args],
            [_TensorMeta.of(o) if isinstance(o, torch.Tensor) else None for o in aliased],
            non_diff)
        return out, ctx

    # --- the backward --------------------------------------------------------------------
    def backward(self, ctx: FunctionContext, *grad_outputs: Any,
                 accumulated: tuple[Any, ...] = ()) -> tuple[torch.Tensor, ...]:
        """The user's backward on `ctx`: one gradient per input that needs one (zeros where
        it returns None), then one per tensor in `accumulated` (what the backward added to
        its `.grad`, zeros if nothing)."""
        record: _CallRecord = ctx._thunderviz_call
        grads_in = []
        for i, g in enumerate(grad_outputs):
            meta = record.outputs[i] if i < len(record.outputs) else None
            if i in record.non_differentiable:
                g = None
            if g is None and meta is not None and ctx.materialize_grads:
                g = meta.zeros()
            grads_in.append(g)
        leaves = [t if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad else None
                  for t in accumulated]
        with _grads_collected(leaves) as collected:
            raw = _user_backward(self.cls)(ctx, *grads_in)
        raw = raw if isinstance(raw, tuple) else (raw,)
        n = len(record.inputs)
        if len(raw) < n or any(g is not None for g in raw[n:]):
            raise RuntimeError(
                f"{self.cls.__qualname__}.backward returned {len(raw)} gradients; its forward "
                f"takes {n} inputs (one gradient, or None, per input)")
        out = []
        for i, need in enumerate(ctx.needs_input_grad):
            meta = record.inputs[i]
            if need and meta is not None:
                out.append(meta.zeros() if raw[i] is None else self._fitted(raw[i], meta, i))
        for t, g in zip(accumulated, collected, strict=True):
            out.append(g if g is not None else torch.zeros_like(t))
        return tuple(out)

    def _fitted(self, g: torch.Tensor, meta: _TensorMeta, index: int) -> torch.Tensor:
        """The autograd engine's checks on a custom backward's gradient: a broadcast shape is
        summed back to the input's, dtype and device follow the input's."""
        if not isinstance(g, torch.Tensor):
            raise RuntimeError(f"{self.cls.__qualname__}.backward returned a {type(g).__name__} "
                               f"as the gradient of input {index}; expected a tensor or None")
        if tuple(g.shape) != meta.shape:
            try:
                g = g.sum_to_size(meta.shape)
            except RuntimeError:
                raise RuntimeError(
                    f"{self.cls.__qualname__}.backward returned an invalid gradient at index "
                    f"{index} - got {list(g.shape)} but expected shape compatible with "
                    f"{list(meta.shape)}") from None
        return g.to(dtype=meta.dtype, device=meta.device)


def _alias_if_input(o: Any, inputs: tuple[Any, ...]) -> Any:
    """An input returned as it is becomes a view of it, as `Function.apply` makes it."""
    if isinstance(o, torch.Tensor) and any(o is a for a in inputs):
        with torch.no_grad():
            return o.view_as(o)
    return o


def run_forward(cls: type, ctx: FunctionContext, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The user's forward: `forward(ctx, *args)`, or `forward(*args)` then
    `setup_context(ctx, inputs, output)` for a Function that defines setup_context."""
    if _defines_setup_context(cls):
        out = cls.forward(*args, **kwargs)
        cls.setup_context(ctx, args, out)
        return out
    return cls.forward(ctx, *args, **kwargs)


def _defines_setup_context(cls: type) -> bool:
    return cls.setup_context is not Function.setup_context


def _user_backward(cls: type) -> Callable[..., Any]:
    """`vjp` if the Function defines it, else `backward` (as BackwardCFunction picks)."""
    if cls.backward is not Function.backward and cls.vjp is not Function.vjp:
        raise RuntimeError(f"{cls.__qualname__} implements both 'backward' and 'vjp'; "
                           "implement only one of them")
    user_fn = cls.vjp if cls.vjp is not Function.vjp else cls.backward
    if getattr(cls, "boxed_grads_call", False):
        return lambda ctx, *grads: user_fn(ctx, list(grads))
    return user_fn


@contextlib.contextmanager
def _grads_collected(leaves: list[torch.Tensor | None]) -> Iterator[list[torch.Tensor | None]]:
    """What the body accumulates into the leaves' `.grad` (a reentrant backward does),
    with every `.grad` as it was afterwards."""
    before = [t.grad if t is not None else None for t in leaves]
    collected: list[torch.Tensor | None] = [None] * len(leaves)
    for t in leaves:
        if t is not None:
            t.grad = None
    try:
        yield collected
        for i, t in enumerate(leaves):
            if t is not None:
                collected[i] = t.grad
    finally:
        for t, old in zip(leaves, before, strict=True):
            if t is not None:
                t.grad = old


# --- symbols -----------------------------------------------------------------------------

def _call_apply(call: AutogradFunctionCall, *args: Any, **kwargs: Any) -> Any:
    return call.apply(*args, **kwargs)


def _call_forward(call: AutogradFunctionCall, *args: Any, **kwargs: Any) -> Any:
    return call.forward_with_ctx(*args, **kwargs)


def _call_backward(call: AutogradFunctionCall, *args: Any, **kwargs: Any) -> Any:
    return call.backward(*args, **kwargs)


def apply_symbol(meta: Callable[..., Any] | None = None) -> Symbol:
    """`Fn.apply(...)`. `meta` (for grad rules that re-record the call) returns its outputs."""
    return Symbol(name="apply", id=APPLY_ID, fn=_call_apply, kind=SymbolKind.METHOD, meta=meta)


def forward_symbol(meta: Callable[..., Any]) -> Symbol:
    return Symbol(name="forward_with_ctx", id=FORWARD_ID, fn=_call_forward,
                  kind=SymbolKind.METHOD, meta=meta, label="forward")


def backward_symbol(meta: Callable[..., Any]) -> Symbol:
    return Symbol(name="backward", id=BACKWARD_ID, fn=_call_backward, kind=SymbolKind.METHOD,
                  meta=meta, label="backward")


# --- capture -----------------------------------------------------------------------------

_ORIGINAL_APPLY = Function.__dict__["apply"]
_patch_lock = threading.Lock()
_patch_users = 0
_tracing = threading.local()  # .recorders: the recorders active in this thread


def _intercepted_apply(cls: type, *args: Any, **kwargs: Any) -> Any:
    recorders = getattr(_tracing, "recorders", None)
    if not recorders:
        return _ORIGINAL_APPLY.__func__(cls, *args, **kwargs)
    return _record_apply(recorders[-1], cls, args, kwargs)


@contextlib.contextmanager
def intercepting_function_apply(recorder: Any) -> Iterator[None]:
    """While the body runs, `Function.apply` called in this thread is recorded by
    `recorder`; other threads' calls run as usual. The original `apply` is back when the
    last trace using it ends."""
    global _patch_users
    with _patch_lock:
        if _patch_users == 0:
            Function.apply = classmethod(_intercepted_apply)
        _patch_users += 1
    stack = getattr(_tracing, "recorders", None)
    if stack is None:
        stack = _tracing.recorders = []
    stack.append(recorder)
    try:
        yield
    finally:
        stack.pop()
        with _patch_lock:
            _patch_users -= 1
            if _patch_users == 0:
                Function.apply = _ORIGINAL_APPLY


def _bind_default_args(cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]
                       ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """What `Function.apply` does for a Function with setup_context: defaults filled in."""
    if not _defines_setup_context(cls):
        return args, kwargs
    bound = inspect.signature(cls.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.args, bound.kwargs


def _record_apply(recorder: Any, cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run one `cls.apply(*args)` on the traced tensors and record it as one bound symbol."""
    source = user_source(skip=2)
    module_path = recorder.module_path
    name = f"{cls.__qualname__}.apply"
    args, kwargs = _bind_default_args(cls, args, kwargs)
    grad_enabled = torch.is_grad_enabled()
    p_args, p_kwargs = recorder.proxify((args, kwargs))
    needs = tuple(grad_enabled and isinstance(p, TensorProxy) and p.requires_grad for p in p_args)
    run_args = tuple(_grad_alias(recorder, a) if need else a for a, need in zip(args, needs, strict=True))
    ctx = FunctionContext(needs)
    frame = _Frame()
    outer_source, recorder._source = recorder._source, source
    try:
        with recorder._collecting(frame), torch.no_grad():
            out = run_forward(cls, ctx, run_args, kwargs)
            outs = out if isinstance(out, tuple) else (out,)
            # an input returned as it is: eager returns a view of it (recorded here)
            aliased = [o.view_as(o) if isinstance(o, torch.Tensor) and any(o is a for a in run_args)
                       else o for o in outs]
    except CaptureError:
        raise
    except Exception as e:
        raise CaptureError(f"{name} failed at {where(source, module_path)}: {type(e).__name__}: {e}",
                           op=name, source=source, module_path=module_path) from e
    finally:
        recorder._source = outer_source
    if ctx.dirty_tensors or frame.mutated:
        what = "marks inputs dirty (ctx.mark_dirty)" if ctx.dirty_tensors else "writes into a tensor it did not create"
        raise CaptureError(
            f"{name} at {where(source, module_path)} {what}: thunderviz records autograd.Functions "
            "whose forward is out of place only. Return a new tensor instead of modifying one in "
            "place (for torch.utils.checkpoint over layers that update buffers, such as "
            "BatchNorm: use_reentrant=False).", op=name, source=source, module_path=module_path)
    out = tuple(aliased) if isinstance(out, tuple) else aliased[0]
    differentiable = any(needs)
    non_diff = {id(t) for t in ctx.non_differentiable}
    renames: dict[str, Proxy] = {}
    for o in aliased:
        if isinstance(o, torch.Tensor):
            p = recorder.proxy_of(o)
            wants = differentiable and id(o) not in non_diff and p.is_float
            if p.requires_grad != wants:
                renames[p.name] = TensorProxy(p.name, p.shape, p.dtype, p.device, wants)
                recorder.bind(o, renames[p.name])
    subsymbols = [b.rename(renames) for b in frame.bsyms]
    p_args = tuple(_printable(recorder, a) for a in p_args)
    p_kwargs = {k: _printable(recorder, v) for k, v in p_kwargs.items()}
    reads = _outside_reads(subsymbols, p_args, p_kwargs)
    _refuse_stale_reads(recorder, reads, name, source, module_path)
    output = recorder.proxify(out)
    call = AutogradFunctionCall(cls, output, source, module_path)
    call_proxy = ObjectProxy(recorder.names.claim(cls.__name__), call)
    recorder.constants[call_proxy.name] = call
    bsym = BoundSymbol(sym=apply_symbol(), args=(call_proxy, *p_args),
                       kwargs={**p_kwargs, **({"reads": reads} if reads else {})},
                       output=output, subsymbols=subsymbols, source=source,
                       module_path=module_path, header=f"autograd.Function {cls.__qualname__}: "
                       f"its backward is {cls.__qualname__}.backward")
    if not grad_enabled:
        bsym.tags.add(BsymTag.NO_GRAD)
    recorder._append(bsym)
    return out


def _refuse_stale_reads(recorder: Any, reads: tuple[TensorProxy, ...], name: str, source: Any,
                        module_path: str) -> None:
    """A value the program computed, read by the forward without being an argument, reaches
    it through a Python closure made while tracing: replayed, the closure would hand it the
    traced value, not the new one. (Parameters and buffers are read through their module,
    as they are at every call.)"""
    made = {p.name for frame in recorder._frames for top in frame.bsyms for b in top.walk()
            for p in b.flat_proxy_outs}
    stale = [p.name for p in reads if p.name in made]
    if stale:
        raise CaptureError(
            f"{name} at {where(source, module_path)}: its forward reads {', '.join(stale)}, "
            "computed earlier in the program but not passed to it (a lambda or "
            "functools.partial holding a tensor): replayed, the Function would see the traced "
            "value. Pass the tensor as an argument of the call (checkpoint(fn, x, mask) rather "
            "than checkpoint(lambda x: fn(x, mask), x)).", op=name, source=source,
            module_path=module_path)


def _grad_alias(recorder: Any, t: Any) -> Any:
    """The input as the forward sees it in eager: a tensor that requires grad (a reentrant
    checkpoint checks it). Made outside the recording, bound to the input's proxy."""
    if not isinstance(t, torch.Tensor):
        return t
    with torch.overrides._pop_mode_temporarily(), torch.utils._python_dispatch._disable_current_modes():
        alias = t.detach().requires_grad_(True)
    recorder.bind(alias, recorder.proxy_of(t))
    return alias


def _printable(recorder: Any, value: Any) -> Any:
    """A non-tensor argument as the trace prints it: itself when it has a Python literal
    (numbers, strings, None, dtypes...), else a captured constant (a module, a function)."""
    if isinstance(value, Proxy):
        return value
    try:
        codeval(value)
        return value
    except TypeError:
        name = getattr(value, "__name__", None) or type(value).__name__.lower()
        proxy = ObjectProxy(recorder.names.claim(name), value)
        recorder.constants[proxy.name] = value
        return proxy


def _outside_reads(subsymbols: list[BoundSymbol], args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> tuple[TensorProxy, ...]:
    """Tensors the forward's ops read that are neither its arguments nor made inside it."""
    given = {p.name for p in BoundSymbol(sym=apply_symbol(), args=args, kwargs=kwargs,
                                         output=None).flat_proxy_args}
    made: set[str] = set()
    reads: dict[str, TensorProxy] = {}
    for b in subsymbols:
        for sub in b.walk():
            for p in sub.flat_tensor_args:
                if p.name not in made and p.name not in given:
                    reads.setdefault(p.name, p)
            made.update(p.name for p in sub.flat_proxy_outs)
    return tuple(reads.values())
