"""Autocast's casts as bound symbols of their own.

Under `torch.autocast`, a call like `F.linear(x, w, b)` on float32 tensors casts its inputs
to bfloat16 before the kernel runs; the dispatch mode sees those casts as the call's first
ATen ops (`aten._to_copy(w, dtype=torch.bfloat16)`). Left inside the call, the trace would
say `F.linear(x, w, b)` on float32 inputs with a bfloat16 result, and a grad rule working
from the call's arguments would mix dtypes (`mm` of a bfloat16 gradient and a float32
weight). Hoisted out, the trace reads as what ran: the casts, then `F.linear` on bfloat16
inputs, which gives the same result with autocast on or off; the casts' grad rules give
the float32 parameter gradients eager gives.
"""

from __future__ import annotations

import torch
from torch.utils import _pytree as pytree

from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol

__all__ = ["autocast_enabled", "hoist_autocast_casts"]

_TO_COPY = torch.ops.aten._to_copy.default
_DEVICES = ("cpu", "cuda")


def autocast_enabled() -> bool:
    return any(torch.is_autocast_enabled(d) for d in _DEVICES)


def hoist_autocast_casts(bsym: BoundSymbol) -> list[BoundSymbol]:
    """Move the leading casts of `bsym`'s own tensor inputs out of its subsymbols; rewrite
    `bsym` (in place, it is not recorded yet) to take the cast values. Returns the casts,
    to be recorded before `bsym`."""
    inputs = {p.name for p in bsym.flat_tensor_args}
    casts: list[BoundSymbol] = []
    for sub in bsym.subsymbols:
        if not (sub.sym.fn is _TO_COPY or sub.sym.id == "aten._to_copy.default"):
            break
        if set(sub.kwargs) != {"dtype"} or len(sub.args) != 1:
            break
        source = sub.args[0]
        if not isinstance(source, TensorProxy) or source.name not in inputs:
            break
        casts.append(sub)
    if not casts:
        return []
    rest = bsym.subsymbols[len(casts) :]
    replaced = {c.args[0].name for c in casts}
    if any(p.name in replaced for s in rest for b in s.walk() for p in b.flat_proxy_args):
        return []  # the call also reads an input uncast: keep it as it is
    mapping: dict[str, Proxy] = {c.args[0].name: c.output for c in casts}
    swap = lambda x: mapping.get(x.name, x) if isinstance(x, Proxy) else x  # noqa: E731
    bsym.args = pytree.tree_map(swap, bsym.args)
    bsym.kwargs = pytree.tree_map(swap, bsym.kwargs)
    bsym.subsymbols = list(rest)
    first = casts[0]
    casts[0] = first.with_changes(header="autocast casts this call's inputs")
    return casts
