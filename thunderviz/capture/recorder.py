"""The recorder: one run of the user's program under two nested modes.

The TorchFunctionMode sees each torch-level call (`F.linear`, `x.view(...)`, `a + b`) with
the user's frame on the stack; the TorchDispatchMode inside it sees the ATen ops that call
becomes. Each torch-level call becomes a top-level BoundSymbol whose subsymbols are its ATen
ops; ATen ops outside Core ATen get their decomposition (torch's own tables) as subsymbols.

Mutation is made functional here, in the recording only (the program itself runs as eager
would): an in-place op is recorded as its functional twin and the mutated tensor's proxy
moves to the new value; a write through a view is followed by the scatter that writes the
view's new value into its base; a view whose base changed since is re-derived before its
next use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch._subclasses.fake_tensor
import torch.fx.experimental.symbolic_shapes
from torch._decomp import core_aten_decompositions, decomposition_table
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from thunderviz.capture.autocast import autocast_enabled, hoist_autocast_casts
from thunderviz.capture.collectives import (
    is_collective_call,
    is_collective_op,
    record_collective_call,
    record_collective_op,
)
from thunderviz.capture.errors import CaptureError, where
from thunderviz.capture.functional_ops import (
    functional_variant,
    is_view_op,
    mutated_arg_indices,
    scatter_into_base,
)
from thunderviz.capture.guards import has_data_dependent_size, reads_values
from thunderviz.capture.masks import mask_as_positions, selects_by_mask
from thunderviz.capture.rng import draw_order, inverse
from thunderviz.capture.source import user_source
from thunderviz.capture.torch_symbols import (
    functional_method_name,
    is_property_read,
    torch_symbol,
)
from thunderviz.core.proxies import NameGenerator, NumberProxy, Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol, BsymTag, SourceLocation, Symbol
from thunderviz.prims.aten import aten_symbol, is_core_aten

__all__ = ["Recorder"]

aten = torch.ops.aten
_CORE_DECOMPS = core_aten_decompositions()
# Outputs of these never carry gradient, whatever their inputs.
_NON_DIFFERENTIABLE = {aten.detach.default}
# Exceptions FakeTensors raise when Python needs a value they do not have.
_DATA_DEPENDENT_ERRORS: tuple[type[BaseException], ...] = tuple(
    e
    for e in (
        getattr(torch._subclasses.fake_tensor, "DataDependentOutputException", None),
        getattr(torch._subclasses.fake_tensor, "DynamicOutputShapeException", None),
        getattr(torch.fx.experimental.symbolic_shapes, "GuardOnDataDependentSymNode", None),
    )
    if e is not None
)


def _decomposition(op: Any) -> Callable[..., Any] | None:
    return _CORE_DECOMPS.get(op) or decomposition_table.get(op)


@dataclass
class _ViewStep:
    op: Any
    args: tuple[Any, ...]  # the view op's arguments after its input (as proxies/literals)
    kwargs: dict[str, Any]
    index: int  # which output of a multi-output view (split, unbind)
    source: torch.Tensor  # the tensor this step viewed
    result: torch.Tensor  # the view it produced


@dataclass
class _ViewInfo:
    base: torch.Tensor
    chain: list[_ViewStep]
    version: int  # the base's version when this view's proxy was last made


@dataclass
class _Decomposition:
    """A recorded decomposition, reusable for other calls with the same signature."""

    bsyms: list[BoundSymbol]
    inputs: list[str]  # names of the tensor arguments it was recorded with, in order
    outputs: list[str]  # names of the outputs it was recorded for

    def instantiate(
        self, inputs: list[TensorProxy], outputs: list[TensorProxy], recorder: Recorder
    ) -> list[BoundSymbol]:
        mapping: dict[str, Proxy] = {}
        for old, new in zip(self.inputs, inputs, strict=True):
            mapping.setdefault(old, new)
        for old, new in zip(self.outputs, outputs, strict=True):
            mapping[old] = new
        for top in self.bsyms:
            for b in top.walk():
                for p in b.flat_proxy_outs:
                    if p.name not in mapping:
                        mapping[p.name] = p.renamed(recorder.names.fresh())
        return [
            _relocated(b.rename(mapping), recorder._source, recorder.module_path)
            for b in self.bsyms
        ]


_NO_DECOMPOSITION = object()


def _relocated(bsym: BoundSymbol, source: SourceLocation | None, module_path: str) -> BoundSymbol:
    return bsym.with_changes(
        source=source,
        module_path=module_path,
        subsymbols=[_relocated(s, source, module_path) for s in bsym.subsymbols],
    )


def _signature(leaves: list[Any]) -> tuple[Any, ...]:
    """What a decomposition may depend on: tensor metadata (and which arguments are the same
    tensor), and the values of everything else."""
    first_seen: dict[int, int] = {}
    out: list[Any] = []
    for i, x in enumerate(leaves):
        if isinstance(x, torch.Tensor):
            out.append(
                (
                    "T",
                    tuple(x.shape),
                    x.stride(),
                    x.dtype,
                    x.device.type,
                    first_seen.setdefault(id(x), i),
                )
            )
        else:
            out.append((type(x).__name__, repr(x)))
    return tuple(out)


@dataclass
class _Frame:
    """A bound-symbol list being filled, and whether anything in it mutated."""

    bsyms: list[BoundSymbol] = field(default_factory=list)
    mutated: bool = False
    mutated_views: bool = False


class Recorder:
    """Holds the tensor -> proxy map and the bound symbols recorded so far."""

    def __init__(self, names: NameGenerator, module_names: dict[int, str]) -> None:
        self.names = names
        self.module_names = module_names
        self._proxies: dict[int, Proxy] = {}
        self._keepalive: list[Any] = []  # ids stay unique while the tensors live
        self._views: dict[int, _ViewInfo] = {}
        self._versions: dict[int, int] = {}
        self.constants: dict[str, torch.Tensor] = {}
        self.top = _Frame()
        self._frames: list[_Frame] = [self.top]
        self._module_stack: list[str] = []
        self._source: SourceLocation | None = None
        self._device_override: torch.device | None = None
        self.data_dependent: list[BoundSymbol] = []
        self._decompositions: dict[Any, Any] = {}
        self.function_mode = _FunctionMode(self)
        self.dispatch_mode = _DispatchMode(self)

    # --- the tensor -> proxy map ------------------------------------------------------
    def bind(self, t: Any, proxy: Proxy) -> None:
        self._proxies[id(t)] = proxy
        self._keepalive.append(t)

    def proxy_of(self, t: torch.Tensor) -> Proxy:
        key = id(t)
        proxy = self._proxies.get(key)
        if proxy is None:
            # A tensor from outside the traced program (a closure, a global): a constant.
            name = self.names.fresh("c")
            self.constants[name] = t
            proxy = TensorProxy.like(name, t, requires_grad=False)
            self.bind(t, proxy)
            return proxy
        info = self._views.get(key)
        if info is not None and info.version != self._versions.get(id(info.base), 0):
            proxy = self._rederive_view(t, info)
        return proxy

    def proxify(self, tree: Any) -> Any:
        """Tensors -> proxies inside args/outputs. A hand-written walk over the containers
        torch passes (tuples, lists, dicts): it runs for every op, and pytree is slower."""
        kind = type(tree)
        if kind is tuple or kind is list:
            return kind(self.proxify(x) for x in tree)
        if kind is dict:
            return {k: self.proxify(v) for k, v in tree.items()}
        if isinstance(tree, torch.Tensor):
            return self.proxy_of(tree)
        if isinstance(tree, (tuple, list, dict)):  # namedtuples, ModelOutputs, return types
            return pytree.tree_map_only(torch.Tensor, self.proxy_of, tree)
        return tree

    def _new_proxy(self, t: torch.Tensor, requires_grad: bool) -> TensorProxy:
        proxy = TensorProxy(
            name=self.names.fresh(),
            shape=tuple(int(s) for s in t.shape),
            dtype=t.dtype,
            device=self._device_override or t.device,
            requires_grad=requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex),
        )
        self.bind(t, proxy)
        return proxy

    # --- where we are -----------------------------------------------------------------
    @property
    def module_path(self) -> str:
        return self._module_stack[-1] if self._module_stack else ""

    def enter_module(self, module: torch.nn.Module) -> None:
        name = self.module_names.get(id(module))
        if name is None:
            name = f"{self.module_path}.<{type(module).__name__}>".lstrip(".")
        self._module_stack.append(name)

    def exit_module(self, module: torch.nn.Module) -> None:
        if self._module_stack:
            self._module_stack.pop()

    @contextlib.contextmanager
    def _collecting(self, frame: _Frame) -> Iterator[_Frame]:
        self._frames.append(frame)
        try:
            yield frame
        finally:
            self._frames.pop()

    def _append(self, bsym: BoundSymbol) -> None:
        self._frames[-1].bsyms.append(bsym)

    # --- torch level ------------------------------------------------------------------
    def on_torch_function(
        self, func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        if is_property_read(func):
            return func(*args, **kwargs)
        if is_collective_call(func):  # torch.distributed: capture/collectives.py
            return record_collective_call(self, func, args, kwargs)
        source = user_source(skip=3)
        p_args, p_kwargs = self.proxify((args, kwargs))
        frame = _Frame()
        outer_source, self._source = self._source, source
        grad_enabled = torch.is_grad_enabled()
        try:
            with self._collecting(frame):
                out = func(*args, **kwargs)
        except CaptureError:
            raise
        except _DATA_DEPENDENT_ERRORS as e:
            raise CaptureError(
                f"{_call_name(func)} at {where(source, self.module_path)} needs the value of a "
                "tensor, and fake=True traces without values. Trace with fake=False (real "
                "tensors), or avoid data-dependent Python control flow here "
                "(`if x.sum() > 0`, `.item()`, boolean-mask indexing).",
                op=_call_name(func),
                source=source,
                module_path=self.module_path,
            ) from e
        except Exception as e:
            raise CaptureError(
                f"{_call_name(func)} failed at {where(source, self.module_path)}: "
                f"{type(e).__name__}: {e}",
                op=_call_name(func),
                source=source,
                module_path=self.module_path,
            ) from e
        finally:
            self._source = outer_source
        reads = reads_values(func)  # `.tolist()`, `torch.equal`: no ATen op to see
        if not frame.bsyms and not reads:
            self._alias_unknown_outputs(out, args)
            return out
        sym = torch_symbol(func)
        bsym = BoundSymbol(
            sym=sym or _opaque_symbol(func),
            args=p_args,
            kwargs=p_kwargs,
            output=self.proxify(out),
            subsymbols=frame.bsyms,
            source=source,
            module_path=self.module_path,
        )
        if not grad_enabled:
            bsym.tags.add(BsymTag.NO_GRAD)
        if sym is None:
            bsym.tags.add(BsymTag.FUNCTIONALIZED)  # no public name to call: run its ATen ops
        elif frame.mutated:
            functional = functional_method_name(sym)
            if functional is not None and not frame.mutated_views:
                bsym.sym = torch_symbol(getattr(torch.Tensor, functional))
                bsym.header = f"in-place {sym.name}() recorded functionally"
            else:
                bsym.tags.add(BsymTag.FUNCTIONALIZED)
        if reads or any(BsymTag.DATA_DEPENDENT in s.tags for s in frame.bsyms):
            bsym.tags.add(BsymTag.DATA_DEPENDENT)
            self.data_dependent.append(bsym)
        if autocast_enabled():
            for cast in hoist_autocast_casts(bsym):  # autocast's casts as calls of their own
                self._append(cast)
        self._append(bsym)
        return out

    def _alias_unknown_outputs(self, out: Any, args: tuple[Any, ...]) -> None:
        """A torch-level call with no ATen ops returned a tensor we have not seen (`x.data`):
        it shares its input's value."""
        first = next((a for a in pytree.tree_leaves(args) if isinstance(a, torch.Tensor)), None)
        for t in pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and id(t) not in self._proxies and first is not None:
                self.bind(t, self.proxy_of(first))

    # --- ATen level -------------------------------------------------------------------
    def on_dispatch(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if is_collective_op(func):
            return record_collective_op(self, func, args, kwargs)
        p_args, p_kwargs = self.proxify((args, kwargs))
        out = func(*args, **kwargs)
        if func is aten._local_scalar_dense.default:
            proxy = NumberProxy(name=self.names.fresh("n"), value=out)
            bsym = self._bsym(func, p_args, p_kwargs, proxy)
            bsym.tags.add(BsymTag.DATA_DEPENDENT)
            self._append(bsym)
            return out
        if mutated_arg_indices(func):
            self._record_mutation(func, args, kwargs, p_args, p_kwargs, out)
        else:
            self._record_functional(func, args, kwargs, p_args, p_kwargs, out)
        return out

    def _bsym(self, func: Any, p_args: Any, p_kwargs: Any, output: Any) -> BoundSymbol:
        if self._device_override is not None:
            # inside a decomposition recorded on meta tensors: factory calls there name the
            # meta device, which must read as the device the real op runs on
            p_args, p_kwargs = pytree.tree_map_only(
                torch.device,
                lambda d: self._device_override if d.type == "meta" else d,
                (p_args, p_kwargs),
            )
        return BoundSymbol(
            sym=aten_symbol(func),
            args=tuple(p_args),
            kwargs=dict(p_kwargs),
            output=output,
            source=self._source,
            module_path=self.module_path,
        )

    def _wants_grad(self, func: Any, p_args: Any, p_kwargs: Any) -> bool:
        if func in _NON_DIFFERENTIABLE or not torch.is_grad_enabled():
            return False
        return any(
            isinstance(p, TensorProxy) and p.requires_grad
            for p in pytree.tree_leaves((p_args, p_kwargs))
        )

    def _record_functional(
        self, func: Any, args: Any, kwargs: Any, p_args: Any, p_kwargs: Any, out: Any
    ) -> None:
        input_ids = {
            id(t) for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
        }
        wants_grad = self._wants_grad(func, p_args, p_kwargs)
        leaves, spec = pytree.tree_flatten(out)
        fresh = False
        proxied = []
        for t in leaves:
            if not isinstance(t, torch.Tensor):
                proxied.append(t)
            elif id(t) in input_ids:
                proxied.append(self.proxy_of(t))  # returned an input as it is (lift_fresh)
            else:
                fresh = True
                proxied.append(self._new_proxy(t, wants_grad))
        if not fresh:
            return
        bsym = self._bsym(func, p_args, p_kwargs, pytree.tree_unflatten(proxied, spec))
        if has_data_dependent_size(func, args):
            bsym.tags.add(BsymTag.DATA_DEPENDENT)  # a size this run's values chose
        if is_view_op(func) and args and isinstance(args[0], torch.Tensor):
            tensors = [t for t in leaves if isinstance(t, torch.Tensor)]
            for i, view in enumerate(tensors):
                self._register_view(func, args, kwargs, p_args, p_kwargs, i, view)
        if selects_by_mask(func, args):
            self._select_by_positions(bsym, func, args)
        elif not is_core_aten(func):
            self._decompose(bsym, func, args, kwargs)
        self._append(bsym)

    def _select_by_positions(self, bsym: BoundSymbol, func: Any, args: Any) -> None:
        """Boolean-mask indexing: subsymbols select by `nonzero` positions (capture/masks.py)."""
        bsym.subsymbols = mask_as_positions(
            func,
            args,
            bsym.args,
            bsym.kwargs,
            bsym.output,
            lambda op, a, kw, out: self._bsym(op, a, kw, out),
            self.names.fresh,
        )

    def _decompose(self, bsym: BoundSymbol, func: Any, args: Any, kwargs: Any) -> None:
        """Record `func`'s decomposition as `bsym.subsymbols`, on metadata-only copies of its
        inputs: no compute, no RNG draws, no side effects, whatever the tensors are.

        A decomposition depends only on its inputs' metadata and its other arguments, so the
        one recorded for a signature is reused (renamed) for the next call with the same
        signature: a 12-layer model decomposes each op once, not twelve times."""
        decomp = _decomposition(func)
        if decomp is None:
            bsym.tags.add(BsymTag.NON_CORE)
            return
        leaves = pytree.tree_leaves((args, kwargs))
        key = (func, _signature(leaves))
        template = self._decompositions.get(key)
        if template is None:
            template = self._record_decomposition(bsym, decomp, args, kwargs)
            self._decompositions[key] = template
        if template is _NO_DECOMPOSITION:
            bsym.tags.add(BsymTag.NON_CORE)
            return
        inputs = [p for p in bsym.flat_args if isinstance(p, TensorProxy)]
        bsym.subsymbols = template.instantiate(inputs, bsym.flat_tensor_outs, self)

    def _record_decomposition(
        self, bsym: BoundSymbol, decomp: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        device = next((p.device for p in bsym.flat_tensor_outs), None)
        frame = _Frame()
        outer_device, self._device_override = self._device_override, device
        try:
            # Meta kernels only: FakeTensorMode (with fake=True) steps aside, as it would
            # cost far more than the decomposition's shape logic.
            with unset_fake_temporarily():
                shadow_args, shadow_kwargs = pytree.tree_map_only(
                    torch.Tensor, self._shadow, (args, kwargs)
                )
                with self._collecting(frame), self.dispatch_mode:
                    result = decomp(*shadow_args, **shadow_kwargs)
        except Exception:  # a decomposition that needs values or a backend: keep the op whole
            return _NO_DECOMPOSITION
        finally:
            self._device_override = outer_device
        if result is NotImplemented:
            return _NO_DECOMPOSITION
        produced = [
            self._proxies.get(id(t))
            for t in pytree.tree_leaves(result)
            if isinstance(t, torch.Tensor)
        ]
        input_names = {p.name for p in bsym.flat_proxy_args}
        mapping = {
            got.name: want
            for got, want in zip(produced, bsym.flat_tensor_outs, strict=False)
            if got is not None and got.name not in input_names and got.name != want.name
        }
        inputs = [p for p in bsym.flat_args if isinstance(p, TensorProxy)]
        return _Decomposition(
            [s.rename(mapping) for s in frame.bsyms],
            [p.name for p in inputs],
            [p.name for p in bsym.flat_tensor_outs],
        )

    def _shadow(self, t: torch.Tensor) -> torch.Tensor:
        if t.device.type == "meta" and not isinstance(t, torch._subclasses.FakeTensor):
            return t
        shadow = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
        self.bind(shadow, self.proxy_of(t))
        return shadow

    # --- mutation ---------------------------------------------------------------------
    def _record_mutation(
        self, func: Any, args: Any, kwargs: Any, p_args: Any, p_kwargs: Any, out: Any
    ) -> None:
        variant = functional_variant(func)
        if variant is None:
            raise CaptureError(
                f"the in-place ATen op {func} has no functional form thunderviz knows "
                f"({where(self._source, self.module_path)}). Use the out-of-place version of "
                "this call in the traced code.",
                op=str(func),
                source=self._source,
                module_path=self.module_path,
            )
        functional, returns_mutated = variant
        schema_args = func._schema.arguments
        # The functional twin may lack the in-place op's defaults (bernoulli_.float(p=0.5)
        # -> bernoulli.p(p)): spell them out so none goes missing.
        p_args = _with_defaults(func, p_args, p_kwargs)
        mutated = []
        for i in mutated_arg_indices(func):
            value = args[i] if i < len(args) else kwargs.get(schema_args[i].name)
            if isinstance(value, torch.Tensor):
                mutated.append(value)
        wants_grad = self._wants_grad(func, p_args, p_kwargs)
        order = None if returns_mutated else draw_order(func, functional, args, kwargs)
        if order is not None:
            new_values = [self._draw_in_memory_order(functional, p_args, p_kwargs, args[0], order)]
        else:
            if returns_mutated:
                normal = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
                outputs = [self._new_proxy(t, wants_grad) for t in normal]
                new_values = [_fresh_proxy_like(self, t, wants_grad) for t in mutated]
                output: Any = tuple(outputs + new_values)
            else:
                new_values = [_fresh_proxy_like(self, t, wants_grad) for t in mutated]
                output = new_values[0]
            bsym = self._bsym(functional, p_args, p_kwargs, output)
            if selects_by_mask(functional, args):
                self._select_by_positions(bsym, functional, args)
            elif not is_core_aten(functional):
                self._decompose(bsym, functional, args, kwargs)
            self._append(bsym)
        frame = self._frames[-1]
        # Writing into a temporary the same call created (rms_norm's C++ kernel does) keeps
        # the call functional from the outside; only a write into an older tensor counts.
        made_here = {p.name for b in frame.bsyms for p in b.flat_proxy_outs}
        if any(id(t) in self._views or self.proxy_of(t).name not in made_here for t in mutated):
            frame.mutated = True
        for t, value in zip(mutated, new_values, strict=True):
            if id(t) in self._views:
                frame.mutated_views = True
            self._write(t, value)

    def _draw_in_memory_order(
        self, functional: Any, p_args: Any, p_kwargs: Any, t: torch.Tensor, order: list[int]
    ) -> TensorProxy:
        """An in-place random draw into a transposed tensor, recorded as the functional draw
        on it permuted into memory order, permuted back: the order eager drew in
        (capture/rng.py)."""
        permuted = t.permute(order)
        source = self._record_only(aten.permute.default, (p_args[0], order), permuted)
        drawn = _fresh_proxy_like(self, permuted, False)
        self._append(self._bsym(functional, (source, *p_args[1:]), p_kwargs, drawn))
        return self._record_only(aten.permute.default, (drawn, inverse(order)), t)

    def _write(self, t: torch.Tensor, value: Proxy) -> None:
        """`t` now holds `value`: move its proxy, and write through to its base if a view."""
        self._proxies[id(t)] = value
        info = self._views.get(id(t))
        if info is None:
            self._versions[id(t)] = self._versions.get(id(t), 0) + 1
            return
        for step in reversed(info.chain):
            source_proxy = self.proxy_of(step.source)
            op, call_args = scatter_into_base(
                step.op,
                step.args,
                step.kwargs,
                step.index,
                source_proxy,
                tuple(step.source.shape),
                value,
                step.result,
            )
            value = self._record_only(op, call_args, step.source)
            self._proxies[id(step.source)] = value
        base_version = self._versions.get(id(info.base), 0) + 1
        self._versions[id(info.base)] = base_version
        for step in info.chain:  # every view along the way is now up to date
            if id(step.result) in self._views:
                self._views[id(step.result)].version = base_version
        self._frames[-1].mutated_views = True

    def _record_only(self, op: Any, call_args: tuple[Any, ...], like: torch.Tensor) -> TensorProxy:
        """Record `op(*call_args)` without running it: its value already lives in `like`."""
        requires_grad = any(isinstance(p, TensorProxy) and p.requires_grad for p in call_args)
        proxy = TensorProxy(
            name=self.names.fresh(),
            shape=tuple(like.shape),
            dtype=like.dtype,
            device=self._device_override or like.device,
            requires_grad=requires_grad,
        )
        self._append(self._bsym(op, call_args, {}, proxy))
        return proxy

    def _register_view(
        self,
        func: Any,
        args: Any,
        kwargs: Any,
        p_args: Any,
        p_kwargs: Any,
        index: int,
        view: torch.Tensor,
    ) -> None:
        source = args[0]
        parent = self._views.get(id(source))
        base = parent.base if parent else source
        chain = list(parent.chain) if parent else []
        chain.append(_ViewStep(func, tuple(p_args[1:]), dict(p_kwargs), index, source, view))
        self._views[id(view)] = _ViewInfo(base, chain, self._versions.get(id(base), 0))

    def _rederive_view(self, t: torch.Tensor, info: _ViewInfo) -> Proxy:
        """The base changed since this view was taken: take the view again from its base."""
        current = self.proxy_of(info.base)
        for step in info.chain:
            if step.op._schema.returns[0].type.kind() == "ListType":
                # one piece of a multi-output view (split, unbind): take just that piece
                r = step.result
                call: tuple[Any, ...] = (
                    current,
                    list(r.shape),
                    list(r.stride()),
                    r.storage_offset(),
                )
                proxy = self._record_only(aten.as_strided.default, call, r)
            else:
                proxy = self._record_only(step.op, (current, *step.args), step.result)
            self._proxies[id(step.result)] = proxy
            current = proxy
        info.version = self._versions.get(id(info.base), 0)
        return current


def _with_defaults(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """Positional arguments of a call with every omitted (non-kwarg-only) default filled in."""
    out = list(args)
    for a in func._schema.arguments[len(args) :]:
        if a.kwarg_only or a.name in kwargs or not a.has_default_value():
            break
        out.append(a.default_value)
    return tuple(out)


def _fresh_proxy_like(recorder: Recorder, t: torch.Tensor, requires_grad: bool) -> TensorProxy:
    """A new proxy for `t`'s new value, without binding (the write binds it)."""
    return TensorProxy(
        name=recorder.names.fresh(),
        shape=tuple(int(s) for s in t.shape),
        dtype=t.dtype,
        device=recorder._device_override or t.device,
        requires_grad=requires_grad and t.dtype.is_floating_point,
    )


def _call_name(func: Callable[..., Any]) -> str:
    sym = torch_symbol(func)
    if sym is not None:
        return f"torch.Tensor.{sym.name}" if sym.kind.value in ("method", "attribute") else sym.name
    return getattr(func, "__qualname__", None) or getattr(func, "__name__", repr(func))


def _opaque_symbol(func: Callable[..., Any]) -> Symbol:
    name = _call_name(func)
    return Symbol(name=name, id=name, fn=func)


class _FunctionMode(TorchFunctionMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        return self.recorder.on_torch_function(func, args, kwargs or {})


class _DispatchMode(TorchDispatchMode):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        return self.recorder.on_dispatch(func, args, kwargs or {})
