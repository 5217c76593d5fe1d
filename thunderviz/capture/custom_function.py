"""User-defined `torch.autograd.Function`s in traces: the call, its ctx, the user's backward.

A call is recorded (capture/function_apply.py) as ONE bound symbol
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
import functools
import inspect
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.autograd.function import Function, FunctionCtx

from thunderviz.capture.dispatch_mode import recording
from thunderviz.capture.function_graph import joined_to_inputs, keeps_graph
from thunderviz.core.proxies import Proxy
from thunderviz.core.symbol import Symbol, SymbolKind

__all__ = [
    "APPLY_ID",
    "FORWARD_ID",
    "BACKWARD_ID",
    "AutogradFunctionCall",
    "FunctionContext",
    "ObjectProxy",
    "has_backward",
    "run_forward",
    "defines_setup_context",
    "apply_symbol",
    "forward_symbol",
    "backward_symbol",
    "held_tensors",
    "with_held",
]

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
        # thunderviz's own: held tensors that need a gradient, and what the forward made
        self._thunderviz_held: tuple[Any, ...] = ()
        self._thunderviz_call: _CallRecord | None = None

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

    def __init__(
        self,
        cls: type,
        outputs: Any,
        source: Any,
        module_path: str,
        dirty_inputs: tuple[int, ...] = (),
        held: tuple[torch.Tensor, ...] = (),
    ) -> None:
        self.cls = cls
        self.outputs = outputs
        self.source = source
        self.module_path = module_path
        self.dirty_inputs = dirty_inputs  # arguments its forward writes in place (mark_dirty)
        self.held = held  # traced tensors held by functions passed to it, as traced
        self.traced_ops: list[Any] = []  # the forward's bound symbols as traced (for viewing)

    def _with_held(self, args: tuple[Any, ...], values: tuple[Any, ...]) -> tuple[Any, ...]:
        """The arguments with each held tensor replaced by this call's value of it."""
        if not self.held:
            return args
        replace = {id(t): v for t, v in zip(self.held, values, strict=True)}
        return tuple(a if isinstance(a, torch.Tensor) else with_held(a, replace) for a in args)

    def __repr__(self) -> str:
        return f"<autograd.Function {self.cls.__module__}.{self.cls.__qualname__}>"

    # --- the forward trace ---------------------------------------------------------------
    def apply(
        self, *args: Any, reads: tuple[Any, ...] = (), held: tuple[Any, ...] = (), **kwargs: Any
    ) -> Any:
        """The user's call, as written (`reads` only names what the forward reads; `held`
        are this call's values of the tensors its function arguments hold)."""
        return self.cls.apply(*self._with_held(args, held), **kwargs)

    # --- the augmented forward -----------------------------------------------------------
    def forward_with_ctx(
        self,
        needs_input_grad: tuple[bool, ...],
        *args: Any,
        held: tuple[Any, ...] = (),
        held_needs: tuple[bool, ...] = (),
        **kwargs: Any,
    ) -> tuple[Any, FunctionContext]:
        """Run the user's forward as `Function.apply` does (no_grad, a fresh ctx) and return
        its outputs and the ctx. Inputs that need a gradient reach the forward as tensors
        that require grad, as in eager (a reentrant backward detaches them and asks for
        their `.grad`); so do held tensors that need one (`held_needs`)."""
        ctx = FunctionContext(needs_input_grad)
        needs = held_needs or (False,) * len(held)
        held = tuple(
            v.detach().requires_grad_(True) if need and not keeps_graph(v) else v
            for v, need in zip(held, needs, strict=True)
        )
        ctx._thunderviz_held = tuple(v for v, need in zip(held, needs, strict=True) if need)
        args = self._with_held(args, held)
        run_args = tuple(
            self._argument(i, a, need)
            for i, (a, need) in enumerate(zip(args, needs_input_grad, strict=True))
        )
        with torch.no_grad():
            out = run_forward(self.cls, ctx, run_args, kwargs)
        outs = out if isinstance(out, tuple) else (out,)
        aliased = [
            o if any(o is t for t in ctx.dirty_tensors) else _alias_if_input(o, run_args)
            for o in outs
        ]
        out = tuple(aliased) if isinstance(out, tuple) else aliased[0]
        non_diff = {i for i, o in enumerate(outs) if any(o is t for t in ctx.non_differentiable)}
        ctx._thunderviz_call = _CallRecord(
            [_TensorMeta.of(a) if isinstance(a, torch.Tensor) else None for a in args],
            [_TensorMeta.of(o) if isinstance(o, torch.Tensor) else None for o in aliased],
            non_diff,
        )
        if torch.is_grad_enabled() and not recording():  # a double backward's recompute
            out = joined_to_inputs(self, ctx, out, run_args)
        return out, ctx

    def _argument(self, index: int, a: Any, needs_grad: bool) -> Any:
        """An argument as the forward gets it: one it writes in place is a copy (values in a
        trace are never overwritten; the trace names the new value), one that needs a
        gradient requires grad (as in eager; a reentrant checkpoint asks for its `.grad`)."""
        if not isinstance(a, torch.Tensor):
            return a
        if index in self.dirty_inputs:
            a = a.clone()
        if recording() or keeps_graph(a):
            # a backward traced inside the program, or a double backward's recompute, runs
            # this forward: a detach would cut what the user's backward reads from what the
            # gradient of that backward flows to (capture/function_graph.py)
            return a
        return a.detach().requires_grad_(True) if needs_grad else a

    # --- the backward --------------------------------------------------------------------
    def backward(
        self,
        ctx: FunctionContext,
        *grad_outputs: Any,
        accumulated: tuple[Any, ...] = (),
        kept: tuple[Any, ...] = (),
    ) -> tuple[torch.Tensor, ...]:
        """The user's backward on `ctx`: one gradient per input that needs one (zeros where
        it returns None), then one per tensor in `accumulated` and per held tensor that needs
        one (what the backward added to its `.grad`, zeros if nothing). `kept`: tensors the
        forward reads that are not differentiated (a tensor the program captured, the
        user's): what the backward adds to their `.grad` is dropped."""
        record = ctx._thunderviz_call
        assert record is not None  # set by the forward, which ran on this ctx first
        grads_in = []
        for i, g in enumerate(grad_outputs):
            meta = record.outputs[i] if i < len(record.outputs) else None
            if i in record.non_differentiable:
                g = None
            if g is None and meta is not None and ctx.materialize_grads:
                g = meta.zeros()
            grads_in.append(g)
        accumulated = (*accumulated, *ctx._thunderviz_held)
        leaves = [
            t if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad else None
            for t in accumulated
        ]
        untouched: list[torch.Tensor | None] = [
            t for t in kept if isinstance(t, torch.Tensor) and t.is_leaf and t.requires_grad
        ]
        with _grads_collected(leaves) as collected, _grads_collected(untouched):
            raw = _user_backward(self.cls)(ctx, *grads_in)
        raw = raw if isinstance(raw, tuple) else (raw,)
        n = len(record.inputs)
        if len(raw) < n or any(g is not None for g in raw[n:]):
            raise RuntimeError(
                f"{self.cls.__qualname__}.backward returned {len(raw)} gradients; its forward "
                f"takes {n} inputs (one gradient, or None, per input)"
            )
        out = []
        for i, need in enumerate(ctx.needs_input_grad):
            meta = record.inputs[i]
            if need and meta is not None:
                if raw[i] is None:
                    self._warn_zeros(f"returned None as the gradient of input {i}, which needs one")
                out.append(meta.zeros() if raw[i] is None else self._fitted(raw[i], meta, i))
        if accumulated and all(g is None for g in collected):
            self._warn_zeros(
                "accumulated nothing into the .grad of the tensors its forward reads "
                "without taking them as arguments"
            )
        for t, g in zip(accumulated, collected, strict=True):
            out.append(g if g is not None else torch.zeros_like(t))
        return tuple(out)

    def _warn_zeros(self, what: str) -> None:
        """A gradient eager leaves as None is zeros in a trace (a trace has no None values):
        the sums are the same, but an optimizer skips a None gradient and not a zero one."""
        warnings.warn(
            f"{self.cls.__qualname__}.backward {what}: thunderviz uses zeros there, "
            "where eager gives no gradient (None). Return a gradient (or pass the "
            "tensor as an argument and return its gradient) to train it as eager does.",
            stacklevel=3,
        )

    def _fitted(self, g: torch.Tensor, meta: _TensorMeta, index: int) -> torch.Tensor:
        """The autograd engine's checks on a custom backward's gradient: a broadcast shape is
        summed back to the input's, dtype and device follow the input's."""
        if not isinstance(g, torch.Tensor):
            raise RuntimeError(
                f"{self.cls.__qualname__}.backward returned a {type(g).__name__} "
                f"as the gradient of input {index}; expected a tensor or None"
            )
        if tuple(g.shape) != meta.shape:
            try:
                g = g.sum_to_size(meta.shape)
            except RuntimeError:
                raise RuntimeError(
                    f"{self.cls.__qualname__}.backward returned an invalid gradient at index "
                    f"{index} - got {list(g.shape)} but expected shape compatible with "
                    f"{list(meta.shape)}"
                ) from None
        return g.to(dtype=meta.dtype, device=meta.device)


