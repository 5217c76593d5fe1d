"""`thunderviz.jit`: run a function or module through our traces, trained by torch.autograd.

The forward runs the augmented forward trace; the backward runs the backward trace, inside a
`torch.autograd.Function`, so `loss.backward()`, `.grad` accumulation and optimizers work as
with eager PyTorch. Traces are cached per input signature and rebuilt when shapes, dtypes,
devices, `requires_grad` flags, number values or the module's training mode change.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.autodiff.api import differentiate
from thunderviz.autodiff.remat import rematerialize
from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.capture import trace
from thunderviz.core.proxies import TensorProxy
from thunderviz.core.trace import Trace
from thunderviz.executor.ddp import DDPSync

__all__ = ["jit", "JittedFunction", "last_traces", "last_backward_traces", "CompiledEntry"]


@dataclass
class CompiledEntry:
    """One cache entry: the traces for one input signature and their compiled callables."""

    forward: Trace
    result: AutodiffResult | None  # None when nothing requires grad
    run_forward: Callable[..., Any]
    run_augmented: Callable[..., Any] | None = None
    run_backward: Callable[..., Any] | None = None
    differentiable_outputs: list[int] = field(default_factory=list)  # flat output positions
    n_args: int = 0


class _TraceFunction(torch.autograd.Function):
    """Bridges one call: forward = augmented forward trace, backward = backward trace."""

    @staticmethod
    def forward(ctx: Any, entry: CompiledEntry, kwarg_names: tuple[str, ...], *flat: Any) -> Any:
        n_pos = len(flat) - len(kwarg_names)
        out, saved = entry.run_augmented(*flat[:n_pos], **dict(zip(kwarg_names, flat[n_pos:], strict=True)))
        ctx.entry = entry
        flat_out = pytree.tree_leaves(out)
        # Inputs and outputs go through save_for_backward (autograd checks they were not
        # modified in place before backward). Intermediates the forward made are held on
        # ctx directly, as torch's docs advise: nothing else can see or modify them, and
        # packing hundreds of them costs more than the checks are worth.
        exposed = {id(t) for t in (*flat, *flat_out) if isinstance(t, torch.Tensor)}
        checked = [i for i, t in enumerate(saved) if id(t) in exposed]
        ctx.layout = (len(saved), checked)
        ctx.save_for_backward(*(saved[i] for i in checked))
        checked_set = set(checked)
        ctx.intermediates = [t for i, t in enumerate(saved) if i not in checked_set]
        non_diff = [o for i, o in enumerate(flat_out) if isinstance(o, torch.Tensor)
                    and i not in entry.differentiable_outputs]
        ctx.mark_non_differentiable(*non_diff)
        return tuple(flat_out)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> Any:
        entry: CompiledEntry = ctx.entry
        n_saved, checked = ctx.layout
        saved: list[Any] = [None] * n_saved
        for i, t in zip(checked, ctx.saved_tensors, strict=True):
            saved[i] = t
        rest = iter(ctx.intermediates)
        for i in range(n_saved):
            if saved[i] is None:
                saved[i] = next(rest)
        ctx.intermediates = None
        cotangents = tuple(grad_outputs[i] for i in entry.differentiable_outputs)
        grads = entry.run_backward(tuple(saved), cotangents)
        return (None, None, *grads)


class JittedFunction:
    """What `thunderviz.jit` returns. Call it like the original."""

    def __init__(self, fn: Callable[..., Any], *, rematerialize: bool = False) -> None:
        if not callable(fn):
            raise TypeError(f"thunderviz.jit expects a function or an nn.Module, got {type(fn).__name__}")
        self.ddp = DDPSync.of(fn)  # DistributedDataParallel: its module, DDP's sync in backward
        if self.ddp is not None:
            fn = self.ddp.module
        self.fn = fn
        self.module = fn if isinstance(fn, torch.nn.Module) else None
        self.rematerialize = rematerialize
        self._cache: dict[Any, CompiledEntry] = {}
        # The module tree, walked once: parameters/buffers/training flags are read from it
        # on every call, and `module.parameters()` re-walks the tree each time.
        self._submodules = list(self.module.modules()) if self.module is not None else []
        self.last: CompiledEntry | None = None
        self.cache_misses = 0
        functools.update_wrapper(self, fn if not self.module else type(fn).forward, updated=())

    # --- calling ---------------------------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.ddp is not None:
            self.ddp.before_forward()
        flat_inputs = self._flat_inputs(args, kwargs)
        key = self._key(flat_inputs, kwargs)
        entry = self._cache.get(key)
        if entry is None:
            entry = self._compile(args, kwargs)
            self._cache[key] = entry
            self.cache_misses += 1
        self.last = entry
        kw_names = tuple(entry.forward.kwargs)
        if entry.result is None:
            return self._unflatten(entry, pytree.tree_leaves(
                entry.run_forward(*flat_inputs[: entry.n_args], **self._kw(entry, flat_inputs))))
        outs = _TraceFunction.apply(entry, kw_names, *flat_inputs)
        return self._unflatten(entry, list(outs))

    def _kw(self, entry: CompiledEntry, flat: list[Any]) -> dict[str, Any]:
        return dict(zip(entry.forward.kwargs, flat[entry.n_args:], strict=True))

    def _flat_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The trace's inputs in order: positional leaves, parameters, buffers (each once, in
        `named_parameters()` / `named_buffers()` order), keyword leaves."""
        state: list[Any] = []
        for attr in ("_parameters", "_buffers"):
            seen: set[int] = set()
            for m in self._submodules:
                for t in getattr(m, attr).values():
                    if t is not None and id(t) not in seen:
                        seen.add(id(t))
                        state.append(t)
        return [*_leaves(args), *state, *_leaves(kwargs)]

    def _key(self, flat: list[Any], kwargs: dict[str, Any]) -> Any:
        def one(x: Any) -> Any:
            if isinstance(x, torch.Tensor):
                return ("T", tuple(x.shape), x.dtype, x.device, x.requires_grad)
            return (type(x).__name__, x if isinstance(x, (int, float, bool, str, type(None))) else id(x))
        training = tuple(m.training for m in self._submodules)
        ddp = self.ddp is not None and self.ddp.syncing
        return (tuple(one(x) for x in flat), tuple(kwargs), training, torch.is_grad_enabled(), ddp)

    def _compile(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CompiledEntry:
        forward = trace(self.fn, *args, **kwargs)
        n_args = len(forward.args)
        needs_grad = torch.is_grad_enabled() and any(
            isinstance(p, TensorProxy) and p.requires_grad for p in forward.flat_args)
        if not needs_grad:
            return CompiledEntry(forward, None, forward.python_callable(), n_args=n_args)
        result = differentiate(forward)
        if self.rematerialize:
            result = rematerialize(result)
        if self.ddp is not None:
            result = self.ddp.add_gradient_sync(result)
        flat_out = pytree.tree_leaves(forward.output)
        wanted = {p.name for p in result.cotangent_outputs}
        positions: list[int] = []
        for i, p in enumerate(flat_out):
            if isinstance(p, TensorProxy) and p.name in wanted and p.name not in {
                    flat_out[j].name for j in positions}:
                positions.append(i)
        return CompiledEntry(
            forward, result, forward.python_callable(),
            run_augmented=result.augmented_forward.python_callable(),
            run_backward=result.backward.python_callable(),
            differentiable_outputs=positions, n_args=n_args,
        )

    def _unflatten(self, entry: CompiledEntry, flat_out: list[Any]) -> Any:
        spec = entry.forward.output_spec
        if spec is None:
            spec = pytree.tree_structure(entry.forward.output)
        return pytree.tree_unflatten(flat_out, spec)

    # --- inspection ------------------------------------------------------------------
    def __repr__(self) -> str:
        return f"<thunderviz.jit of {getattr(self.fn, '__name__', type(self.fn).__name__)}>"

    def __getattr__(self, name: str) -> Any:
        # jm.parameters(), jm.train(), jm.eval() ... reach the wrapped module
        if name in ("fn", "module") or self.__dict__.get("module") is None:
            raise AttributeError(name)
        return getattr(self.__dict__["module"], name)


def _leaves(tree: Any) -> list[Any]:
    if type(tree) in (tuple, list) and all(isinstance(x, torch.Tensor) for x in tree):
        return list(tree)  # the common case, without pytree's overhead
    return pytree.tree_leaves(tree)


def jit(fn: Callable[..., Any], *, rematerialize: bool = False) -> JittedFunction:
    """Run `fn` (a function or nn.Module) through thunderviz's traces; see JittedFunction."""
    return JittedFunction(fn, rematerialize=rematerialize)


def _entry(jitted: Any) -> CompiledEntry:
    if not isinstance(jitted, JittedFunction):
        raise TypeError(f"expected the result of thunderviz.jit, got {type(jitted).__name__}")
    if jitted.last is None:
        raise ValueError("this jitted function has not been called yet: call it once, then ask for its traces")
    return jitted.last


def last_traces(jitted: JittedFunction) -> list[Trace]:
    """The forward traces of the last call, in the order they were made (as in Thunder)."""
    entry = _entry(jitted)
    if entry.result is None:
        return [entry.forward]
    return [entry.forward, entry.result.augmented_forward]


def last_backward_traces(jitted: JittedFunction) -> list[Trace]:
    """The backward traces of the last call (empty when nothing needed a gradient)."""
    entry = _entry(jitted)
    return [] if entry.result is None else [entry.result.backward]
