"""Saved values that a write-back overwrites: read before it, for the backward.

A trace writes a buffer's new value back into it at the end of the forward (BatchNorm's
running statistics updated in place; `self.scale = self.scale * 2` replacing one). When the
backward also needs the buffer's value from before the update (`out = h * self.scale`, whose
gradient reads `scale`), the augmented forward would save the buffer's tensor and then
overwrite it, and the backward would read the new value: a wrong gradient, silently (the
write happens inside the autograd Function, before its tensors are saved, so autograd's
version check cannot see it). So the augmented forward saves a clone of such a value, taken
just before the write-backs; the backward trace is unchanged (it reads the saved values by
position).
"""

from __future__ import annotations

import dataclasses

import torch

from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import BoundSymbol, BsymTag
from thunderviz.core.trace import Trace
from thunderviz.prims.aten import aten_symbol

__all__ = ["saved_before_write_backs"]

_CLONE = aten_symbol(torch.ops.aten.clone.default)


def saved_before_write_backs(augmented: Trace) -> Trace:
    """`augmented` (outputs, saved values) with each saved value that a write-back
    overwrites replaced by a clone taken before the first write-back."""
    bsyms = augmented.bound_symbols
    first = next((i for i, b in enumerate(bsyms) if BsymTag.MUTATION_EPILOGUE in b.tags), None)
    if first is None:
        return augmented
    written = {b.args[0].name for b in bsyms[first:] if BsymTag.MUTATION_EPILOGUE in b.tags}
    out, saved = augmented.output
    clones: dict[str, BoundSymbol] = {}
    for p in saved:
        if isinstance(p, TensorProxy) and p.name in written and p.name not in clones:
            copy = dataclasses.replace(p, name=augmented.names.claim(f"{p.name}_read"))
            clones[p.name] = BoundSymbol(
                sym=_CLONE,
                args=(p,),
                kwargs={},
                output=copy,
                header=f"{p.name} as the backward reads it, before its write-back below",
            )
    if not clones:
        return augmented
    kept = tuple(clones[p.name].output if p.name in clones else p for p in saved)
    return augmented.from_trace(
        bound_symbols=[*bsyms[:first], *clones.values(), *bsyms[first:]], output=(out, kept)
    )