def _alias_if_input(o: Any, inputs: tuple[Any, ...]) -> Any:
    """An input returned as it is becomes a view of it, as `Function.apply` makes it."""
    if isinstance(o, torch.Tensor) and any(o is a for a in inputs):
        with torch.no_grad():
            return o.view_as(o)
    return o


def run_forward(
    cls: type, ctx: FunctionContext, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The user's forward: `forward(ctx, *args)`, or `forward(*args)` then
    `setup_context(ctx, inputs, output)` for a Function that defines setup_context."""
    if defines_setup_context(cls):
        out = cls.forward(*args, **kwargs)
        cls.setup_context(ctx, args, out)
        return out
    return cls.forward(ctx, *args, **kwargs)


def defines_setup_context(cls: type) -> bool:
    return cls.setup_context is not Function.setup_context


def _user_backward(cls: type) -> Callable[..., Any]:
    """`vjp` if the Function defines it, else `backward` (as BackwardCFunction picks)."""
    if cls.backward is not Function.backward and cls.vjp is not Function.vjp:
        raise RuntimeError(
            f"{cls.__qualname__} implements both 'backward' and 'vjp'; implement only one of them"
        )
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


def held_tensors(value: Any, depth: int = 0) -> list[torch.Tensor]:
    """Tensors a callable holds on to: in closure cells, defaults and a partial's arguments
    (a module it holds is read at call time, so its attributes are not held values)."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in held_tensors(v, depth)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in held_tensors(v, depth)]
    if depth > 3:
        return []
    return [t for part in _parts(value) for t in held_tensors(part, depth + 1)]


def _parts(value: Any) -> list[Any]:
    if isinstance(value, functools.partial):
        return [value.func, value.args, value.keywords]
    if inspect.ismethod(value):
        return [value.__func__]
    if inspect.isfunction(value):
        return [_cells(value), value.__defaults__ or (), value.__kwdefaults__ or {}]
    return []


def _cells(fn: Any) -> list[Any]:
    out = []
    for cell in fn.__closure__ or ():
        try:
            out.append(cell.cell_contents)
        except ValueError:  # a cell not filled yet
            out.append(None)
    return out


def with_held(value: Any, replace: dict[int, Any], depth: int = 0) -> Any:
    """`value` rebuilt with the tensors it holds (as `held_tensors` finds them) replaced by
    identity; the original is left as it is."""
    if isinstance(value, torch.Tensor):
        return replace.get(id(value), value)
    if type(value) in (tuple, list):
        return type(value)(with_held(v, replace, depth) for v in value)
    if type(value) is dict:
        return {k: with_held(v, replace, depth) for k, v in value.items()}
    if depth > 3 or not held_tensors(value, depth):
        return value
    again = functools.partial(with_held, replace=replace, depth=depth + 1)
    if isinstance(value, functools.partial):
        return functools.partial(again(value.func), *again(value.args), **again(value.keywords))
    if inspect.ismethod(value):
        return types.MethodType(again(value.__func__), value.__self__)
    if inspect.isfunction(value):
        cells = (
            tuple(types.CellType(c) for c in again(_cells(value))) if value.__closure__ else None
        )
        fn = types.FunctionType(
            value.__code__, value.__globals__, value.__name__, again(value.__defaults__), cells
        )
        fn.__kwdefaults__ = again(value.__kwdefaults__)
        fn.__qualname__ = value.__qualname__
        fn.__dict__.update(value.__dict__)
        return fn
    return value


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
    return Symbol(
        name="forward_with_ctx",
        id=FORWARD_ID,
        fn=_call_forward,
        kind=SymbolKind.METHOD,
        meta=meta,
        label="forward",
    )


def backward_symbol(meta: Callable[..., Any]) -> Symbol:
    return Symbol(
        name="backward",
        id=BACKWARD_ID,
        fn=_call_backward,
        kind=SymbolKind.METHOD,
        meta=meta,
        label="backward",
    )
