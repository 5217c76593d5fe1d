"""Module census: `thunderviz.jit` against eager on torch's own module tests.

For every ModuleInfo of `torch.testing._internal.common_modules.module_db` (114 nn modules
in torch 2.13: convolutions, pooling, norms, losses, RNNs, transformers, lazy modules ...),
every ModuleInput it makes on the CPU, in training mode and in eval mode: the module is built
once and copied; the original runs in eager and the copy through `thunderviz.jit`, twice
each (the second call runs the code the first compiled), each call followed by the gradient
of its floating outputs against the same random cotangents, taken with respect to every input
that requires grad and every parameter. Outputs, gradients, and the buffers after each call
(running statistics) are compared. A ModuleInfo passes when all its inputs do; otherwise
it is

* wrong: an output, a gradient or a buffer differs (the worst: nothing was raised);
* error: thunderviz raised where eager did not (the first such message is shown).

With `--mode double-backward`, what is compared is a gradient penalty: the squared gradients
of the inputs, taken with `create_graph=True`, differentiated again with respect to the
inputs and the parameters (for the ModuleInfos whose eager double backward torch tests).
With `--mode inner-grad`, the same penalty is taken inside the program that `jit` traces
(`torch.autograd.grad(..., create_graph=True)` in the traced call, as a WGAN-GP critic
loss does), on fixed cotangents, and the program returns it: the penalty and its gradients
as to the inputs and the parameters are compared.
With `--mode no-grad`, the calls run under `torch.no_grad()` (jit runs its forward trace
alone: inference), and outputs and buffers are compared.

Inputs eager itself rejects are left out. Run:

    .venv/bin/python -m benchmarks.module_census                        # float64
    .venv/bin/python -m benchmarks.module_census --dtype float32
    .venv/bin/python -m benchmarks.module_census --modules nn.LSTM,nn.CTCLoss -v
    .venv/bin/python -m benchmarks.module_census --mode double-backward    # or no-grad
    .venv/bin/python -m benchmarks.module_census --mode inner-grad
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.testing._internal.common_modules import module_db
from torch.utils import _pytree as pytree

import thunderviz as tv
from benchmarks.census_references import TOLERANCES, compare
from benchmarks.opinfo_census import DTYPES, Outcome, cotangent

STEPS = 2  # the first call traces and runs what it recorded; the second, the compiled code
# strided-backward: the backward, with cotangents that are not contiguous (as a transpose or
# a slice after the module hands its backward)
MODES = ("backward", "strided-backward", "double-backward", "inner-grad", "no-grad")


def module_infos(names: Iterable[str] | None = None) -> list[Any]:
    wanted = set(names) if names else None
    return [info for info in module_db if wanted is None or info.name in wanted]


def _fresh(x: Any) -> Any:
    """An input as a new leaf with the same values (each side, each call, gets its own)."""
    if isinstance(x, torch.Tensor):
        return x.detach().clone().requires_grad_(x.requires_grad)
    return x


def _call_tensors(out: Any, args: Any, kwargs: Any) -> tuple[list[Any], list[Any], list[Any]]:
    """A call's tensor outputs, those a gradient flows back from, and the inputs that
    require grad."""
    outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
    differentiable = [o for o in outs if o.requires_grad and o.is_floating_point()]
    leaves = pytree.tree_leaves((args, kwargs))
    inputs = [x for x in leaves if isinstance(x, torch.Tensor) and x.requires_grad]
    return outs, differentiable, inputs


def _run(
    module: torch.nn.Module, call: Callable[..., Any], module_input: Any, step: int, mode: str
):
    """One call and its backward: (outputs, gradients, buffers after). For `double-backward`
    the gradients are those of a penalty on the input gradients (taken with
    create_graph=True), and the penalty itself first; for `no-grad`, there are none."""
    args, kwargs = pytree.tree_map(
        _fresh, (module_input.forward_input.args, module_input.forward_input.kwargs)
    )
    torch.manual_seed(10 + step)  # the same draws on both sides
    with torch.set_grad_enabled(mode != "no-grad"):
        out = call(*args, **kwargs)
    outs, differentiable, inputs = _call_tensors(out, args, kwargs)
    wrt = inputs + [p for p in module.parameters() if p.requires_grad]
    grads: list[Any] = []
    gen = torch.Generator().manual_seed(20 + step)
    cts = [cotangent(o, gen, mode == "strided-backward") for o in differentiable]
    if mode == "inner-grad":
        if outs and outs[-1].requires_grad:  # the penalty (`_penalised`)
            grads = [outs[-1].detach(), *torch.autograd.grad(outs[-1], wrt, allow_unused=True)]
    elif mode == "double-backward" and differentiable and inputs:
        firsts = torch.autograd.grad(
            differentiable, inputs, cts, create_graph=True, allow_unused=True
        )
        penalty = sum((g * g).sum() for g in firsts if g is not None and g.requires_grad)
        if isinstance(penalty, torch.Tensor):
            grads = [penalty.detach(), *torch.autograd.grad(penalty, wrt, allow_unused=True)]
    elif differentiable and wrt:
        grads = list(torch.autograd.grad(differentiable, wrt, cts, allow_unused=True))
    return outs, grads, [b.detach().clone() for b in module.buffers()]


def _penalised(module: torch.nn.Module) -> Callable[..., Any]:
    """The program `--mode inner-grad` traces: the module's call, then a penalty on its
    inputs' gradients, taken inside with create_graph=True on fixed cotangents; it returns
    the outputs and the penalty last (or the outputs alone, where nothing is differentiable)."""

    def program(*args: Any, **kwargs: Any) -> Any:
        outs, differentiable, inputs = _call_tensors(module(*args, **kwargs), args, kwargs)
        if not (differentiable and inputs):
            return outs
        cts = [
            torch.linspace(-1, 1, o.numel(), dtype=o.dtype, device=o.device).reshape(o.shape)
            for o in differentiable
        ]
        firsts = torch.autograd.grad(
            differentiable, inputs, cts, create_graph=True, allow_unused=True
        )
        # every gradient: which of a kernel's gradients require grad is eager's per-output
        # bookkeeping (opinfo_census._penalised); the values are what count
        penalty = sum((g * g).sum() for g in firsts if g is not None)
        return [*outs, penalty] if isinstance(penalty, torch.Tensor) else outs

    return program


def check_input(
    info: Any, module_input: Any, training: bool, dtype: torch.dtype, mode: str = "backward"
) -> str | None:
    """'' when jit agrees with eager on this input, what differs when not, None when eager
    rejects it. Raises what thunderviz raises."""
    constructor = module_input.constructor_input
    torch.manual_seed(0)
    try:
        eager_module = info.module_cls(*constructor.args, **constructor.kwargs).to(dtype)
        eager_module.train(training)
        ours = copy.deepcopy(eager_module)
        eager_call = _penalised(eager_module) if mode == "inner-grad" else eager_module
        expected = [_run(eager_module, eager_call, module_input, s, mode) for s in range(STEPS)]
    except Exception:  # noqa: BLE001 - eager rejects it: nothing to compare with
        return None
    jitted = tv.jit(_penalised(ours) if mode == "inner-grad" else ours)
    for step in range(STEPS):
        got = _run(ours, jitted, module_input, step, mode)
        for part, want, have in zip(("output", "gradient", "buffer"), expected[step], got):
            if len(want) != len(have):
                return f"call {step + 1}: {len(have)} {part}s, eager has {len(want)}"
            for i, (w, h) in enumerate(zip(want, have, strict=True)):
                problem = compare(w, h, dtype, f"call {step + 1}, {part} {i}")
                if problem:
                    return problem
    return ""


def spread(inputs: list[Any], most: int | None) -> list[Any]:
    """At most `most` of the inputs, spread over the whole list, in their order. torch makes
    long input lists as products of a few options (LinearCrossEntropyLoss: 857 in training,
    from weights x smoothing x reductions x chunking; an LSTM's 32 from five yes-or-no
    options), so an option's value cycles with a small period (2, 3, 4, 6, ...). The inputs
    taken are those at 0, k, 2k, ... counted round the list: k a prime of at least 5 (so it
    shares no factor with those periods, and every value of each option is met in turn),
    about the list's length over `most` (so the walk spans the list), and not a factor of
    the length (so the walk round it meets no input twice)."""
    n = len(inputs)
    if most is None or n <= most:
        return inputs
    stride = max(5, -(-n // most))
    while n % stride == 0 or any(stride % d == 0 for d in range(2, int(stride**0.5) + 1)):
        stride += 1
    return [inputs[i] for i in sorted(j * stride % n for j in range(most))]


def census_module(
    info: Any, dtype: torch.dtype, mode: str = "backward", most: int | None = None
) -> Outcome:
    """One ModuleInfo in one of `MODES`: every input, or `most` of each phase's (`spread`)."""
    if mode in ("double-backward", "inner-grad") and not info.supports_gradgrad:
        return Outcome(info.name, "skipped", "eager has no double backward for it")
    compared, problems, errors = 0, [], []
    for training in (True, False):
        phase = "train" if training else "eval"  # (not `mode`: that is what is compared)
        inputs = info.module_inputs_func(
            info, device="cpu", dtype=dtype, requires_grad=True, training=training
        )
        for i, module_input in spread(list(enumerate(inputs)), most):
            if module_input.forward_input is None:
                continue
            where = f"{phase} input {i} {module_input.desc!r}"
            try:
                result = check_input(info, module_input, training, dtype, mode)
            except Exception as e:  # noqa: BLE001 - the census reports it and goes on
                compared += 1
                message = str(e).splitlines()[0][:200] if str(e) else ""
                errors.append(f"{where}: {type(e).__name__}: {message}")
                continue
            if result is None:
                continue
            compared += 1
            if result:
                problems.append(f"{where}: {result}")
    if not compared:
        return Outcome(info.name, "skipped", "eager rejects every input")
    if problems:
        return Outcome(info.name, "wrong", problems[0])
    if errors:
        return Outcome(info.name, "error", errors[0])
    return Outcome(info.name, "pass", f"{compared} inputs")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    parser.add_argument("--modules", help="comma-separated ModuleInfo names (default: all)")
    parser.add_argument("-v", action="store_true", help="list every module, passes included")
    parser.add_argument("--mode", choices=MODES, default="backward", help="what is compared")
    ns = parser.parse_args()
    dtype = DTYPES[ns.dtype]
    warnings.filterwarnings("ignore")
    start = time.perf_counter()
    outcomes = [
        census_module(info, dtype, ns.mode)
        for info in module_infos(ns.modules.split(",") if ns.modules else None)
    ]
    counts = Counter(o.status for o in outcomes)
    counted = len(outcomes) - counts["skipped"]
    print(
        f"Module census, {ns.dtype}, {ns.mode}: "
        f"{counts['pass']} of {counted} ModuleInfos pass "
        f"(wrong {counts['wrong']}, error {counts['error']}, skipped {counts['skipped']}) "
        f"[{time.perf_counter() - start:.0f} s]; tolerances {TOLERANCES[dtype]}"
    )
    for o in outcomes:
        if ns.v or o.status not in ("pass", "skipped"):
            print(f"  {o.status:7} {o.label:34} {o.detail}")


if __name__ == "__main__":
    main()
