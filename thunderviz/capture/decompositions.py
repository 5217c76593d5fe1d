"""Subsymbols for an ATen op outside Core ATen: its decomposition (torch's own tables),
recorded on metadata-only copies of its inputs and reused for every later call with the same
signature; boolean-mask selection gets the ops that select by positions (`masks.py`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch._subclasses.fake_tensor
from torch._decomp import core_aten_decompositions, decomposition_table
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from thunderviz.capture.masks import mask_as_positions, selects_by_mask
from thunderviz.capture.recorder_state import Frame, RecorderState
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol, BsymTag, SourceLocation
from thunderviz.prims.aten import is_core_aten

__all__ = ["DecomposingRecorder"]

_CORE_DECOMPS = core_aten_decompositions()


def _decomposition(op: Any) -> Callable[..., Any] | None:
    return _CORE_DECOMPS.get(op) or decomposition_table.get(op)


@dataclass
class _Decomposition:
    """A recorded decomposition, reusable for other calls with the same signature."""

    bsyms: list[BoundSymbol]
    inputs: list[str]  # names of the tensor arguments it was recorded with, in order
    outputs: list[str]  # names of the outputs it was recorded for

    def instantiate(
        self, inputs: list[TensorProxy], outputs: list[TensorProxy], recorder: RecorderState
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
        elif not is_core_aten(func):
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
