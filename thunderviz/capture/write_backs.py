"""What a trace writes back at its end: the new values of the tensors the program wrote into
that outlive the call.

- Inputs (BatchNorm's running statistics, an in-place update of an argument): the program
  ran on copies, whose last values are copied back into the inputs.
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
from torch.utils._python_dispatch import _disable_current_modes

from thunderviz.core.proxies import Proxy
from thunderviz.core.symbol import BoundSymbol, BsymTag, Symbol, SymbolKind
from thunderviz.prims.aliasing import mutated_arg_indices

__all__ = [
    "input_write_backs",
    "note_outside_write",
    "outside_write_backs",
    "restore_outside",
]

_COPY_BACK = Symbol(
    name="copy_", id="torch.Tensor.copy_", fn=torch.Tensor.copy_, kind=SymbolKind.METHOD
)


def _copy_back(target: Proxy, value: Proxy) -> BoundSymbol:
    return BoundSymbol(
        sym=_COPY_BACK,
        args=(target, value),
        kwargs={},
        output=None,
        tags={BsymTag.MUTATION_EPILOGUE},
        header=f"write the new value of {target.name} back into it",
    )


def input_write_backs(
    recorder: Any, originals: list[tuple[torch.Tensor, Proxy]]
) -> list[BoundSymbol]:
    """Inputs the program mutated get their new value copied back at the end, as eager would
    leave them. `originals`: (the copy the program ran on, the input's proxy)."""
    out = []
    for tensor, original in originals:
        final = recorder.proxy_of(tensor)
        if final.name != original.name:
            out.append(_copy_back(original, final))
    return out


def note_outside_write(recorder: Any, func: Any, args: Any, kwargs: Any) -> None:
    """Before an ATen op that writes in place runs: a tensor from outside the program it is
    about to write into for the first time (directly or through a view) has its value kept."""
    schema = func._schema.arguments
    for i in mutated_arg_indices(func):
        value = args[i] if i < len(args) else kwargs.get(schema[i].name)
        if not isinstance(value, torch.Tensor):
            continue
        view = recorder._views.get(id(value))
        base = view.base if view is not None else value
        held = recorder.outside.get(id(base))
        if held is not None and len(held) == 2:  # (tensor, proxy): not written yet
            with _disable_current_modes(), torch._C.DisableTorchFunction(), torch.no_grad():
                before = base.clone()
            recorder.outside[id(base)] = (*held, before)


def outside_write_backs(recorder: Any) -> list[BoundSymbol]:
    """The write-backs into the tensors from outside that the program wrote into."""
    out = []
    for held in recorder.outside.values():
        if len(held) == 3:
            tensor, original, _ = held
            final = recorder.proxy_of(tensor)
            if final.name != original.name:
                out.append(_copy_back(original, final))
    return out


def restore_outside(recorder: Any) -> None:
    """The tensors from outside the program wrote into, as they were before it ran (the
    proxies keep what the recording saw)."""
    for held in recorder.outside.values():
        if len(held) == 3:
            tensor, _, before = held
            with _disable_current_modes(), torch._C.DisableTorchFunction(), torch.no_grad():
                tensor.copy_(before)
