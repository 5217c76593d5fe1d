"""What one step of the backward stepper did: a `StepRecord` (made by `StepRecorder`), and
which module a step is in."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.symbol import BoundSymbol, SourceLocation
from thunderviz.debug.interpret import is_unpack
from thunderviz.debug.stats import TensorStats, tensor_stats
from thunderviz.viz import protocol

__all__ = ["StepRecord", "StepRecorder", "module_of", "module_within"]


def module_within(path: str, ancestor: str) -> bool:
    """`path` is `ancestor` or inside it ("" contains everything)."""
    return ancestor == "" or path == ancestor or path.startswith(ancestor + ".")


def module_of(bsym: BoundSymbol) -> str:
    """The module a backward bound symbol belongs to: its own, else its forward op's."""
    if bsym.module_path:
        return bsym.module_path
    return bsym.fwd_bsym.module_path if bsym.fwd_bsym is not None else ""


@dataclass
class StepRecord:
    """What one executed backward bound symbol did.

    `index` is its position in the backward trace (op id `backward:<index>`); `outputs` the
    statistics of the tensors it produced; `grads` the statistics of forward-argument
    gradients it finished (keyed by the forward argument's name); `note` why a run stopped
    here, if it did. `source` is the user's line (for the saved-tensor unpack: the line that
    produced the first NaN/Inf saved value), `fwd_bsym` the forward op it belongs to.
    """

    index: int
    bsym: BoundSymbol
    outputs: dict[str, TensorStats] = field(default_factory=dict)
    grads: dict[str, TensorStats] = field(default_factory=dict)
    produced: tuple[str, ...] = ()
    note: str = ""
    source: SourceLocation | None = None
    fwd_bsym: BoundSymbol | None = None

    @property
    def op_id(self) -> str:
        return protocol.op_id("backward", self.index)

    @property
    def module_path(self) -> str:
        return module_of(self.bsym)

    @property
    def has_nan_or_inf(self) -> bool:
        return any(s.has_nan_or_inf for s in (*self.outputs.values(), *self.grads.values()))

    @property
    def bad_outputs(self) -> list[str]:
        """Names of produced tensors (or finished gradients) that hold NaN or Inf."""
        return [n for n, s in (*self.outputs.items(), *self.grads.items()) if s.has_nan_or_inf]

    @property
    def max_norm(self) -> float:
        """Largest norm among outputs and finished grads (a NaN norm counts as +inf)."""
        best = -math.inf
        for s in (*self.outputs.values(), *self.grads.values()):
            if s.norm is None:
                continue
            best = max(best, math.inf if math.isnan(s.norm) else s.norm)
        return best

    def to_json(self) -> dict[str, Any]:
        """The `Step` record of docs/view-format.md."""
        out: dict[str, Any] = {
            "index": self.index,
            "op": self.op_id,
            "outputs": {n: s.to_json() for n, s in self.outputs.items()},
            "grads": {n: s.to_json() for n, s in self.grads.items()},
        }
        if self.note:
            out["note"] = self.note
        return out

    def __repr__(self) -> str:
        where = f" at {self.source.short()}" if self.source is not None else ""
        note = f" ({self.note})" if self.note else ""
        return f"<step {self.index}: {self.bsym.sym.id} -> {', '.join(self.produced)}{where}{note}>"


class StepRecorder:
    """Makes the record of a step that ran: statistics of the tensors it produced and of the
    forward-argument gradients it finished, the user's line and the forward op it belongs
    to (for the saved-tensor unpack: the line and op that made its first NaN/Inf value)."""

    def __init__(
        self, result: AutodiffResult, top_forward_of: Callable[[BoundSymbol], BoundSymbol | None]
    ) -> None:
        self._grad_of: dict[str, list[str]] = {}  # backward name -> forward args it is the grad of
        for p, g in zip(result.forward.flat_args, result.grad_inputs, strict=True):
            if g is not None:
                self._grad_of.setdefault(g.name, []).append(p.name)
        self._aug_producer = {
            p.name: b for b in result.augmented_forward.bound_symbols for p in b.flat_proxy_outs
        }
        self._top_forward_of = top_forward_of

    def record(
        self, i: int, bsym: BoundSymbol, produced: list[str], env: Mapping[str, Any]
    ) -> StepRecord:
        """The record of backward step `i` (`bsym`), which bound `produced` in `env`."""
        outputs: dict[str, TensorStats] = {}
        grads: dict[str, TensorStats] = {}
        for name in dict.fromkeys(produced):
            v = env[name]
            if isinstance(v, torch.Tensor):
                st = tensor_stats(v)
                outputs[name] = st
                for arg in self._grad_of.get(name, ()):
                    grads[arg] = st
        fwd = bsym.fwd_bsym
        source = bsym.source or (fwd.source if fwd is not None else None)
        if source is None and is_unpack(bsym):
            for name, st in outputs.items():
                if st.has_nan_or_inf and name in self._aug_producer:
                    made = self._aug_producer[name]
                    source, fwd = made.source, made.fwd_bsym or self._top_forward_of(made)
                    break
        return StepRecord(i, bsym, outputs, grads, tuple(dict.fromkeys(produced)), "", source, fwd)
