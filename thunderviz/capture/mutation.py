"""Mutation made functional, in the recording only (the program itself runs as eager would).

An in-place op is recorded as its functional twin and the mutated tensor's proxy moves to the
new value; a write through a view is followed by the scatter that writes the view's new value
into its base; a view whose base changed since is re-derived before its next use
(`recorder_state.py`).
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.capture.decompositions import DecomposingRecorder
from thunderviz.capture.errors import CaptureError
from thunderviz.capture.functional_ops import functional_variant, scatter_into_base
from thunderviz.capture.rng import draw_order, inverse
from thunderviz.core.locations import where
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.prims.aliasing import mutated_tensors
from thunderviz.prims.call_args import op_args

__all__ = ["FunctionalizingRecorder"]

aten = torch.ops.aten


class FunctionalizingRecorder(DecomposingRecorder):
    """The recorder's in-place ops, recorded as their functional twins."""

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
        p_args = op_args(func, p_args, p_kwargs, leading=True)
        # an `out=` op's functional twin takes no `out`
        outs = {a.name for a in schema_args if a.is_out}
        if outs:
            p_kwargs = {k: v for k, v in p_kwargs.items() if k not in outs}
        mutated = mutated_tensors(func, args, kwargs)
        wants_grad = self._wants_grad(func, p_args, p_kwargs)
        order = None if returns_mutated else draw_order(func, functional, args, kwargs)
        if order is not None:
            new_values = [self._draw_in_memory_order(functional, p_args, p_kwargs, args[0], order)]
        else:
            if returns_mutated:
                normal = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
                outputs = [self._new_proxy(t, wants_grad) for t in normal]
                new_values = [self._fresh_proxy(t, wants_grad) for t in mutated]
                output: Any = tuple(outputs + new_values)
            else:
                new_values = [self._fresh_proxy(t, wants_grad) for t in mutated]
                output = new_values[0]
            bsym = self._bsym(functional, p_args, p_kwargs, output)
            self._expand(bsym, functional, args, kwargs)
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
        drawn = self._fresh_proxy(permuted, False)
        self._append(self._bsym(functional, (source, *p_args[1:]), p_kwargs, drawn))
        return self._record_only(aten.permute.default, (drawn, inverse(order)), t)

    def _write(self, t: torch.Tensor, value: Proxy) -> None:
        """`t` now holds `value`: move its proxy, and write through to its base if a view."""
        self.next_write()
        self.holds(t, value, written=True)
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
            self.holds(step.source, value, written=True)
        base_version = self._versions.get(id(info.base), 0) + 1
        self._versions[id(info.base)] = base_version
        for step in info.chain:  # every view along the way is now up to date
            if id(step.result) in self._views:
                self._views[id(step.result)].version = base_version
        self._frames[-1].mutated_views = True
