"""The NaN/Inf ledger: where non-finite values appear in the backward, and where they end.

Every backward step gets one status, from whether what it read and what it produced hold
NaN or ±Inf:

- clean: finite in, finite out;
- born: finite in, non-finite out (the saved-tensor unpack counts its forward values as
  what it produces, so a NaN from the forward is born there, at the forward's line);
- propagated: non-finite in, non-finite out;
- healed: non-finite in, finite out (a mask that drops the infinities: relu's backward
  after sqrt's at zero).

A NaN that is born and then healed is harmless; one that reaches a parameter's gradient
is not. `first_nan_note` says which of the two the first one was.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from thunderviz.core.symbol import SourceLocation
from thunderviz.debug.interpret import is_unpack
from thunderviz.debug.stepper import BackwardStepper
from thunderviz.debug.steps import StepRecord
from thunderviz.viz import protocol

__all__ = ["LEDGER_STATUSES", "LedgerEntry", "nan_ledger", "first_nan_note"]

LEDGER_STATUSES = ("clean", "born", "propagated", "healed")


@dataclass(frozen=True)
class LedgerEntry:
    """One backward step's status, with the forward op it came from and the user's line.
    `bad_inputs` / `bad_outputs`: the names read / produced that hold NaN or Inf."""

    index: int
    status: str
    op: str
    forward_op: str | None
    forward_op_id: str | None
    module: str
    source: SourceLocation | None
    bad_inputs: tuple[str, ...] = ()
    bad_outputs: tuple[str, ...] = ()

    @property
    def op_id(self) -> str:
        return protocol.op_id("backward", self.index)

    def to_json(self) -> dict[str, Any]:
        """The `LedgerEntry` record of docs/view-format.md."""
        return {
            "op": self.op_id,
            "status": self.status,
            "bad_inputs": list(self.bad_inputs),
            "bad_outputs": list(self.bad_outputs),
        }

    def __repr__(self) -> str:
        where = f" at {self.source.short()}" if self.source is not None else ""
        fwd = f" (backward of {self.forward_op})" if self.forward_op else ""
        return f"<{self.status} {self.op_id}: {self.op}{fwd}{where}>"


def _non_finite(value: Any) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and (value.is_floating_point() or value.is_complex())
        and value.numel() > 0
        and not bool(torch.isfinite(value).all())
    )


def nan_ledger(stepper: BackwardStepper) -> list[LedgerEntry]:
    """One entry per step `stepper` has run, in order (run it to the end first for all)."""
    forward_ids = {
        id(b): protocol.op_id("forward", i)
        for i, b in enumerate(stepper.result.forward.bound_symbols)
    }
    entries = []
    for record in stepper.history:
        bsym = record.bsym
        bad_in: tuple[str, ...] = ()
        if not is_unpack(bsym):  # the unpack reads the saved tuple: what it holds is "out"
            names = dict.fromkeys(p.name for p in bsym.flat_proxy_args)
            bad_in = tuple(
                n for n in names if stepper.has_value(n) and _non_finite(stepper.value(n))
            )
        bad_out = tuple(n for n, st in record.outputs.items() if st.has_nan_or_inf)
        status = (
            ("propagated" if bad_out else "healed") if bad_in else ("born" if bad_out else "clean")
        )
        fwd = record.fwd_bsym
        entries.append(
            LedgerEntry(
                record.index,
                status,
                bsym.sym.id,
                fwd.sym.id if fwd is not None else None,
                forward_ids.get(id(fwd)) if fwd is not None else None,
                record.module_path,
                record.source,
                bad_in,
                bad_out,
            )
        )
    return entries


def first_nan_note(record: StepRecord, ledger: list[LedgerEntry], grads: dict[str, Any]) -> str:
    """What became of the first NaN/Inf (`record`, as `first_nan` found it): healed later,
    or which gradients of the forward's arguments it reaches."""
    poisoned = [name for name, g in grads.items() if _non_finite(g)]
    if poisoned:
        return "reaches the gradients of " + ", ".join(poisoned)
    healed = [e for e in ledger if e.index > record.index and e.status == "healed"]
    if healed:
        where = ", ".join(
            f"{e.op_id} ({e.forward_op or e.op}"
            + (f", {e.source.short()})" if e.source is not None else ")")
            for e in healed
        )
        return f"healed later at {where}: no gradient is non-finite"
    return "no gradient is non-finite"
