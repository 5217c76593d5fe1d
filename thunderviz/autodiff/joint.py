"""Running one joint grad rule: splitting it into forward code and backward code.

While a rule runs, its symbol calls are recorded into the forward builder until the rule asks
for a cotangent (`get_grad`); from then on they go into the backward builder. `put_grad`
records an input's gradient, fitted to the input's shape, dtype and device.
"""

from __future__ import annotations

from collections.abc import Callable, Container
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from thunderviz.autodiff.shapes import match_input
from thunderviz.core.builder import TraceBuilder
from thunderviz.core.context import current_builder, pop_builder, push_builder
from thunderviz.core.proxies import NameGenerator, Proxy, TensorProxy
from thunderviz.core.symbol import NO_ORIGIN, Origin

__all__ = ["get_grad", "output_has_grad", "put_grad", "requires_grad", "JointRun", "run_joint"]


@dataclass
class JointRun:
    """What one rule produced: forward and backward bound symbols, the cotangent placeholders
    it asked for (rule output proxy -> placeholder), and the (input, gradient) pairs."""

    forward: TraceBuilder
    backward: TraceBuilder
    needs_grad: Callable[[Proxy], bool]
    placeholders: dict[str, TensorProxy] = field(default_factory=dict)
    grads: list[tuple[Proxy, Proxy]] = field(default_factory=list)
    # placeholders that read None, not zeros, when no cotangent flows to their output
    none_if_absent: set[str] = field(default_factory=set)
    in_backward: bool = False
    result: Any = None
    # the op's outputs, and the names of the values a cotangent flows into (None: not
    # known, all may): read only by the rules that ask, `output_has_grad`
    op_outputs: Callable[[], list[Any]] | None = None
    with_cotangents: Container[str] = ()

    def switch_to_backward(self) -> None:
        if not self.in_backward:
            pop_builder(self.forward)
            push_builder(self.backward)
            self.in_backward = True


# The rules running now, innermost last; per thread (and asyncio task), like the builders.
_runs: ContextVar[tuple[JointRun, ...]] = ContextVar("thunderviz_joint_runs", default=())


def _current(name: str) -> JointRun:
    runs = _runs.get()
    if not runs:
        raise RuntimeError(f"{name}() is for grad rules: it works only while autodiff runs a rule")
    return runs[-1]


def get_grad(out: Any, *, none_if_absent: bool = False) -> TensorProxy | None:
    """The cotangent of `out`, an output the rule computed. Everything after the first call
    is backward code. Where no cotangent flows to `out` it is zeros, or with
    `none_if_absent=True` the literal None (for code that tells the two apart: a user's
    autograd.Function backward after `ctx.set_materialize_grads(False)`)."""
    run = _current("get_grad")
    run.switch_to_backward()
    if not isinstance(out, TensorProxy):
        return None
    ph = run.placeholders.get(out.name)
    if ph is None:
        ph = TensorProxy(
            name=run.backward.names.fresh("ct"), shape=out.shape, dtype=out.dtype, device=out.device
        )
        run.placeholders[out.name] = ph
    if none_if_absent:
        run.none_if_absent.add(ph.name)
    return ph


def output_has_grad(i: int) -> bool:
    """Whether a cotangent flows into the op's `i`-th output, for a rule that does work only
    for those that have one (a normalization's statistics, which only a gradient of its
    gradient reads). Where autodiff cannot tell, True."""
    run = _current("output_has_grad")
    if run.op_outputs is None:
        return True
    outputs = run.op_outputs()
    return (
        i < len(outputs)
        and isinstance(outputs[i], Proxy)
        and outputs[i].name in run.with_cotangents
    )


def put_grad(x: Any, g: Any) -> None:
    """Record `g` as (a contribution to) the gradient of the rule's input `x`."""
    run = _current("put_grad")
    run.switch_to_backward()
    if not isinstance(x, TensorProxy) or g is None or not run.needs_grad(x):
        return
    if not isinstance(g, TensorProxy):
        raise TypeError(f"put_grad({x.name}, ...) expects a tensor proxy, got {g!r}")
    run.grads.append((x, match_input(x, g)))


def requires_grad(x: Any) -> bool:
    """Whether the input `x` of the running rule needs a gradient (skip work when not)."""
    return isinstance(x, TensorProxy) and _current("requires_grad").needs_grad(x)


def run_joint(
    rule: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    names: NameGenerator,
    needs_grad: Callable[[Proxy], bool],
    origin: Origin = NO_ORIGIN,
    op_outputs: Callable[[], list[Any]] | None = None,
    with_cotangents: Container[str] = (),
) -> JointRun:
    run = JointRun(
        TraceBuilder(names, origin),
        TraceBuilder(names, origin),
        needs_grad,
        op_outputs=op_outputs,
        with_cotangents=with_cotangents,
    )
    token = _runs.set((*_runs.get(), run))
    push_builder(run.forward)
    try:
        run.result = rule(*args, **kwargs)
    finally:
        top = current_builder()
        pop_builder(top)
        _runs.reset(token)
    return run
