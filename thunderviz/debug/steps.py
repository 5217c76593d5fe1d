"""What one step of the backward stepper did: a `StepRecord`, and which module a step is in."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from thunderviz.core.symbol import BoundSymbol, SourceLocation
from thunderviz.debug.stats import TensorStats
from thunderviz.viz import protocol

__all__ = ["StepRecord", "module_of", "module_within"]


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
