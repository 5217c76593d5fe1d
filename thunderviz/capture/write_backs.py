"""What a trace writes back at its end: the new values of the tensors the program wrote into
that outlive the call.

- Inputs (BatchNorm's running statistics, an in-place update of an argument): the program
  ran on copies, whose last values are copied back into the inputs.
- A tensor the program resized in place (an observer's per-channel statistics and a
  FakeQuantize's scale, `resize_` from their empty or one-element start) is resized back
  first, as eager left it, then copied into.
- Tensors the program reads from outside (a global counter, a tensor kept as a plain module
  attribute, `C.add_(1)`): the program writes into the user's own tensor while it is traced,
  so its value before the first write is kept and put back when the recording ends (tracing
  leaves everything the user has as it was), and the trace writes the new value into it,
  as each eager call does. Without the write-back a jitted call left the tensor unchanged
  from the second call on; without the restore, tracing changed it.
"""

from __future__ import annotations

from typing import Any

import torch

from thunderviz.capture.dispatch_mode import unrecorded
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol, BsymTag, Symbol, SymbolKind
from thunderviz.prims.aliasing import mutated_tensors

__all__ = [
    "write_backs",
    "note_outside_write",
    "outside_write_backs",
    "restore_outside",
]

_COPY_BACK = Symbol(
    name="copy_", id="torch.Tensor.copy_", fn=torch.Tensor.copy_, kind=SymbolKind.METHOD
)
_RESIZE_BACK = Symbol(
    name="resize_", id="torch.Tensor.resize_", fn=torch.Tensor.resize_, kind=SymbolKind.METHOD
)


def write_backs(recorder: Any, written: list[tuple[torch.Tensor, Proxy]]) -> list[BoundSymbol]:
    """A write-back of each tensor whose value moved on: `written` holds (the tensor the
    program ran on, the proxy it had when the trace began)."""
    out = []
    for tensor, original in written:
        final = recorder.proxy_of(tensor)
        if final.name == original.name:
            continue
        if (
            isinstance(final, TensorProxy)
            and isinstance(original, TensorProxy)
            and final.shape != original.shape
        ):
            out.append(
                BoundSymbol(
                    sym=_RESIZE_BACK,
                    args=(original, tuple(final.shape)),
                    kwargs={},
                    output=None,
                    tags={BsymTag.MUTATION_EPILOGUE},
                    header=f"resize {original.name} as the program did",
                )
            )
        out.append(
            BoundSymbol(
                sym=_COPY_BACK,
                args=(original, final),
                kwargs={},
                output=None,
                tags={BsymTag.MUTATION_EPILOGUE},
                header=f"write the new value of {original.name} back into it",
            )
        )
    return out


def note_outside_write(recorder: Any, func: Any, args: Any, kwargs: Any) -> None:
    """Before an ATen op that writes in place runs: a tensor from outside the program it is
    about to write into for the first time (directly or through a view) has its value kept."""
    for value in mutated_tensors(func, args, kwargs):
        view = recorder._views.get(id(value))
        base = view.base if view is not None else value
        if id(base) in recorder.outside and id(base) not in recorder.outside_before:
            with unrecorded(), torch.no_grad():
                recorder.outside_before[id(base)] = base.clone()


def outside_write_backs(recorder: Any) -> list[BoundSymbol]:
    """The write-backs into the tensors from outside that the program wrote into."""
    return write_backs(recorder, [recorder.outside[k] for k in recorder.outside_before])


def restore_outside(recorder: Any) -> None:
    """The tensors from outside the program wrote into, as they were before it ran (the
    proxies keep what the recording saw)."""
    for k, before in recorder.outside_before.items():
        tensor, _ = recorder.outside[k]
        with unrecorded(), torch.no_grad():
            tensor.copy_(before)
