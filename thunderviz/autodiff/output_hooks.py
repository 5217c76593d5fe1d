"""Hook points in a jitted call's backward, for the outputs the program also reads inside.

A jitted call is one autograd node, so autograd hands its backward only the gradient its
outputs get from outside the call. Eager's gradient of an output the program also reads
inside (the hidden states a model returns, the logits its loss was computed from) is the sum
of both, and that is what a hook the user registers on the output after the call sees (and
may replace), and what `retain_grad()` keeps. So, for jit, the backward of such an output has
a hook point where its gradient is whole, before the backward goes on into the op that made
it:

    ct_t7 = thunderviz_output_hooks(2, ct_t3)   # t7: the call's 2nd flat output

`k` is the output's place among the call's flat outputs. The sweep places each point with
no `k` (`UNNUMBERED`), so that identical blocks whose outputs have points are still written
out from one another (autodiff/block_sweep.py); `numbered` gives each its `k` afterwards, by
the output whose cotangent it became. Autodiff only places the point; the executor says what
runs there (executor/output_hooks.py), and the debugger's traces, which run no user hooks,
have none.
"""

from __future__ import annotations

from typing import Any

from torch.utils import _pytree as pytree

from thunderviz.autodiff.block_sweep import SweepState, tagged
from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import BoundSymbol, Symbol
from thunderviz.core.trace import Trace

__all__ = [
    "OUTPUT_HOOKS",
    "hook_points",
    "numbered",
    "output_hook_positions",
    "place_hook_points",
]

# What runs there is the executor's: the name is bound where a backward is compiled.
OUTPUT_HOOKS = Symbol(name="thunderviz_output_hooks", id="thunderviz.output_hooks", fn=None)
UNNUMBERED = -1  # a point's `k` until `numbered`


def hook_points(trace: Trace, needs: set[str]) -> dict[str, int]:
    """Output name -> its place among the flat outputs, for each differentiable output the
    trace's own bound symbols read (a returned input is no op's output: it has none)."""
    read = {p.name for b in trace.bound_symbols for p in b.flat_proxy_args}
    inputs = {p.name for p in trace.flat_args if isinstance(p, TensorProxy)}
    points: dict[str, int] = {}
    for k, p in enumerate(pytree.tree_leaves(trace.output)):
        if (
            isinstance(p, TensorProxy)
            and p.is_float
            and p.name in needs
            and p.name in read
            and p.name not in inputs
        ):
            points.setdefault(p.name, k)  # an output returned twice: its first place
    return points


def place_hook_points(state: SweepState, unit: Any, outs: list[TensorProxy]) -> None:
    """Before `unit`'s op goes back, the gradient of each of its outputs with a hook point,
    whole now, goes through it: `hooked = thunderviz_output_hooks(k, grad)`, and the sweep
    reads `hooked` from here on."""
    for p in outs:
        k = state.hook_points.pop(p.name, None)
        grad = state.cts.get(p.name)
        if k is None or not isinstance(grad, TensorProxy) or unit.joint is None:
            continue
        hooked = TensorProxy(state.names.fresh("ct"), grad.shape, grad.dtype, grad.device)
        point = BoundSymbol(OUTPUT_HOOKS, (UNNUMBERED, grad), {}, hooked, origin=unit.bsym.origin)
        state.bwd.append(tagged(point, unit))
        state.cts[p.name] = hooked
        state.ct_log.append((p.name, hooked))


def numbered(
    bwd: list[BoundSymbol], cts: dict[str, Any], points: dict[str, int]
) -> list[BoundSymbol]:
    """`bwd` with each hook point's `k`: that of the output whose cotangent (`cts`, forward
    name -> its final cotangent) the point's result is. A point written out for an output
    that has none would be refused by the block's key (`block_sweep._key`)."""
    output_of = {ct.name: name for name, ct in cts.items() if name in points}
    out = []
    for b in bwd:
        if b.sym.id == OUTPUT_HOOKS.id:
            b = b.with_changes(args=(points[output_of[b.output.name]], b.args[1]))
        out.append(b)
    return out


def output_hook_positions(backward: Trace) -> tuple[int, ...]:
    """The flat output places a backward has hook points for."""
    return tuple(b.args[0] for b in backward.bound_symbols if b.sym.id == OUTPUT_HOOKS.id)
