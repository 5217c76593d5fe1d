"""Common subexpression elimination: one computation for bound symbols that are the same."""

from __future__ import annotations

from typing import Any

from torch.utils import _pytree as pytree

from thunderviz.core.proxies import Proxy
from thunderviz.core.symbol import BoundSymbol
from thunderviz.core.trace import Trace, timed_provenance
from thunderviz.prims.randomness import draws_random
from thunderviz.transforms.dce import has_side_effects
from thunderviz.transforms.recording import VISIT_TYPE, StepRecorder

__all__ = ["cse", "CSE"]


def _key(bsym: BoundSymbol, renames: dict[str, Proxy]) -> Any:
    def k(x: Any) -> Any:
        if isinstance(x, Proxy):
            return ("proxy", renames.get(x.name, x).name)
        if isinstance(x, float):
            return ("float", repr(x))  # 0.0 and -0.0, nan: compare as printed
        return (type(x).__name__, repr(x))

    leaves, spec = pytree.tree_flatten((bsym.args, bsym.kwargs))
    return bsym.sym.id, str(spec), tuple(k(x) for x in leaves)


def cse(trace: Trace, *, recorder: StepRecorder | None = None) -> Trace:
    """The second of two bound symbols with the same symbol and the same arguments is dropped
    and its outputs are read from the first. Random and side-effecting ones never merge."""
    with timed_provenance("CSE") as prov:
        seen: dict[Any, BoundSymbol] = {}
        renames: dict[str, Proxy] = {}
        out: list[BoundSymbol] = []
        for bsym in trace.bound_symbols:
            current = bsym.rename(renames)
            if has_side_effects(current) or draws_random(current):
                out.append(current)
                visit = VISIT_TYPE.NO_OP
            else:
                key = _key(current, {})
                first = seen.get(key)
                if first is None:
                    seen[key] = current
                    out.append(current)
                    visit = VISIT_TYPE.NO_OP
                else:
                    for dup, orig in zip(
                        current.flat_proxy_outs, first.flat_proxy_outs, strict=True
                    ):
                        renames[dup.name] = orig
                    visit = VISIT_TYPE.REPLACE
            if recorder is not None:
                removed = (bsym,) if visit is VISIT_TYPE.REPLACE else ()
                recorder.step(bsym, visit, out, removed=removed)
        output = pytree.tree_map(
            lambda x: renames.get(x.name, x) if isinstance(x, Proxy) else x, trace.output
        )
    result = trace.from_trace(bound_symbols=out, output=output)
    result.provenance.append(prov.result)
    return result


class CSE:
    name = "cse"

    def __call__(self, trace: Trace, *, recorder: StepRecorder | None = None) -> Trace:
        return cse(trace, recorder=recorder)
