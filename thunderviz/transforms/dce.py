"""Dead code elimination: drop bound symbols whose outputs nothing reads."""

from __future__ import annotations

from thunderviz.core.symbol import BoundSymbol, BsymTag
from thunderviz.core.trace import Trace, timed_provenance
from thunderviz.transforms.recording import VISIT_TYPE, StepRecorder

__all__ = ["dce", "DCE", "has_side_effects"]

_SIDE_EFFECT_TAGS = {BsymTag.MUTATION_EPILOGUE}


def has_side_effects(bsym: BoundSymbol) -> bool:
    """Writes into an input, or produces nothing (so it must be there for what it does)."""
    return bool(bsym.tags & _SIDE_EFFECT_TAGS) or not bsym.flat_proxy_outs


def dce(trace: Trace, *, recorder: StepRecorder | None = None) -> Trace:
    """Walk from the outputs back; keep a bound symbol if the outputs, a kept bound symbol or
    a side effect needs it. Subsymbols are left as they are (they describe, not execute)."""
    with timed_provenance("DCE") as prov:
        needed = {p.name for p in trace.flat_outputs}
        kept_reversed: list[BoundSymbol] = []
        remaining = list(trace.bound_symbols)
        for i in range(len(trace.bound_symbols) - 1, -1, -1):
            bsym = trace.bound_symbols[i]
            keep = has_side_effects(bsym) or any(p.name in needed for p in bsym.flat_proxy_outs)
            if keep:
                needed.update(p.name for p in bsym.flat_proxy_args)
                kept_reversed.append(bsym)
            else:
                remaining.pop(i)
            if recorder is not None:
                recorder.step(
                    bsym,
                    VISIT_TYPE.NO_OP if keep else VISIT_TYPE.REMOVE,
                    remaining,
                    removed=() if keep else (bsym,),
                )
    result = trace.from_trace(bound_symbols=kept_reversed[::-1])
    result.provenance.append(prov.result)
    return result


class DCE:
    name = "dce"

    def __call__(self, trace: Trace, *, recorder: StepRecorder | None = None) -> Trace:
        return dce(trace, recorder=recorder)
