"""Recording `torch.autograd.Function.apply` calls while a trace runs.

`Function.apply` never reaches a TorchFunctionMode, and it runs the Function's forward under
no_grad: recorded op by op, its output would look like it needs no gradient and the user's
`backward` would never be used. So while a trace runs, `Function.apply` is intercepted (for
the tracing thread only; other threads call torch's) and each call becomes one bound symbol
on an `AutogradFunctionCall` constant (see capture/custom_function.py).
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

import torch
from torch.autograd.function import Function

from thunderviz.capture.class_patches import class_patched
from thunderviz.capture.custom_function import (
    AutogradFunctionCall,
    FunctionContext,
    ObjectProxy,
    apply_symbol,
    defines_setup_context,
    held_tensors,
    run_forward,
)
from thunderviz.capture.dispatch_mode import unrecorded
from thunderviz.capture.errors import CaptureError
from thunderviz.capture.recorder_state import Frame
from thunderviz.capture.source import user_source
from thunderviz.core.codegen import codeval
from thunderviz.core.locations import where
from thunderviz.core.proxies import Proxy, TensorProxy, leaves, map_leaves
from thunderviz.core.symbol import BoundSymbol, BsymTag, Origin

__all__ = [
    "intercepting_function_apply",
    "printable",
    "printable_arguments",
    "read_through",
    "record_apply",
    "traced_tensors_held",
]

# a classmethod, or (torch 2.14) a C++ classmethod_descriptor: bound alike by __get__
_ORIGINAL_APPLY = Function.__dict__["apply"]
# The recorders tracing in this thread (and asyncio task), innermost last.
_recorders: ContextVar[tuple[Any, ...]] = ContextVar("thunderviz_apply_recorders", default=())


def _intercepted_apply(cls: type, *args: Any, **kwargs: Any) -> Any:
    recorders = _recorders.get()
    if not recorders:
        return _ORIGINAL_APPLY.__get__(None, cls)(*args, **kwargs)
    return record_apply(recorders[-1], cls, args, kwargs)


@contextlib.contextmanager
def intercepting_function_apply(recorder: Any) -> Iterator[None]:
    """While the body runs, `Function.apply` called in this thread is recorded by
    `recorder`; other threads' calls run as usual. The original `apply` is back when the
    last trace using it ends."""
    # a classmethod where torch's class defines one (a C++ descriptor in torch 2.14)
    with class_patched(Function, "apply", classmethod(_intercepted_apply)):
        token = _recorders.set((*_recorders.get(), recorder))
        try:
            yield
        finally:
            _recorders.reset(token)


def _bind_default_args(
    cls: type, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """What `Function.apply` does for a Function with setup_context: defaults filled in."""
    if not defines_setup_context(cls):
        return args, kwargs
    bound = inspect.signature(cls.forward).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.args, bound.kwargs


def record_apply(
    recorder: Any,
    cls: type,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    header: str | None = None,
) -> Any:
    """Run one `cls.apply(*args)` on the traced tensors and record it as one bound symbol
    (`header`: the comment above it, if not the one naming the Function's backward)."""
    source = user_source(skip=2)
    module_path = recorder.module_path
    name = f"{cls.__qualname__}.apply"
    args, kwargs = _bind_default_args(cls, args, kwargs)
    grad_enabled = torch.is_grad_enabled()
    p_args, p_kwargs = recorder.proxify((args, kwargs))
    needs = tuple(grad_enabled and isinstance(p, TensorProxy) and p.requires_grad for p in p_args)
    # Each tensor argument reaches the forward as a fresh alias of itself (requiring grad where
    # it needs a gradient, as in eager): an in-place write (ctx.mark_dirty) moves only the
    # alias's proxy, and the argument takes the call's output as its new value afterwards.
    run_args = tuple(_alias(recorder, a, need) for a, need in zip(args, needs, strict=True))
    ctx = FunctionContext(needs)
    frame = Frame()
    before = dict(recorder._proxies)
    outer_source, recorder._source = recorder._source, source
    try:
        with recorder._collecting(frame), torch.no_grad():
            out = run_forward(cls, ctx, run_args, kwargs)
            outs = out if isinstance(out, tuple) else (out,)
            dirty = {id(t) for t in ctx.dirty_tensors}
            # an input returned as it is (not dirty): eager returns a view of it (recorded here)
            aliased = [
                o.view_as(o)
                if isinstance(o, torch.Tensor)
                and id(o) not in dirty
                and any(o is a for a in run_args)
                else o
                for o in outs
            ]
    except CaptureError:
        raise
    except Exception as e:
        raise CaptureError(
            f"{name} failed at {where(source, module_path)}: {type(e).__name__}: {e}",
            op=name,
            source=source,
            module_path=module_path,
        ) from e
    finally:
        recorder._source = outer_source
    dirty_positions = tuple(i for i, a in enumerate(run_args) if id(a) in dirty)
    written = {k for k, p in before.items() if recorder._proxies.get(k) is not p}
    allowed = {id(run_args[i]) for i in dirty_positions}
    if (
        len(dirty_positions) != len(dirty)
        or not written <= allowed
        or any(not any(o is run_args[i] for o in outs) for i in dirty_positions)
    ):
        raise CaptureError(
            f"{name} at {where(source, module_path)} writes into a tensor in place that is not "
            "an argument it marks dirty and returns (ctx.mark_dirty): thunderviz records such a "
            "write only when eager's rules for it hold. Return a new tensor instead (for "
            "torch.utils.checkpoint over layers that update buffers, such as BatchNorm: "
            "use_reentrant=False).",
            op=name,
            source=source,
            module_path=module_path,
        )
    differentiable = any(needs)
    non_diff = {id(t) for t in ctx.non_differentiable}
    renames: dict[str, Proxy] = {}
    for o in aliased:
        if isinstance(o, torch.Tensor):
            p = recorder.proxy_of(o)
            wants = differentiable and id(o) not in non_diff and p.is_float
            if p.requires_grad != wants:
                renames[p.name] = TensorProxy(p.name, p.shape, p.dtype, p.device, wants)
                with torch._C.DisableTorchFunction():  # (reads its version: not the program's)
                    recorder.bind(o, renames[p.name])
    subsymbols = [b.rename(renames) for b in frame.bsyms]
    p_args = tuple(printable(recorder, a) for a in p_args)
    p_kwargs = {k: printable(recorder, v) for k, v in p_kwargs.items()}
    reads = _outside_reads(subsymbols, p_args, p_kwargs)
    held = traced_tensors_held(recorder, args)
    held_names = {recorder.proxy_of(t).name for t in held}
    reads = tuple(r for r in reads if r.name not in held_names)
    _refuse_stale_reads(recorder, reads, name, source, module_path)
    output = recorder.proxify(tuple(aliased) if isinstance(out, tuple) else aliased[0])
    # eager's output is the dirty argument itself, holding the new value from now on
    returned = {id(run_args[i]): args[i] for i in dirty_positions}
    aliased = [returned.get(id(o), o) for o in aliased]
    out = tuple(aliased) if isinstance(out, tuple) else aliased[0]
    call = AutogradFunctionCall(cls, output, source, module_path, dirty_positions, held)
    call.traced_ops = subsymbols
    call_proxy = ObjectProxy(recorder.names.claim(cls.__name__), call)
    recorder.constants[call_proxy.name] = call
    bsym = BoundSymbol(
        sym=apply_symbol(),
        args=(call_proxy, *p_args),
        kwargs={
            **p_kwargs,
            **({"reads": reads} if reads else {}),
            **({"held": tuple(recorder.proxy_of(t) for t in held)} if held else {}),
        },
        output=output,
        subsymbols=subsymbols,
        origin=Origin(source, module_path),
        header=header
        or f"autograd.Function {cls.__qualname__}: its backward is {cls.__qualname__}.backward",
    )
    if not grad_enabled:
        bsym.tags.add(BsymTag.NO_GRAD)
    recorder._append(bsym)
    for i in dirty_positions:  # after the call: a view's write reaches its base
        recorder._write(args[i], recorder.proxy_of(run_args[i]))
    return out


def _refuse_stale_reads(
    recorder: Any, reads: tuple[TensorProxy, ...], name: str, source: Any, module_path: str
) -> None:
    """A value the program computed, read by the forward without being an argument or held by
    a function passed to it, reaches it through some object made while tracing (an
    attribute set on a module): replayed, that object would hand it the traced value, not
    the new one. (Parameters and buffers are read through their module, as at every call.)"""
    made = {
        p.name
        for frame in recorder._frames
        for top in frame.bsyms
        for b in top.walk()
        for p in b.flat_proxy_outs
    }
    stale = [p.name for p in reads if p.name in made]
    if stale:
        raise CaptureError(
            f"{name} at {where(source, module_path)}: its forward reads {', '.join(stale)}, "
            "computed earlier in the program but not passed to it (kept on an object, such as "
            "an attribute set on a module): replayed, the Function would see the traced value. "
            "Pass the tensor as an argument of the call (checkpoint(fn, x, mask)).",
            op=name,
            source=source,
            module_path=module_path,
        )


def traced_tensors_held(recorder: Any, args: tuple[Any, ...]) -> tuple[torch.Tensor, ...]:
    """Traced tensors that the non-tensor values among `args` hold (a lambda's closure, a
    partial's arguments: Hugging Face's checkpointing binds the attention mask so); tensors
    captured as constants, the same in every run, are not. A Function call gets each run's
    values in their place (`held=`); a tensor hook holding one is refused
    (capture/tensor_hooks.py)."""
    constants = {id(t) for t in recorder.constants.values()}
    found: dict[int, torch.Tensor] = {}
    for a in args:
        if not isinstance(a, torch.Tensor):
            for t in held_tensors(a):
                if id(t) in recorder._proxies and id(t) not in constants:
                    found.setdefault(id(t), t)
    return tuple(found.values())


def _alias(recorder: Any, t: Any, requires_grad: bool) -> Any:
    """The argument as the forward sees it: the same values in a tensor of its own (a copy
    when it is the user's own tensor, so tracing never writes into it), which requires grad
    where eager's would (a reentrant checkpoint checks). Made outside the recording, bound
    to the argument's proxy."""
    if not isinstance(t, torch.Tensor):
        return t
    users = any(t is c for c in recorder.constants.values())  # the user's own tensor: a copy
    with unrecorded():
        alias = (t.detach().clone() if users else t.detach()).requires_grad_(requires_grad)
        recorder.bind(alias, recorder.proxy_of(t))  # (reads its version: not the program's)
    return alias


def printable(recorder: Any, value: Any) -> Any:
    """A non-tensor argument as the trace prints it: itself when it has a Python literal
    (numbers, strings, None, dtypes...), else a captured constant (a module, a function, an
    options object)."""
    if isinstance(value, Proxy) or type(value) in _LITERALS:
        return value
    try:
        codeval(value)
        return value
    except TypeError:
        name = getattr(value, "__name__", None) or type(value).__name__.lower()
        proxy = ObjectProxy(recorder.names.claim(name), value)
        recorder.constants[proxy.name] = value
        return proxy


# Types codeval prints as literals, recognised without trying (`printable` runs per argument
# of every torch call)
_LITERALS = frozenset({bool, int, float, str, type(None), torch.dtype, torch.device})


def printable_arguments(recorder: Any, tree: Any) -> Any:
    """`tree` (a call's proxied arguments) with every leaf the trace could not print as a
    literal made a captured constant (`printable`)."""
    if all(type(x) in _LITERALS or isinstance(x, Proxy) for x in leaves(tree, [])):
        return tree  # the common case: nothing to rebuild
    return map_leaves(tree, lambda x: printable(recorder, x))


def _outside_reads(
    subsymbols: list[BoundSymbol], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[TensorProxy, ...]:
    """Tensors the forward's ops read that are neither its arguments nor made inside it."""
    given = {
        p.name
        for p in BoundSymbol(
            sym=apply_symbol(), args=args, kwargs=kwargs, output=None
        ).flat_proxy_args
    }
    made: set[str] = set()
    reads: dict[str, TensorProxy] = {}
    for b in subsymbols:
        for sub in b.walk():
            for p in sub.flat_tensor_args:
                if p.name not in made and p.name not in given:
                    reads.setdefault(p.name, p)
            made.update(p.name for p in sub.flat_proxy_outs)
    return tuple(reads.values())


def read_through(recorder: Any, tensor: torch.Tensor, function: Any, *args: Any) -> None:
    """From here on the program reads `tensor` as `function.apply(tensor, *args)`: the call
    is recorded as any Function call is, with grad enabled (its backward is the point), and
    the tensor's proxy moves to the call's output. For the recorder's own handlers, inside
    which its function mode is off the stack (capture/tensor_hooks.py,
    capture/no_grad_updates.py)."""
    with torch.enable_grad(), recorder.function_mode:
        out = function.apply(tensor, *args)
    recorder.read_as(tensor, recorder.proxy_of(out))
