"""Subsymbols for an ATen op outside Core ATen: its decomposition (torch's own tables),
recorded on metadata-only copies of its inputs and reused for every later call with the same
signature; boolean-mask selection gets the ops that select by positions (`masks.py`).

A recording is also kept for the process, keyed by everything it depends on, so the next trace
that meets the same call does not record it again (`cross_entropy`'s decomposition was most of
a small program's first call). A trace must not tell a reused recording from its own: a
recording draws names from the trace's generator that it never uses (the instantiation names
the values afresh) and fills the trace's cache for the ops it met inside, so it is kept with
that log, which a later trace replays before instantiating. The same program then traces to
the same text and bound symbols whether the process recorded the decomposition before or not.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import torch
import torch._subclasses.fake_tensor
from torch._decomp import decomposition_table
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from thunderviz.capture import grid_sampler_backward
from thunderviz.capture.masks import mask_as_positions, selects_by_mask
from thunderviz.capture.recorder_state import Frame, RecorderState
from thunderviz.capture.rewriting import relocated
from thunderviz.core.plain import PLAIN
from thunderviz.core.proxies import NameGenerator, Proxy, TensorProxy, leaves
from thunderviz.core.symbol import BoundSymbol, BsymTag, Origin
from thunderviz.prims.aten import is_core_aten

__all__ = ["DecomposingRecorder", "clear_process_cache"]


def _decomposition(op: Any) -> Callable[..., Any] | None:
    """torch's Python decomposition of `op`, if it has one (or ours, for the backward kernels
    torch has none of and eager differentiates again), else its composite kernel (an op such
    as `matmul` reaches the recorder whole when a C++ kernel calls it below autograd, as
    `cdist` does).

    (This once looked in `core_aten_decompositions()` first. Since torch 2.6 that is a
    `CustomDecompTable`, a dict subclass that keeps its entries in an attribute, so `.get`
    found nothing there and every answer came from `decomposition_table`. Building that
    table cost 60-70 ms, most of a small program's first call in a fresh process.)"""
    decomp = decomposition_table.get(op) or _OURS.get(op)
    if decomp is None and isinstance(op, torch._ops.OpOverload) and op._can_decompose():
        return op.decompose
    return decomp


_OURS = grid_sampler_backward.DECOMPOSITIONS


@dataclass
class _Decomposition:
    """A recorded decomposition, reusable for other calls with the same signature."""

    bsyms: list[BoundSymbol]
    inputs: list[str]  # names of the tensor arguments it was recorded with, in order
    outputs: list[str]  # names of the outputs it was recorded for

    def instantiate(self, bsym: BoundSymbol, recorder: RecorderState) -> None:
        """Make this recording `bsym`'s subsymbols, renamed onto its inputs and outputs and
        onto names fresh in the trace. The names are drawn now, in the trace's order; the
        bound symbols are built when something first reads them (`defer_subsymbols`): the
        executor and the grad rules of most decomposed ops never do, and building them was a
        third of tracing a BatchNorm network."""
        inputs = [p for p in bsym.flat_args if isinstance(p, TensorProxy)]
        mapping: dict[str, Proxy] = {}
        for old, new in zip(self.inputs, inputs, strict=True):
            mapping.setdefault(old, new)
        for old, new in zip(self.outputs, bsym.flat_tensor_outs, strict=True):
            mapping[old] = new
        fresh = [recorder.names.fresh() for _ in self._internal]
        origin = Origin(recorder._source, recorder.module_path)

        def build() -> list[BoundSymbol]:
            for p, name in zip(self._internal, fresh, strict=True):
                mapping[p.name] = p.renamed(name)
            return [relocated(b, mapping, lambda _: origin) for b in self.bsyms]

        bsym.defer_subsymbols(build, like=self.bsyms)

    @cached_property
    def _internal(self) -> list[Proxy]:
        """The values the recording makes besides its outputs, in the order their fresh names
        are drawn."""
        mapped = {*self.inputs, *self.outputs}
        internal: list[Proxy] = []
        for top in self.bsyms:
            for b in top.walk():
                for p in b.flat_proxy_outs:
                    if p.name not in mapped:
                        mapped.add(p.name)
                        internal.append(p)
        return internal

    def draw_names(self, names: NameGenerator) -> None:
        """Draw the fresh names `instantiate` draws, without building anything."""
        for _ in self._internal:
            names.fresh()


_NO_DECOMPOSITION = object()


@dataclass(frozen=True)
class _Lookup:
    """A decomposed op a recording met inside: its key in a trace's cache and the process's."""

    key: Any
    pkey: Any


@dataclass(frozen=True)
class _Claim:
    wanted: str


@dataclass
class _Recorded:
    """A decomposition as recorded once in this process, with what recording it did to the
    trace it was recorded in: `events`, in order, is the prefix of each fresh name it drew
    itself, each name it claimed, and each decomposed op it met inside."""

    template: Any  # a _Decomposition, or _NO_DECOMPOSITION
    events: list[str | _Claim | _Lookup] = field(default_factory=list)


# Process-wide, least recently used last out. An evicted entry only means a recording again.
_PROCESS_CACHE: OrderedDict[tuple[Any, ...], _Recorded] = OrderedDict()
_PROCESS_CACHE_SIZE = 4096
_PROCESS_CACHE_LOCK = threading.Lock()  # threads trace at once (core/context.py)

# Arguments a process key holds by value (anything else: the call is recorded per trace).
_PLAIN = tuple(PLAIN)


def clear_process_cache() -> None:
    """Forget every decomposition recorded in this process (the next trace records again)."""
    with _PROCESS_CACHE_LOCK:
        _PROCESS_CACHE.clear()


class _LoggedNames:
    """The trace's name generator while a decomposition records: logs what it hands out."""

    def __init__(self, names: Any, log: list[Any]) -> None:
        self.names, self.log = names, log

    def fresh(self, prefix: str = "t") -> str:
        self.log.append(prefix)
        return self.names.fresh(prefix)

    def claim(self, wanted: str) -> str:
        self.log.append(_Claim(wanted))
        return self.names.claim(wanted)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.names, name)


