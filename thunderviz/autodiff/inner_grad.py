"""`torch.autograd.grad` called inside a traced program: a gradient penalty (WGAN-GP, R1), a
physics-informed loss that reads `du/dx`, an inner optimisation step (MAML).

Capture runs the program on tensors that do not require grad, so torch's autograd has no
graph to differentiate there. The recording so far is one: the gradient is this layer's own
VJP of the recorded calls, from the `inputs` asked for to the `outputs` given, and its
backward trace runs at once on the values the program computed. Its ATen ops are recorded
like any of the program's (the recorder calls this in place of torch's function, under its
dispatch mode), as the subsymbols of one `torch.autograd.grad` call, so the trace reads as
the program does and a run of it computes the gradient anew each time.

With `create_graph=True` those ops are differentiated again when the whole trace is (the
penalty's gradient as to the parameters); without it, each gradient is detached, as
eager's is.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes

from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.capture.custom_function import FORWARD_ID
from thunderviz.capture.recorder import Recorder
from thunderviz.core.proxies import NameGenerator, Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol, BsymTag
from thunderviz.core.trace import Trace, without_no_grad
from thunderviz.prims.aten import aten_symbol
from thunderviz.transforms.dce import dce

__all__ = ["grad_of_recording"]

_SIGNATURE = inspect.signature(torch.autograd.grad)
aten = torch.ops.aten


def grad_of_recording(
    differentiate: Callable[[Trace], AutodiffResult],
    rules: Callable[[], RuleSet],
    recorder: Recorder,
    *args: Any,
    **kwargs: Any,
) -> tuple[torch.Tensor | None, ...]:
    """What `torch.autograd.grad(*args, **kwargs)` returns, computed from `recorder`'s
    recording by `differentiate` (the VJP by the `rules` active)."""
    call = _SIGNATURE.bind(*args, **kwargs)
    call.apply_defaults()
    a = call.arguments
    if a["is_grads_batched"]:
        raise RuntimeError(
            "torch.autograd.grad(is_grads_batched=True) inside a traced program is not "
            "supported: thunderviz would need a batched VJP. Loop over the grad_outputs "
            "instead, or call torch.func.vmap outside the traced call."
        )
    outputs = _tensors(a["outputs"], "outputs")
    inputs = _tensors(a["inputs"], "inputs")
    grad_outputs = _grad_outputs(a["grad_outputs"], len(outputs))
    allow_unused = bool(a["allow_unused"]) or bool(a["materialize_grads"])

    out_proxies = [_tensor_proxy(recorder, t) for t in outputs]
    in_proxies = [_tensor_proxy(recorder, t) for t in inputs]
    for i, p in enumerate(out_proxies):
        if not p.requires_grad:
            raise RuntimeError(
                f"element {i} of tensors does not require grad and does not have a grad_fn"
            )
    for p in in_proxies:
        if not p.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")

    # one cotangent per distinct output: those given twice add up, as eager's do
    cotangents: dict[str, torch.Tensor] = {}
    for t, p, g in zip(outputs, out_proxies, grad_outputs, strict=True):
        g = _implicit_cotangent(t) if g is None else g
        cotangents[p.name] = g if p.name not in cotangents else cotangents[p.name] + g
    firsts = {p.name: p for p in out_proxies}

    names = recorder.names
    assert isinstance(names, NameGenerator)  # (not inside a decomposition's recording)
    forward = Trace(
        name="differentiated",
        args=list(in_proxies),
        bound_symbols=recorder.recorded_so_far(),
        output=tuple(firsts.values()),
        constants=dict(recorder.constants),
        names=names,
    )
    with _disable_current_modes():  # the VJP's meta-tensor work is not the program's
        result = differentiate(forward)

    values = recorder.current_values()
    saved = [s.proxy for s in result.saved_for_backward]
    missing = [p for p in saved if p.name not in values]
    if missing:
        values.update(_run_new_forward_code(result.augmented_forward, missing, values))
    _expose(recorder, [p.name for p in saved])
    # run as the program's own code: with create_graph, what reads a value that requires
    # grad makes one (as eager's graph of the backward), and the ops no rule differentiates
    # (a normalization's backward kernel) are recorded with their decompositions, whose ops
    # rules do; without it, the call's values carry no gradient
    backward = without_no_grad(result.backward.python_callable())
    if a["create_graph"]:
        active = rules()
        mode, also = torch.enable_grad(), lambda op: active.get(aten_symbol(op).id) is None
    else:
        recorder.call_without_grad()
        mode, also = torch.no_grad(), None
    outer, recorder.decomposes_also = recorder.decomposes_also, also
    try:
        with mode:
            grads = backward(
                [values[p.name] for p in saved],
                [cotangents[p.name] for p in result.cotangent_outputs],
            )
    finally:
        recorder.decomposes_also = outer
    return _as_eager_returns(grads, inputs, allow_unused, a)


def _expose(recorder: Recorder, reads: list[str]) -> None:
    """The backward reads values the program made inside its calls (the batch statistics a
    `F.batch_norm` computed in its ATen op): each call that holds one, at any depth, has
    its subsymbols become the code, so that a run of the trace makes the value by name."""
    recorded = recorder.recorded_so_far()
    hidden = set(reads) - {p.name for b in recorded for p in b.flat_proxy_outs}
    if hidden:
        for b in recorded:
            _expose_within(b, hidden)
    in_open_calls = recorded[len(recorder.top.bsyms) :]
    if any(p.name in reads for b in in_open_calls for s in b.walk() for p in s.flat_proxy_outs):
        recorder.open_calls_read()


def _expose_within(bsym: BoundSymbol, hidden: set[str]) -> bool:
    """Whether `bsym`'s subsymbols make one of `hidden`; if so, they are its code."""
    found = False
    for sub in bsym.subsymbols:
        # a subsymbol that makes one is the code; its own subsymbols (a decomposition, which
        # makes the same names) stay below it
        if any(p.name in hidden for p in sub.flat_proxy_outs) or _expose_within(sub, hidden):
            found = True
    if found:
        bsym.tags.add(BsymTag.FUNCTIONALIZED)
    return found


