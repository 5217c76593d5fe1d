"""What the recorder holds while the program runs, and the one way a tensor gets a proxy.

`RecorderState` is the bottom of the recorder's classes (`decompositions.py`, `mutation.py`
and `recorder.py` build on it): the tensor -> proxy map, including views that are re-derived
from their base when it changed since, the frames bound symbols are recorded into, and where
the program is (the user's line, the module path).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.capture.generators import GeneratorUse, is_default_generator
from thunderviz.capture.recorded_values import RecordedValues, ValueTracker
from thunderviz.core.plain import PLAIN
from thunderviz.core.proxies import NameGenerator, Proxy, TensorProxy, leaves
from thunderviz.core.symbol import BoundSymbol, Origin, SourceLocation, Symbol
from thunderviz.prims.aten import aten_symbol
from thunderviz.prims.differentiability import NON_DIFFERENTIABLE_OUTPUTS

__all__ = ["Frame", "RecorderState", "tensor_proxy"]

# Arguments that are never a tensor nor hold one: `proxify` keeps them without a call.
_PLAIN = PLAIN

aten = torch.ops.aten


def tensor_proxy(
    name: str, t: torch.Tensor, requires_grad: bool, device: torch.device | None = None
) -> TensorProxy:
    """The proxy of a value the recording sees. `device` stands in for `t`'s own where a
    decomposition records on meta tensors (the device the real op runs on). Only floating
    point and complex values carry a gradient, as in eager, whatever asked for one."""
    return TensorProxy(
        name=name,
        shape=tuple(int(s) for s in t.shape),
        dtype=t.dtype,
        device=t.device if device is None else device,
        requires_grad=requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex),
    )


@dataclass
class Frame:
    """A bound-symbol list being filled, and whether anything in it mutated."""

    bsyms: list[BoundSymbol] = field(default_factory=list)
    mutated: bool = False
    mutated_views: bool = False
    # a value made inside this call is read from outside it (autodiff/inner_grad.py), so
    # its subsymbols must be the code that makes it
    subsymbols_read: bool = False
    # the call's values carry no gradient, whatever grad mode it ran in (a
    # `torch.autograd.grad` without create_graph)
    without_grad: bool = False
    # a torch-level call made with grad enabled: an in-place update it makes under no_grad
    # of a value that requires grad (`gaussian_nll_loss` clamps its variance so) happens
    # behind autograd's back (capture/no_grad_updates.py)
    called_with_grad: bool = False


@dataclass
class ViewStep:
    op: Any
    args: tuple[Any, ...]  # the view op's arguments after its input (as proxies/literals)
    kwargs: dict[str, Any]
    index: int  # which output of a multi-output view (split, unbind)
    source: torch.Tensor  # the tensor this step viewed
    result: torch.Tensor  # the view it produced


@dataclass
class ViewInfo:
    base: torch.Tensor
    chain: list[ViewStep]
    version: int  # the base's version when this view's proxy was last made


class RecorderState:
    """Holds the tensor -> proxy map and the bound symbols recorded so far."""

    def __init__(self, names: NameGenerator, module_names: dict[int, str]) -> None:
        self.names = names
        self.module_names = module_names
        self._proxies: dict[int, Proxy] = {}
        self._keepalive: list[Any] = []  # ids stay unique while the tensors live
        # whether each bound tensor still holds its value, where the recording's values are
        # kept for the call's first run (`keep_values`)
        self._tracker: ValueTracker | None = None
        self._views: dict[int, ViewInfo] = {}
        # tensors from outside the program, by id: (tensor, its constant's proxy); and the
        # value of those it wrote into, before its first write (capture/write_backs.py)
        self.outside: dict[int, tuple[torch.Tensor, Proxy]] = {}
        self.outside_before: dict[int, torch.Tensor] = {}
        self._versions: dict[int, int] = {}
        self.constants: dict[str, torch.Tensor] = {}
        self.top = Frame()
        self._frames: list[Frame] = [self.top]
        self._module_stack: list[str] = []
        self._source: SourceLocation | None = None
        self._device_override: torch.device | None = None
        # tensors made by an `empty` factory, nothing recorded written yet: id -> their proxy
        self.unfilled: dict[int, Proxy] = {}
        self.generators = GeneratorUse(names.claim)  # those the program draws from
        # Core ATen ops to decompose all the same (`decompositions.py`): those with no grad
        # rule, while a backward traced inside the program runs (autodiff/inner_grad.py)
        self.decomposes_also: Callable[[Any], bool] | None = None
        # proxies of the values the program called `requires_grad_()` on (grad_flags.py),
        # and of the leaves that made
        self.made_leaves: list[str] = []
        self.new_leaves: set[str] = set()
        # the hooks of each TensorHook's output, by proxy name (capture/tensor_hooks.py)
        self.tensor_hooks: dict[str, Any] = {}

    # --- the tensor -> proxy map ------------------------------------------------------
    def bind(self, t: Any, proxy: Proxy) -> None:
        self._proxies[id(t)] = proxy
        self._keepalive.append(t)
        if self._tracker is not None:
            self._tracker.bound(t)

    def holds(self, t: torch.Tensor, proxy: Proxy, written: bool = False) -> None:
        """`t`, already bound, now holds `proxy`'s value: a view re-derived from its changed
        base, or (`written`) an in-place write by the ATen op being recorded, which
        `next_write` began."""
        self._proxies[id(t)] = proxy
        if self._tracker is not None:
            self._tracker.bound(t, written)

    def holds_after_write(self, t: torch.Tensor, proxy: Proxy) -> None:
        """`t`, already bound, was written in place by an op that has returned and now holds
        `proxy`'s value: a stamped block's eager run, bound once it is over."""
        self._proxies[id(t)] = proxy
        if self._tracker is not None:
            self._tracker.written(t)

    def next_write(self) -> None:
        """An in-place write begins (see `holds`)."""
        if self._tracker is not None:
            self._tracker.next_write()

    def read_as(self, t: torch.Tensor, proxy: Proxy) -> None:
        """The program reads `t`, already bound, as `proxy` from here on, which may not be
        the value `t` holds (a call reads an old value, a hook's Function its output):
        `recorded` keeps no value for `t`."""
        self._proxies[id(t)] = proxy
        if self._tracker is not None:
            self._tracker.forget(t)

    def keep_values(self) -> None:
        """Track what `recorded` needs; before anything is bound."""
        self._tracker = ValueTracker()

    @property
    def keeps_values(self) -> bool:
        return self._tracker is not None

    def recorded(self, inputs: list[tuple[torch.Tensor, Proxy]]) -> RecordedValues:
        """The values the program computed that their tensors still hold (`keep_values`
        was called first); `inputs`: the copies it ran on, with their input proxies."""
        assert self._tracker is not None, "keep_values() was not called"
        return self._tracker.recorded(
            self._proxies, self._keepalive, inputs, self.generators.persistent()
        )

    def recorded_so_far(self) -> list[BoundSymbol]:
        """The bound symbols recorded before the call being recorded now, in order: the
        calls still open (one inside another) hold theirs in frames above the top."""
        return [b for frame in self._frames[:-1] for b in frame.bsyms]

    def call_without_grad(self) -> None:
        """The call being recorded now makes values that carry no gradient."""
        self._frames[-1].without_grad = True

    def open_calls_read(self) -> None:
        """Values made inside the calls still open (not the innermost: the one being recorded
        now) are read from outside them: their subsymbols are to be the code."""
        for frame in self._frames[1:-1]:
            frame.subsymbols_read = True

    def current_values(self) -> dict[str, torch.Tensor]:
        """Each proxy whose value a tensor still holds, by name, with that tensor; and the
        constants. A value a tensor held before a write into it is not here, nor a view's
        whose base was written since (its proxy is re-derived at its next read)."""
        # (where values are kept, `jit`'s case, their tracker also tells writes no op
        # announced; without it, such a value is taken as it is now)
        values = dict(self.constants)
        tracker = self._tracker
        for t in self._keepalive:
            proxy = self._proxies.get(id(t)) if isinstance(t, torch.Tensor) else None
            if not isinstance(proxy, TensorProxy) or not proxy.describes(t):
                continue  # (a meta tensor a decomposition was recorded on)
            if tracker is not None and not tracker.holds(t):
                continue  # written since, unannounced (through an `unsafe_split` output)
            info = self._views.get(id(t))
            if info is not None and info.version != self._versions.get(id(info.base), 0):
                continue
            values[proxy.name] = t
        return values

    def proxy_of(self, t: torch.Tensor) -> Proxy:
        key = id(t)
        proxy = self._proxies.get(key)
        if proxy is None:
            # A tensor from outside the traced program (a closure, a global): a constant,
            # on the device its value lives on.
            name = self.names.fresh("c")
            self.constants[name] = t
            proxy = tensor_proxy(name, t, requires_grad=False)
            self.bind(t, proxy)
            self.outside[key] = (t, proxy)  # (capture/write_backs.py: if the program writes)
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
            proxied = [
                self.proxy_of(x)
                if isinstance(x, torch.Tensor)
                else x
                if type(x) in _PLAIN
                else self.proxify(x)
                for x in tree
            ]
            return proxied if kind is list else tuple(proxied)
        if kind is dict:
            return {k: self.proxify(v) for k, v in tree.items()}
        if isinstance(tree, torch.Tensor):
            return self.proxy_of(tree)
        if isinstance(tree, (tuple, list, dict)):  # namedtuples, ModelOutputs, return types
            return pytree.tree_map_only(torch.Tensor, self.proxy_of, tree)
        if kind is torch.Generator and not is_default_generator(tree):
            return self.generators.proxy(tree)  # capture/generators.py
        return tree

    def _fresh_proxy(self, t: torch.Tensor, requires_grad: bool) -> TensorProxy:
        """A proxy for a new value `t`, not bound (a write binds it)."""
        return tensor_proxy(self.names.fresh(), t, requires_grad, self._device_override)

    def _new_proxy(self, t: torch.Tensor, requires_grad: bool) -> TensorProxy:
        proxy = self._fresh_proxy(t, requires_grad)
        self.bind(t, proxy)
        return proxy

    def _wants_grad(self, func: Any, p_args: Any, p_kwargs: Any) -> bool:
        if func in NON_DIFFERENTIABLE_OUTPUTS or not torch.is_grad_enabled():
            return False
        return any(
            isinstance(p, TensorProxy) and p.requires_grad
            for p in leaves((p_args, p_kwargs), [])  # pytree's leaves, walked by hand
        )

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

    def _collecting(self, frame: Frame) -> _Collecting:
        """Record into `frame` inside the `with` block."""
        return _Collecting(self._frames, frame)

    def _append(self, bsym: BoundSymbol) -> None:
        self._frames[-1].bsyms.append(bsym)

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
            origin=Origin(self._source, self.module_path),
        )

    def record_state_call(
        self, sym: Symbol, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, origin: Origin
    ) -> None:
        """A call that reseeds torch's generators or reads or sets their state, as a
        statement of the trace (capture/generators.py): a state it returned is a new value."""
        p_args, p_kwargs = self.proxify((args, kwargs))
        returns_state = any(isinstance(t, torch.Tensor) for t in pytree.tree_leaves(out))
        output = (
            pytree.tree_map_only(torch.Tensor, lambda t: self._new_proxy(t, False), out)
            if returns_state
            else None  # a seed, the default generator: the program's, not a trace value
        )
        self._append(
            BoundSymbol(sym=sym, args=p_args, kwargs=p_kwargs, output=output, origin=origin)
        )

    def _record_only(self, op: Any, call_args: tuple[Any, ...], like: torch.Tensor) -> TensorProxy:
        """Record `op(*call_args)` without running it: its value already lives in `like`."""
        requires_grad = any(isinstance(p, TensorProxy) and p.requires_grad for p in call_args)
        proxy = self._fresh_proxy(like, requires_grad)
        self._append(self._bsym(op, call_args, {}, proxy))
        return proxy

    # --- views ------------------------------------------------------------------------
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
        chain.append(ViewStep(func, tuple(p_args[1:]), dict(p_kwargs), index, source, view))
        self._views[id(view)] = ViewInfo(base, chain, self._versions.get(id(base), 0))

    def bind_alias(self, alias: torch.Tensor, base: torch.Tensor) -> None:
        """`alias`, an input bound already, is the same memory as the input `base` (one
        tensor passed twice): a write into either is read through the other, as through
        any view (capture/input_aliasing.py)."""
        step = ViewStep(aten.alias.default, (), {}, 0, base, alias)
        self._views[id(alias)] = ViewInfo(base, [step], self._versions.get(id(base), 0))

    def _rederive_view(self, t: torch.Tensor, info: ViewInfo) -> Proxy:
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
            self.holds(step.result, proxy)
            current = proxy
        info.version = self._versions.get(id(info.base), 0)
        return current


class _Collecting:
    """`RecorderState._collecting`: a class, not a generator context manager, as it is
    entered for every torch call recorded."""

    __slots__ = ("frames", "frame")

    def __init__(self, frames: list[Frame], frame: Frame) -> None:
        self.frames, self.frame = frames, frame

    def __enter__(self) -> Frame:
        self.frames.append(self.frame)
        return self.frame

    def __exit__(self, *exc: object) -> None:
        self.frames.pop()
