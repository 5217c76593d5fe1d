"""OpInfo census: thunderviz's gradients against torch.autograd on torch's own op database.

For every OpInfo of `torch.testing._internal.common_methods_invocations.op_db` that supports
autograd on the device (the CPU unless `--device cuda`) in a dtype, the first few samples run
through `thunderviz.vjp` and through torch.autograd with the same random cotangents; outputs
and every floating input's gradient are compared. An OpInfo passes when all its samples do.
Otherwise it is:

* wrong: a value or gradient differs (the worst: a silently wrong gradient);
* no-rule: thunderviz refuses an op it has no grad rule for (the op is named and counted);
* error: anything else thunderviz raised.

In float64 and float32, OpInfos with a complex input or output (fft, polar, ...) are
counted apart. `--dtype complex128` runs every OpInfo that supports autograd in complex128
on complex samples (gradients of complex inputs, torch's conjugate convention); an op
thunderviz refuses for complex tensors counts as an error, never as a pass.
Samples torch.autograd itself rejects are left out. Run:

    .venv/bin/python -m benchmarks.opinfo_census                  # float64 and float32
    .venv/bin/python -m benchmarks.opinfo_census --dtype complex128
    .venv/bin/python -m benchmarks.opinfo_census --dtype float64 --ops sin,nn.functional.conv2d -v
    .venv/bin/python -m benchmarks.opinfo_census --device cuda     # torch's CUDA samples
    .venv/bin/python -m benchmarks.opinfo_census --shard 2/4       # every 4th OpInfo from the 2nd
    .venv/bin/python -m benchmarks.opinfo_census --dtype float64 --second-order
    .venv/bin/python -m benchmarks.opinfo_census --dtype float64 --at-edges

`--at-edges` rounds every floating sample value to a multiple of 1/2 first: ties (max, sort,
margins), zeros (x log x, sinc, atan2 at the origin), probabilities of exactly 0 and 1. A
gradient there is a convention, eager's (derivatives.yaml), and finite differences do not
settle a disagreement: thunderviz must give autograd's value, nan and inf included.

`--second-order` checks, for the OpInfos whose gradient torch differentiates again
(`supports_gradgrad`), a penalty taken inside the traced program: the op, then the squared
gradients of its outputs as to its inputs by `torch.autograd.grad(..., create_graph=True)`
inside the program (`autodiff/inner_grad.py`), differentiated again as to the inputs.
"""

from __future__ import annotations

import argparse
import signal
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.testing._internal.common_utils as torch_test_utils
import torch.testing._internal.opinfo.core as opinfo_core
from torch.testing._internal.common_methods_invocations import op_db
from torch.utils import _pytree as pytree

import thunderviz as tv
from benchmarks import census_references as references
from benchmarks.census_references import compare
from thunderviz.autodiff.errors import AutodiffError

# OpInfo.sample_inputs walks the Python stack looking for a unittest.TestCase to take skips
# from (~0.15 s an op); there is none here.
opinfo_core.extract_test_fn = torch_test_utils.extract_test_fn = lambda: None

DTYPES = {"float64": torch.float64, "float32": torch.float32, "complex128": torch.complex128}
DEFAULT_DTYPES = ("float64", "float32")
STATUSES = ("pass", "wrong", "no-rule", "error")
SECONDS_PER_OPINFO = 60


@dataclass
class Outcome:
    """One OpInfo in one dtype."""

    label: str
    status: str  # a STATUSES entry, or "complex" / "skipped"
    detail: str = ""
    missing: list[str] = field(default_factory=list)  # op ids with no rule


class _Timeout(Exception):
    pass


def _on_alarm(signum: int, frame: Any) -> None:
    raise _Timeout()


def label_of(info: Any) -> str:
    return f"{info.name}.{info.variant_test_name}" if info.variant_test_name else info.name