def _signature(x: Any, flat: list[Any], seen: dict[int, int]) -> Any:
    """What a decomposition may depend on in the call's arguments `x`: their nesting and the
    names of keyword arguments (`addr(s, u, v, beta=0)` drops `s`, `alpha=0` keeps only
    it), tensor metadata (and which arguments are the same tensor: `seen` maps a tensor's id
    to its first position), and the values of everything else. The leaves are appended to
    `flat`, in order."""
    kind = type(x)
    if kind is tuple or kind is list:
        return (kind.__name__, *[_signature(v, flat, seen) for v in x])
    if kind is dict:
        return ("dict", *[(k, _signature(v, flat, seen)) for k, v in x.items()])
    flat.append(x)
    if isinstance(x, torch.Tensor):
        first = seen.setdefault(id(x), len(flat) - 1)
        return ("T", tuple(x.shape), x.stride(), x.dtype, x.device.type, first)
    return (kind.__name__, repr(x))


def _process_key(
    func: Any, decomp: Any, signature: tuple[Any, ...], leaves: list[Any], bsym: BoundSymbol
) -> Any:
    """What a recording depends on beyond the trace's own key (`signature`): the
    decomposition itself (torch's table can change between traces), the inputs' devices,
    whether their proxies need a gradient and whether grad mode is on (the recorded values'
    proxies carry it), the device the outputs live on (the one factory calls inside are
    printed with) and autocast. None when an argument is not a plain value."""
    if not all(isinstance(x, (torch.Tensor, *_PLAIN)) or x is Ellipsis for x in leaves):
        return None
    inputs = [p for p in bsym.flat_args if isinstance(p, TensorProxy)]
    outputs = bsym.flat_tensor_outs
    return (
        func,
        decomp,
        signature,
        tuple((p.device, p.requires_grad) for p in inputs),
        outputs[0].device if outputs else None,
        torch.is_grad_enabled(),
        torch.is_autocast_enabled("cpu"),
        torch.is_autocast_enabled("cuda"),
    )