def _tensors(x: Any, what: str) -> list[torch.Tensor]:
    items = [x] if isinstance(x, torch.Tensor) else list(x)
    for item in items:
        if not isinstance(item, torch.Tensor):
            raise TypeError(
                f"torch.autograd.grad inside a traced program takes tensors as its {what}, "
                f"got {type(item).__name__} (a GradientEdge cannot be followed in a trace)"
            )
    return items


def _grad_outputs(g: Any, n: int) -> list[torch.Tensor | None]:
    if g is None:
        return [None] * n
    items: list[torch.Tensor | None] = [g] if isinstance(g, torch.Tensor) else list(g)
    if len(items) != n:
        raise RuntimeError(
            "grad can be implicitly created only for scalar outputs"
            if not items
            else f"Mismatch in length: got {len(items)} grad_outputs for {n} outputs"
        )
    return items


def _implicit_cotangent(out: torch.Tensor) -> torch.Tensor:
    """Eager's seed for an output given no gradient: ones, for a scalar only."""
    if out.numel() != 1:
        raise RuntimeError("grad can be implicitly created only for scalar outputs")
    return torch.ones_like(out, memory_format=torch.preserve_format)


def _tensor_proxy(recorder: Recorder, t: torch.Tensor) -> TensorProxy:
    proxy = recorder.proxy_of(t)
    assert isinstance(proxy, TensorProxy)
    return proxy


def _run_new_forward_code(
    augmented: Trace, wanted: Sequence[Proxy], values: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The values the backward reads that the program never computed: a grad rule's own
    forward code made them (the statistics a fused normalization kernel returns beside its
    output). The augmented forward's bound symbols that make them are run on the recorded
    values; those whose outputs the program already has are not run again."""
    fresh = [
        b for b in augmented.bound_symbols if not all(p.name in values for p in b.flat_proxy_outs)
    ]
    draft = dce(augmented.from_trace(args=[], kwargs={}, bound_symbols=fresh, output=tuple(wanted)))
    # what it reads that the program has: its arguments (an op that passes an input through,
    # `broadcast_tensors`, names it again, which must not make it a local of its own)
    reads: dict[str, Proxy] = {}
    for b in draft.bound_symbols:
        for p in b.flat_proxy_args:
            if p.name in values and p.name not in augmented.constants:
                reads.setdefault(p.name, p)
    # the outputs of the user Functions it runs again, which their ctx may have saved
    calls = [b for b in draft.bound_symbols if b.sym.id == FORWARD_ID]
    rerun = [p for b in calls for p in b.flat_proxy_outs if isinstance(p, TensorProxy)]
    trace = draft.from_trace(args=list(reads.values()), output=(*wanted, *rerun), output_spec=None)
    run = without_no_grad(trace.python_callable())
    with torch.enable_grad():
        out = run(*(values[name] for name in reads))
    made = {p.name: v for p, v in zip((*wanted, *rerun), out, strict=True)}
    for b in calls:
        _saved_outputs_are_the_programs(b, made, values)
    return {p.name: made[p.name] for p in wanted}


def _saved_outputs_are_the_programs(
    call: BoundSymbol, made: dict[str, Any], values: dict[str, torch.Tensor]
) -> None:
    """A user Function run again for its ctx (`forward_with_ctx`) saved its own outputs
    (`ctx.save_for_backward(y)`, as an exp or a sigmoid does): in eager the saved output is
    the call's output, with its node, so a second derivative through the backward's reads
    of it reaches the Function's inputs. The ctx gets the program's output of the call
    (whose grad rule is the Function's) in place of the rerun's, which has no history."""
    *outputs, ctx = call.flat_proxy_outs
    user_ctx = made.get(ctx.name)
    if user_ctx is None:
        return
    programs = {
        id(made[p.name]): values[p.name]
        for p in outputs
        if isinstance(p, TensorProxy) and p.name in made and p.name in values
    }
    user_ctx.to_save = tuple(programs.get(id(t), t) for t in user_ctx.to_save)


def _as_eager_returns(
    grads: Sequence[torch.Tensor | None],
    inputs: list[torch.Tensor],
    allow_unused: bool,
    a: dict[str, Any],
) -> tuple[torch.Tensor | None, ...]:
    """One gradient per input, as eager returns them: detached without `create_graph`,
    zeros for an unused input with `materialize_grads`, else None where `allow_unused`."""
    out: list[torch.Tensor | None] = []
    for g, x in zip(grads, inputs, strict=True):
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    "One of the differentiated Tensors appears to not have been used in the "
                    "graph. Set allow_unused=True if this is the desired behavior."
                )
            out.append(torch.zeros_like(x) if a["materialize_grads"] else None)
        elif not a["create_graph"]:
            out.append(aten.detach.default(g))
        else:
            out.append(g)
    return tuple(out)
