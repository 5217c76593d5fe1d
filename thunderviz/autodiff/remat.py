"""Rematerialization: recompute cheap residuals in backward instead of saving them.

A residual made by a pointwise op or a view, from values the backward has anyway (other
residuals, or the forward's inputs when those are saved), is recomputed at the top of the
backward and dropped from saved-for-backward. The recomputed bound symbols are the forward's
own (same kernels, same arguments), tagged RECOMPUTE_IN_BACKWARD, so results are identical.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from thunderviz.autodiff.saved import UNPACK, describe_saved
from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.dag import producers
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol, BsymTag
from thunderviz.core.trace import timed_provenance
from thunderviz.prims.aliasing import is_view_op
from thunderviz.prims.randomness import is_random_op

__all__ = ["rematerialize", "is_cheap"]


def is_cheap(bsym: BoundSymbol) -> bool:
    """Pointwise ATen ops and views: recomputing them costs one pass over memory."""
    op = bsym.sym.fn
    if not isinstance(op, torch._ops.OpOverload) or bsym.tags & {BsymTag.DATA_DEPENDENT}:
        return False
    if is_random_op(op):  # recomputing would draw other numbers
        return False
    return torch.Tag.pointwise in op.tags or is_view_op(op)


def rematerialize(result: AutodiffResult) -> AutodiffResult:
    """A new AutodiffResult whose backward recomputes cheap residuals (see module doc)."""
    with timed_provenance("rematerialization") as prov:
        aug = result.augmented_forward
        made_by = producers(aug.bound_symbols)
        saved: list[Proxy] = list(aug.output[1])
        recompute: list[BoundSymbol] = []
        changed = True
        while changed:  # a recomputed value may make another one recomputable
            changed = False
            saved_names = {p.name for p in saved}
            for p in list(saved):
                bsym = made_by.get(p.name)
                if bsym is None or not is_cheap(bsym) or len(bsym.flat_proxy_outs) != 1:
                    continue
                inputs = bsym.flat_tensor_args
                new_inputs = [i for i in inputs if i.name not in saved_names]
                # only a win if it saves more than the inputs it adds to saved-for-backward
                added = sum(i.nbytes for i in new_inputs)
                if added >= (p.nbytes if isinstance(p, TensorProxy) else 0):
                    continue
                saved.remove(p)
                saved.extend(new_inputs)
                recompute.append(
                    bsym.with_changes(tags=bsym.tags | {BsymTag.RECOMPUTE_IN_BACKWARD})
                )
                changed = True
                break
        ordered = _in_forward_order(recompute, aug.bound_symbols)
        bwd = result.backward
        unpack_saved, unpack_cts, *body = bwd.bound_symbols
        new_unpack = BoundSymbol(sym=UNPACK, args=unpack_saved.args, kwargs={}, output=tuple(saved))
        backward = bwd.from_trace(bound_symbols=[new_unpack, unpack_cts, *ordered, *body])
        augmented = aug.from_trace(output=(aug.output[0], tuple(saved)))
    for t in (augmented, backward):
        t.provenance.append(prov.result)
    described = describe_saved(saved, augmented, backward)
    dropped = [s for s in result.saved_for_backward if s.name not in {p.name for p in saved}]
    for s in dropped:
        described.append(replace(s, recomputed=True))
    return replace(
        result, augmented_forward=augmented, backward=backward, saved_for_backward=described
    )


def _in_forward_order(bsyms: list[BoundSymbol], forward: list[BoundSymbol]) -> list[BoundSymbol]:
    position = {id(b): i for i, b in enumerate(forward)}
    by_output = {b.flat_proxy_outs[0].name: b for b in bsyms}
    originals = [b for b in forward if b.flat_proxy_outs and b.flat_proxy_outs[0].name in by_output]
    return [
        by_output[b.flat_proxy_outs[0].name]
        for b in sorted(originals, key=lambda b: position[id(b)])
    ]