class DecomposingRecorder(RecorderState):
    """The recorder's subsymbols for ops it does not keep as they are."""

    dispatch_mode: TorchDispatchMode  # the recorder's own, set by Recorder

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._decompositions: dict[Any, Any] = {}

    def _expand(self, bsym: BoundSymbol, func: Any, args: Any, kwargs: Any) -> None:
        """Give a recorded ATen call the subsymbols it needs below Core ATen, if any."""
        if selects_by_mask(func, args):
            self._select_by_positions(bsym, func, args)
        elif not is_core_aten(func) or (
            self.decomposes_also is not None and self.decomposes_also(func)
        ):
            self._decompose(bsym, func, args, kwargs)

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
        signature: a 12-layer model decomposes each op once, not twelve times, and a process
        records it once for all its traces (`_PROCESS_CACHE`)."""
        decomp = _decomposition(func)
        if decomp is None:
            bsym.tags.add(BsymTag.NON_CORE)
            return
        flat: list[Any] = []
        signature = _signature((args, kwargs), flat, {})
        key = (func, signature)
        # the process's key: where the trace's cache misses or a recording logs this lookup
        # (most calls are a repeat in the trace, where building it was a third of the cost)
        process_key = lambda: _process_key(func, decomp, signature, flat, bsym)  # noqa: E731
        outer = self.names
        if isinstance(outer, _LoggedNames):
            # inside another decomposition's recording: its log holds this lookup, and what
            # the lookup draws is drawn again by replaying it, not from the log
            outer.log.append(_Lookup(key, process_key()))
            self.names = outer.names
        try:
            template = self._decompositions.get(key)
            if template is None:
                template = self._first_in_trace(process_key(), bsym, decomp, args, kwargs)
                self._decompositions[key] = template
            if template is _NO_DECOMPOSITION:
                bsym.tags.add(BsymTag.NON_CORE)
                return
            template.instantiate(bsym, self)
        finally:
            self.names = outer

    def _first_in_trace(
        self, pkey: Any, bsym: BoundSymbol, decomp: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        """The template for a call this trace has not decomposed yet: the process's, its
        recording replayed on this trace's names, or recorded now (and kept if it can be)."""
        with _PROCESS_CACHE_LOCK:
            recorded = _PROCESS_CACHE.get(pkey) if pkey is not None else None
            plan: dict[Any, _Recorded] | None = {}
            if recorded is not None and pkey is not None and self._plan(recorded, plan):
                _PROCESS_CACHE.move_to_end(pkey)
            else:
                plan = None
        if recorded is not None and plan is not None:
            self._replay(recorded, plan)
            return recorded.template
        log: list[Any] = []
        frame = self._frames[-1]
        before = len(frame.bsyms)
        self.names = _LoggedNames(self.names, log)
        try:
            template = self._record_decomposition(bsym, decomp, args, kwargs)
        finally:
            self.names = self.names.names
        # (a view re-derived for the recording lands in the trace: a replay would not add it)
        if pkey is not None and len(frame.bsyms) == before:
            with _PROCESS_CACHE_LOCK:
                if self._shareable(log):
                    _PROCESS_CACHE[pkey] = _Recorded(template, log)
                    if len(_PROCESS_CACHE) > _PROCESS_CACHE_SIZE:
                        _PROCESS_CACHE.popitem(last=False)
        return template

    def _shareable(self, log: list[Any]) -> bool:
        """A recording other traces may replay: it captured no constant (a tensor of this
        trace's program) and every op it decomposed inside is this trace's use of a
        recording kept for the process (not one its cache shares between process keys)."""
        for event in log:
            if event == "c":
                return False
            if isinstance(event, _Lookup):
                kept = _PROCESS_CACHE.get(event.pkey) if event.pkey is not None else None
                if kept is None or kept.template is not self._decompositions.get(event.key):
                    return False
        return True

    def _plan(self, recorded: _Recorded, plan: dict[Any, _Recorded]) -> bool:
        """Whether every op `recorded` decomposed inside is in this trace's cache or kept for
        the process (and so on down); `plan` gets the kept recordings a replay will use."""
        for event in recorded.events:
            if not isinstance(event, _Lookup):
                continue
            if event.key in self._decompositions or event.key in plan:
                continue
            inner = _PROCESS_CACHE.get(event.pkey) if event.pkey is not None else None
            if inner is None:
                return False
            plan[event.key] = inner
            if not self._plan(inner, plan):
                return False
        return True

    def _replay(self, recorded: _Recorded, plan: dict[Any, _Recorded]) -> None:
        """Do to this trace's names and cache what the recording did to its own trace's."""
        for event in recorded.events:
            if isinstance(event, str):
                self.names.fresh(event)
            elif isinstance(event, _Claim):
                self.names.claim(event.wanted)
            else:
                template = self._decompositions.get(event.key)
                if template is None:
                    inner = plan[event.key]
                    self._replay(inner, plan)
                    template = self._decompositions[event.key] = inner.template
                if template is not _NO_DECOMPOSITION:
                    template.draw_names(self.names)

    def _record_decomposition(
        self, bsym: BoundSymbol, decomp: Callable[..., Any], args: Any, kwargs: Any
    ) -> Any:
        device = next((p.device for p in bsym.flat_tensor_outs), None)
        frame = Frame()
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
            self._proxies.get(id(t)) for t in leaves(result, []) if isinstance(t, torch.Tensor)
        ]
        if not _same_metadata(produced, bsym.flat_tensor_outs):
            return _NO_DECOMPOSITION
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


def _same_metadata(produced: list[Proxy | None], outputs: list[TensorProxy]) -> bool:
    """Whether a decomposition's tensors are the op's outputs in shape and dtype. torch's
    tables are not all right for every signature (`multilabel_margin_loss_forward` returns a
    1-element loss where the op returns a 0-dim one, for a 1-d input without reduction): a
    decomposition that disagrees with the op's own kernel is not the op, and differentiating
    it would give gradients of the wrong shape, or of another function."""
    if len(produced) != len(outputs):
        return False
    return all(
        isinstance(p, TensorProxy) and p.shape == o.shape and p.dtype == o.dtype
        for p, o in zip(produced, outputs, strict=True)
    )