def _is_complex(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_complex()


def _sample_fn(info: Any, sample: Any):
    process = sample.output_process_fn_grad

    def fn(*args: Any, **kwargs: Any) -> Any:
        return process(info.op(*args, **kwargs))

    return fn


def _penalised(fn: Any, cts: list[Any]) -> Any:
    """The program `--second-order` checks: `fn`, then the sum of the squared gradients of
    its floating outputs (against `cts`) as to its floating inputs, taken inside it with
    create_graph=True; None where no gradient of it is differentiable."""

    def program(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        pairs = [
            (o, c)
            for o, c in zip(pytree.tree_leaves(out), cts, strict=True)
            if isinstance(o, torch.Tensor) and o.requires_grad and c is not None
        ]
        inputs = [
            x for x in pytree.tree_leaves(args) if isinstance(x, torch.Tensor) and x.requires_grad
        ]
        if not (pairs and inputs):
            return None
        outs, out_cts = zip(*pairs, strict=True)
        grads = torch.autograd.grad(outs, inputs, out_cts, create_graph=True, allow_unused=True)
        # every gradient, not only those that require grad: which of a kernel's gradients
        # do is eager's per-output bookkeeping (a GroupNorm's bias gradient does not), and
        # a trace's flags follow the kernel call as a whole; the values are what count
        penalty = sum((g * g.conj()).real.sum() for g in grads if g is not None)
        return penalty if isinstance(penalty, torch.Tensor) and penalty.requires_grad else None

    return program


def check_sample(
    fn: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    dtype: torch.dtype,
    notes: list[str] | None = None,
    strided: bool = False,
    second_order: bool = False,
    settle: bool = True,
) -> str | None:
    """'' when thunderviz agrees with torch.autograd, a description when not, None when
    torch.autograd rejects the sample. Raises what thunderviz raises. With `settle`, a
    gradient where autograd and thunderviz differ is settled by finite differences: if they
    side with thunderviz, the sample passes and `notes` says so."""
    gen = torch.Generator().manual_seed(0)
    try:
        with torch.no_grad():
            torch.manual_seed(0)
            eager = fn(*args, **kwargs)
        outs = pytree.tree_leaves(eager)
        # drawn on the CPU whatever the device, so every device compares the same cotangents
        cts = [
            cotangent(o, gen, strided)
            if isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex())
            else None
            for o in outs
        ]
        if second_order:
            fn = _penalised(fn, cts)
            first = next(x for x in pytree.tree_leaves(args) if isinstance(x, torch.Tensor))
            cts = [torch.ones((), dtype=dtype.to_real(), device=first.device)]
        ref_out, ref_grads = references.autograd(fn, args, kwargs, cts)
        if second_order and not isinstance(ref_out, torch.Tensor):
            return None  # no gradient of the op is differentiable
    except Exception:  # noqa: BLE001 - torch rejects this sample: nothing to compare with
        return None
    if second_order:
        outs = [ref_out]
    torch.manual_seed(0)
    placeholders = [  # for outputs with no gradient
        torch.zeros((), device=o.device if isinstance(o, torch.Tensor) else None) for o in outs
    ]
    out, grads = tv.vjp(fn)(
        args, [c if c is not None else z for c, z in zip(cts, placeholders, strict=True)], **kwargs
    )
    for i, (o_ref, o) in enumerate(
        zip(pytree.tree_leaves(ref_out), pytree.tree_leaves(out), strict=False)
    ):
        if isinstance(o_ref, torch.Tensor) and o_ref.dtype.is_floating_point:
            problem = compare(o_ref, o, dtype, f"output {i}")
            if problem:
                return problem
    ours = [
        g
        for g, x in zip(grads, pytree.tree_leaves(args), strict=False)
        if isinstance(x, torch.Tensor) and (x.is_floating_point() or x.is_complex())
    ]
    if len(ours) != len(ref_grads):
        return f"{len(ours)} gradients, autograd has {len(ref_grads)}"
    for i, (g, r) in enumerate(zip(ours, ref_grads, strict=True)):
        problem = compare(r, g, dtype, f"grad of input {i}")
        if problem:
            settled = references.settle(fn, args, kwargs, cts, i, g, r, dtype) if settle else None
            if settled is None:
                return problem
            if notes is not None:
                notes.append(f"grad of input {i}: {settled}")
    return ""


def cotangent(o: torch.Tensor, gen: torch.Generator, strided: bool) -> torch.Tensor:
    """A random cotangent like `o`; `strided`: every other element of a tensor twice as wide
    (what a transpose or a slice after the op hands its backward), for backward kernels that
    read memory as contiguous unless the rule makes it so (eager calls `.contiguous()`)."""
    if not strided or o.dim() == 0:
        return torch.randn(o.shape, generator=gen, dtype=o.dtype).to(o.device)
    wide = torch.randn((*o.shape[:-1], 2 * o.shape[-1]), generator=gen, dtype=o.dtype)
    return wide.to(o.device)[..., ::2]  # (sliced there: moving a gappy view makes it dense)


def at_halves(x: Any) -> Any:
    """A floating tensor's values rounded to multiples of 1/2 (`--at-edges`); else `x`."""
    if isinstance(x, torch.Tensor) and x.is_floating_point() and x.layout == torch.strided:
        return (x * 2).round() / 2
    return x


def census_opinfo(
    info: Any,
    dtype: torch.dtype,
    n_samples: int = 3,
    device: str = "cpu",
    strided: bool = False,
    second_order: bool = False,
    at_edges: bool = False,
) -> Outcome:
    label = label_of(info)
    if dtype not in info.supported_backward_dtypes(device):
        return Outcome(label, "skipped", "dtype not supported by autograd")
    if second_order and not info.supports_gradgrad:
        return Outcome(label, "skipped", "torch does not differentiate its gradient")
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(SECONDS_PER_OPINFO)
    compared, problems, missing, errors, notes = 0, [], [], [], []
    is_complex = False
    try:
        for i, sample in enumerate(info.sample_inputs(device, dtype, requires_grad=False)):
            if i >= n_samples:
                break
            fn = _sample_fn(info, sample)
            args, kwargs = (sample.input, *sample.args), dict(sample.kwargs)
            if at_edges:
                args, kwargs = pytree.tree_map(at_halves, (args, kwargs))
            try:
                with torch.no_grad():
                    torch.manual_seed(0)
                    eager = fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - a sample torch itself rejects
                continue
            if any(_is_complex(x) for x in pytree.tree_leaves((args, kwargs, eager))):
                is_complex = True
            try:
                result = check_sample(
                    fn, args, kwargs, dtype, notes, strided, second_order, settle=not at_edges
                )
            except AutodiffError as e:
                compared += 1
                if "has no grad rule" in str(e) and e.bsym is not None:
                    missing.append(e.bsym.sym.id)
                else:
                    errors.append(f"AutodiffError: {str(e).splitlines()[0][:160]}")
                continue
            except _Timeout:
                raise
            except Exception as e:  # noqa: BLE001 - the census reports it and goes on
                compared += 1
                errors.append(
                    f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                )
                continue
            if result is None:
                continue
            compared += 1
            if result:
                problems.append(f"sample {i}: {result}")
    except _Timeout:
        return Outcome(label, "error", f"over {SECONDS_PER_OPINFO} s")
    finally:
        signal.alarm(0)
    if not compared:
        return Outcome(label, "skipped", "torch.autograd rejects every sample")
    if problems:
        outcome = Outcome(label, "wrong", problems[0])
    elif missing:
        outcome = Outcome(label, "no-rule", ", ".join(sorted(set(missing))), sorted(set(missing)))
    elif errors:
        outcome = Outcome(label, "error", errors[0])
    else:
        outcome = Outcome(label, "pass", notes[0] if notes else "")
    if (
        is_complex and not dtype.is_complex
    ):  # counted apart, with what it would have been in `detail`
        return Outcome(
            label, "complex", outcome.status + (f": {outcome.detail}" if outcome.detail else "")
        )
    return outcome


def autograd_opinfos(names: Iterable[str] | None = None) -> list[Any]:
    wanted = set(names) if names else None
    return [
        o
        for o in op_db
        if o.supports_autograd and (wanted is None or o.name in wanted or label_of(o) in wanted)
    ]


def run(
    dtype: torch.dtype,
    infos: list[Any],
    n_samples: int = 3,
    device: str = "cpu",
    strided: bool = False,
    second_order: bool = False,
    at_edges: bool = False,
) -> list[Outcome]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [
            census_opinfo(info, dtype, n_samples, device, strided, second_order, at_edges)
            for info in infos
        ]


def summarize(name: str, outcomes: list[Outcome], seconds: float, verbose: bool) -> None:
    counts = Counter(o.status for o in outcomes)
    real = sum(counts[s] for s in STATUSES)
    pct = 100.0 * counts["pass"] / real if real else 0.0
    print(
        f"\n{name}: {counts['pass']} of {real} pass ({pct:.1f}%)  "
        + "  ".join(f"{s} {counts[s]}" for s in STATUSES)
        + f"  | complex (apart) {counts['complex']}"
        + f" ({sum(o.detail == 'pass' for o in outcomes if o.status == 'complex')} pass)"
        + f", skipped {counts['skipped']}"
        + f"  [{seconds:.0f} s]"
    )
    for status in (
        ("wrong", "pass", "error", "no-rule", "complex") if verbose else ("wrong", "pass")
    ):
        for o in outcomes:
            if o.status == status and o.detail and not (status == "complex" and o.detail == "pass"):
                print(f"  {status:8} {o.label:45} {o.detail}")


def rank_missing(outcomes: Iterable[Outcome]) -> list[tuple[str, int]]:
    """Missing op id -> how many OpInfos (by label) it blocks, most first."""
    blocked: dict[str, set[str]] = defaultdict(set)
    for o in outcomes:
        for op in o.missing:
            blocked[op].add(o.label)
    return sorted(
        ((op, len(labels)) for op, labels in blocked.items()), key=lambda kv: (-kv[1], kv[0])
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtype", choices=[*DTYPES, "both"], default="both")
    parser.add_argument("--ops", default="", help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--samples", type=int, default=3, help="samples per OpInfo")
    parser.add_argument("-v", "--verbose", action="store_true", help="list errors and no-rules")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument(
        "--shard", default="1/1", help="K/N: every Nth OpInfo from the Kth (parallel runs)"
    )
    parser.add_argument(
        "--strided-cotangents",
        action="store_true",
        help="cotangents that are not contiguous (as a transpose or slice after the op hands)",
    )
    parser.add_argument(
        "--second-order",
        action="store_true",
        help="a penalty on the gradients taken inside the traced program, differentiated again",
    )
    parser.add_argument(
        "--at-edges",
        action="store_true",
        help="sample values rounded to halves (ties, zeros, 0 and 1): eager's value, not settled",
    )
    ns = parser.parse_args()
    shard, shards = (int(part) for part in ns.shard.split("/"))
    infos = autograd_opinfos([n for n in ns.ops.split(",") if n] or None)[shard - 1 :: shards]
    dtypes = list(DEFAULT_DTYPES) if ns.dtype == "both" else [ns.dtype]
    every: list[Outcome] = []
    print(
        f"OpInfo census: {len(infos)} autograd-supporting OpInfos, "
        f"{torch.cuda.get_device_name() if ns.device != 'cpu' else 'CPU'}, "
        f"up to {ns.samples} samples each, thunderviz.vjp vs torch.autograd"
    )
    for name in dtypes:
        t0 = time.perf_counter()
        outcomes = run(
            DTYPES[name],
            infos,
            ns.samples,
            ns.device,
            ns.strided_cotangents,
            ns.second_order,
            ns.at_edges,
        )
        summarize(name, outcomes, time.perf_counter() - t0, ns.verbose)
        every += outcomes
    ranked = rank_missing(every)
    if ranked:
        print("\nmissing rules, by how many OpInfos they block:")
        for op, n in ranked:
            print(f"  {n:4}  {op}")


if __name__ == "__main__":
    main()
