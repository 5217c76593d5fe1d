"""The reverse sweep: from a forward trace to its augmented forward and backward traces.

1. Decide what needs a gradient (inputs that require grad, and what is computed from them
   outside `torch.no_grad()`), and bring each bound symbol that needs one down to the level
   where a grad rule exists: its own rule first, else its subsymbols, else an error.
2. Walk those bound symbols in reverse, run each one's rule, and accumulate cotangents.
   The rule's forward code goes into the augmented forward at the op's place; its backward
   code goes into the backward trace.
3. Split: saved-for-backward is whatever the backward reads from the forward.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from thunderviz.autodiff.block_sweep import SweepState, sweep_blocks, tagged
from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import JointRun, run_joint
from thunderviz.autodiff.output_hooks import hook_points, numbered, place_hook_points
from thunderviz.autodiff.registry import JointFn, RuleSet
from thunderviz.autodiff.same_call import passes_values_of, same_args
from thunderviz.autodiff.saved import UNPACK, SavedTensor, describe_saved
from thunderviz.autodiff.sweep_log import Contribution, RuleApplication
from thunderviz.capture.recorder import INNER_GRAD_ID
from thunderviz.capture.rewriting import proxies_in
from thunderviz.core.builder import TraceBuilder
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol, BsymTag
from thunderviz.core.trace import Trace, TraceTag, timed_provenance
from thunderviz.prims import aten
from thunderviz.prims.missing_meta import differentiating
from thunderviz.transforms.dce import dce
from thunderviz.transforms.recording import VISIT_TYPE, StepRecorder

__all__ = ["AutodiffResult", "autodiff"]


@dataclass
class AutodiffResult:
    """The four traces of one program and what crosses from forward to backward.

    `augmented_forward(*args) -> (outputs, saved_for_backward)`;
    `backward(saved_for_backward, cotangents) -> one gradient per forward arg (or None)`.
    """

    forward: Trace
    augmented_forward: Trace
    backward: Trace
    saved_for_backward: list[SavedTensor]
    grad_inputs: list[Proxy | None]  # per forward arg: the backward output that is its grad
    cotangent_outputs: list[TensorProxy]  # forward outputs that take a cotangent, in order
    construction: StepRecorder | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    # forward proxy name -> the backward proxy holding its accumulated cotangent
    cotangent_of: dict[str, str] = field(default_factory=dict)
    # what each rule application read and contributed, in sweep order (for the debugger)
    applications: list[RuleApplication] = field(default_factory=list)

    @property
    def reads_from_forward(self) -> list[Proxy]:
        """The forward values the backward takes in (saved for backward, less the recomputed)."""
        return [s.proxy for s in self.saved_for_backward if not s.recomputed]

    @property
    def saved_bytes(self) -> int:
        return sum(s.bytes for s in self.saved_for_backward if not s.recomputed)

    def cotangents_by_name(self, given: list[tuple[Proxy, Any]]) -> dict[str, Any]:
        """Cotangents given per place in the forward's output, by output name: an output
        returned more than once (`return y, y`) gets the sum of its places' cotangents, as
        eager autograd sums them."""
        by_name: dict[str, Any] = {}
        for p, ct in given:
            by_name[p.name] = ct if p.name not in by_name else by_name[p.name] + ct
        return by_name


@dataclass
class _Unit:
    """A bound symbol at the level a rule handles it, and the top-level one it belongs to."""

    bsym: BoundSymbol
    top: BoundSymbol
    joint: JointFn | None  # its rule's joint function; None where no gradient flows through


def autodiff(
    trace: Trace,
    rules: RuleSet,
    *,
    recorder: StepRecorder | None = None,
    hook_outputs: bool = False,
) -> AutodiffResult:
    """`hook_outputs`: hook points for outputs read inside too (autodiff/output_hooks.py)."""
    timings: dict[str, float] = {}
    with timed_provenance("VJP") as prov:
        needs = {p.name for p in trace.flat_args if isinstance(p, TensorProxy) and p.requires_grad}
        units: list[_Unit] = []
        for bsym in trace.bound_symbols:
            _flatten(bsym, bsym, rules, needs, units)
        applications: list[RuleApplication] = []
        points = hook_points(trace, needs) if hook_outputs else {}
        fwd_segments, bwd_bsyms, cts, seeded = _sweep(
            trace, units, needs, recorder, applications, dict(points)
        )
        if points:
            bwd_bsyms = numbered(bwd_bsyms, cts, points)
        seeds = [seed for _, seed in seeded]
        grad_inputs = [cts.get(p.name) if p.name in needs else None for p in trace.flat_args]
    timings["vjp"] = prov.took_ms

    with timed_provenance("forward-backward split") as split_prov:
        backward, saved_names = _backward_trace(trace, bwd_bsyms, seeds, grad_inputs)
        aug_bsyms = [b for seg in fwd_segments for b in seg]
        augmented = trace.from_trace(
            name="augmented_forward",
            bound_symbols=aug_bsyms,
            output=(trace.output, tuple(saved_names)),
            output_spec=None,
            tags={TraceTag.AUGMENTED_FORWARD},
        )
        saved = describe_saved(saved_names, augmented, backward)
    timings["split"] = split_prov.took_ms
    for t, provs in (
        (augmented, (prov.result, split_prov.result)),
        (backward, (prov.result, split_prov.result)),
    ):
        t.provenance = [*trace.provenance, *provs]
    return AutodiffResult(
        trace,
        augmented,
        backward,
        saved,
        grad_inputs,
        [out for out, _ in seeded],
        recorder,
        timings,
        cotangent_of={name: ct.name for name, ct in cts.items()},
        applications=applications,
    )


def _float_outs(bsym: BoundSymbol) -> list[TensorProxy]:
    """`bsym.flat_tensor_outs` that are floating point."""
    return [p for p in bsym.flat_proxy_outs if isinstance(p, TensorProxy) and p.is_float]


def _flatten(
    bsym: BoundSymbol, top: BoundSymbol, rules: RuleSet, needs: set[str], units: list[_Unit]
) -> None:
    """Append `bsym` as units at the level rules exist, growing `needs` as grads flow."""
    touches_grad = not (bsym.tags & {BsymTag.NO_GRAD, BsymTag.MUTATION_EPILOGUE}) and any(
        isinstance(p, TensorProxy) and p.name in needs for p in bsym.flat_proxy_args
    )
    if not touches_grad:
        units.append(_Unit(bsym, top, None))
        return
    if bsym.executes_subsymbols:
        # a functionalized call (`y[i] = v`), or one whose inner values are read from
        # outside it: its outputs, if any, are not where its new values live; its
        # subsymbols are the code, and are differentiated as such
        for sub in bsym.subsymbols:
            _flatten(sub, top, rules, needs, units)
        return
    rule = rules.get(bsym.sym.id)
    if rule is not None and not rule.applies_to(bsym):
        rule = None  # this call is differentiated through its subsymbols
    refused_complex = rule is not None and rule.refuses_complex(bsym)
    if refused_complex:
        rule = None  # its subsymbols may have rules that support complex tensors
    if rule is not None and _float_outs(bsym):
        units.append(_Unit(bsym, top, rule.joint))
        if rule.differentiable:
            needs.update(p.name for p in _float_outs(bsym))
        return
    if not _float_outs(bsym):
        units.append(_Unit(bsym, top, None))
        return
    if bsym.subsymbols and _subsymbols_make_outputs(bsym):
        for sub in bsym.subsymbols:
            _flatten(sub, top, rules, needs, units)
        return
    # No rule: refused when a gradient reaches it, as torch refuses an op without a
    # derivative only when its backward gets there. Its outputs carry the need onwards so
    # that one that does reach it is seen; one read only through `.detach()` (the gradients
    # a fused loss computed in its forward, read again by a backward taken inside the
    # program) or not at all stops nothing.
    refusal = AutodiffError.complex_unsupported if refused_complex else AutodiffError.no_rule
    units.append(_Unit(bsym, top, _refused_when_reached(functools.partial(refusal, bsym, top))))
    needs.update(p.name for p in _float_outs(bsym))


def _refused_when_reached(refusal: Callable[[], AutodiffError]) -> JointFn:
    """The joint of an op no rule differentiates: run only when a cotangent reaches it."""

    def joint(*args: Any, **kwargs: Any) -> Any:
        raise refusal()

    return joint


def _subsymbols_make_outputs(bsym: BoundSymbol) -> bool:
    """Whether `bsym`'s subsymbols compute each of its outputs, but those that are its
    arguments as they came (`torch.atleast_1d(x, y)` returns a 1-d `x` itself). Those of the
    subsymbols one level down are looked at first, which is usually enough: the deeper ones
    (a decomposed op's decomposition) are not built unless needed
    (`BoundSymbol.defer_subsymbols`)."""
    wanted = {p.name for p in bsym.flat_tensor_outs} - {p.name for p in bsym.flat_proxy_args}
    wanted -= {p.name for s in bsym.subsymbols for p in s.flat_proxy_outs}
    if wanted:
        wanted -= {p.name for s in bsym.subsymbols for b in s.walk() for p in b.flat_proxy_outs}
    return not wanted


def _sweep(
    trace: Trace,
    units: list[_Unit],
    needs: set[str],
    recorder: StepRecorder | None,
    applications: list[RuleApplication],
    points: dict[str, int],
) -> tuple[
    list[list[BoundSymbol]],
    list[BoundSymbol],
    dict[str, Proxy],
    list[tuple[TensorProxy, TensorProxy]],
]:
    names = trace.names
    cts: dict[str, Proxy] = {}
    seeds: list[tuple[TensorProxy, TensorProxy]] = []  # (forward output, its cotangent)
    for p in trace.flat_outputs:
        if isinstance(p, TensorProxy) and p.is_float and p.name in needs and p.name not in cts:
            seed = TensorProxy(names.claim(f"ct_{p.name}"), p.shape, p.dtype, p.device)
            cts[p.name] = seed
            seeds.append((p, seed))
    state = SweepState(names, needs, cts, [[] for _ in units], [], applications, recorder)
    state.hook_points = points
    sweep_blocks(units, state, _sweep_unit, trace.meta.get("written_out", ()))
    _check_unread(state.unmade, state.fwd_segments, trace)
    return state.fwd_segments, state.bwd, cts, seeds


def _check_unread(
    unmade: dict[str, BoundSymbol], segments: list[list[BoundSymbol]], trace: Trace
) -> None:
    """An op output a grad rule made differently (`_place`) must be read by nothing."""
    if not unmade:
        return
    read = {p.name for seg in segments for x in seg for p in x.flat_proxy_args}
    read |= {p.name for p in trace.flat_outputs if isinstance(p, Proxy)}
    for name in unmade.keys() & read:
        raise AutodiffError(
            f"the grad rule for {unmade[name].sym.id} returns another value for the op's "
            f"output {name}, which the program reads: a rule must return the op's outputs.",
            bsym=unmade[name],
        )


def _sweep_unit(state: SweepState, units: list[_Unit], i: int) -> None:
    """Run the rule of units[i] (if a cotangent reaches it) and accumulate its gradients."""
    names, needs, cts = state.names, state.needs, state.cts
    unit = units[i]
    b = unit.bsym
    if state.hook_points:
        place_hook_points(state, unit, _float_outs(b))
    out_cts = {p.name: cts.get(p.name) for p in _float_outs(b)}
    if unit.joint is None or not any(v is not None for v in out_cts.values()):
        state.fwd_segments[i] = [b]
        return
    same_call = lambda args, kwargs: passes_values_of(b, args, kwargs)  # noqa: E731
    with differentiating(b, same_call):  # (its outputs' metadata: prims/missing_meta.py)
        run = run_joint(
            unit.joint,
            b.args,
            b.kwargs,
            names,
            lambda p: p.name in needs,
            b.origin,
            lambda: b.flat_outs,  # (built only for a rule that asks, `output_has_grad`)
            cts,
        )
    if state.read_by_inner_grads and any(name in state.read_by_inner_grads for name in out_cts):
        _check_cotangents_read(run, b, out_cts, state.read_by_inner_grads)
    forward, backward = _place(run, b, out_cts, names, state.unmade)
    state.fwd_segments[i] = [tagged(x, unit) for x in forward]
    emitted = [tagged(x, unit) for x in backward]
    accumulate = TraceBuilder(names, b.origin)
    added: list[Contribution] = []
    with accumulate:
        for x, g in run.grads:
            old = cts.get(x.name)
            cts[x.name] = g if old is None else aten.add.Tensor(old, g)
            state.ct_log.append((x.name, cts[x.name]))
            added.append(
                Contribution(x.name, g.name, None if old is None else old.name, cts[x.name].name)
            )
    emitted += [tagged(x, unit) for x in accumulate.bound_symbols]
    if unit.top.sym.id == INNER_GRAD_ID:
        state.read_by_inner_grads.update(x.name for x, _ in run.grads)
    state.bwd.extend(emitted)
    state.applications.append(
        RuleApplication(
            unit.top,
            b,
            tuple(name for e in emitted for name in _out_names(e)),
            {name: ct.name for name, ct in out_cts.items() if ct is not None},
            tuple(added),
        )
    )
    if state.recorder is not None:
        state.recorder.step(unit.top, VISIT_TYPE.INSERT_AFTER, state.bwd, inserted=emitted)


def _out_names(bsym: BoundSymbol) -> list[str]:
    return [p.name for p in bsym.flat_proxy_outs]


def _another_value(rule_out: Any, op_out: Any) -> bool:
    """Whether a rule's output is not the op's output: a tensor of another shape or kind."""
    return (
        isinstance(rule_out, TensorProxy)
        and isinstance(op_out, TensorProxy)
        and not op_out.describes(rule_out)
    )


def _output_pairs(result: Any, b: BoundSymbol) -> list[tuple[Proxy, Proxy | None]]:
    """Each proxy a rule returned, with the op's output at its place: None where the op's is
    no proxy (an output the program's call left undefined or constant, which the rule asked
    the op for: cuDNN attention's log-sum-exp and sequence lengths). Refused where the rule
    returns no proxy for one of the op's."""

    def refused(got: int) -> AutodiffError:
        return AutodiffError(
            f"the grad rule for {b.sym.id} returned {got} outputs; the op has "
            f"{len(b.flat_proxy_outs)}. A joint rule must return the op's outputs.",
            bsym=b,
        )

    op_out = b.output
    if not (
        isinstance(result, tuple | list)
        and isinstance(op_out, tuple | list)
        and len(result) == len(op_out)
    ):
        rule_outs, op_outs = proxies_in(result, []), b.flat_proxy_outs
        if len(rule_outs) != len(op_outs):
            raise refused(len(rule_outs))
        return list(zip(rule_outs, op_outs, strict=True))
    pairs: list[tuple[Proxy, Proxy | None]] = []
    for r, o in zip(result, op_out, strict=True):
        rule_outs, op_outs = proxies_in(r, []), proxies_in(o, [])
        if len(rule_outs) == len(op_outs):
            pairs += zip(rule_outs, op_outs, strict=True)
        elif not op_outs:
            pairs += [(x, None) for x in rule_outs]
        else:
            raise refused(len(proxies_in(result, [])))
    return pairs


def _place(
    run: JointRun,
    b: BoundSymbol,
    out_cts: dict[str, Proxy | None],
    names: Any,
    unmade: dict[str, BoundSymbol],
) -> tuple[list[BoundSymbol], list[BoundSymbol]]:
    """Give the rule's outputs the forward op's names, connect its cotangent placeholders to
    the accumulated cotangents (zeros where none flows), and keep the original bound symbol
    (with its subsymbols) when the rule's forward code is just that op again. An output the
    rule makes differently from the op goes into `unmade` (by the op's output's name)."""
    pairs = _output_pairs(run.result, b)
    forward = run.forward.bound_symbols
    # the rule's forward code is just the op again: its values are the op's, whatever shapes
    # the rule's meta kernel gave them (a CUDA kernel's empty buffer)
    again = len(forward) == 1 and forward[0].sym == b.sym and same_args(forward[0], b)
    renames: dict[str, Proxy] = {}
    for r, o in pairs:
        if o is None or r.name == o.name:
            continue  # (None: the rule's own value, where the program's call made none)
        if not again and _another_value(r, o):
            # the rule asked the op for more than the program did (an attention kernel's
            # log-sum-exp, which the program's call left empty): the value is the rule's,
            # under its own name, and the program's output is made by nothing
            if out_cts.get(o.name) is not None:
                raise AutodiffError(
                    f"the grad rule for {b.sym.id} returns {r} for the op's output {o}, "
                    "which a gradient flows into: a rule must return the op's outputs.",
                    bsym=b,
                )
            unmade[o.name] = b
            continue
        renames[r.name] = o
    zeros: list[BoundSymbol] = []
    for rule_out_name, ph in run.placeholders.items():
        orig = renames.get(rule_out_name)
        orig_name = orig.name if orig is not None else rule_out_name
        ct = out_cts.get(orig_name)
        if ct is not None:
            renames[ph.name] = ct
        elif ph.name in run.none_if_absent:  # the rule reads None for "no cotangent"
            renames[ph.name] = None  # type: ignore[assignment]
        else:  # this output takes no cotangent: the rule still reads one, so make zeros
            builder = TraceBuilder(names, b.origin)
            with builder:
                aten.full.default(list(ph.shape), 0.0, dtype=ph.dtype, device=ph.device)
            zero = builder.bound_symbols[0]
            renames[zero.output.name] = ph
            zeros.append(zero.rename({zero.output.name: ph}))
    forward = [b] if again else [x.rename(renames) for x in forward]
    backward = zeros + [x.rename(renames) for x in run.backward.bound_symbols]
    run.grads = [(x, renames.get(g.name, g)) for x, g in run.grads]
    return forward, backward


def _check_cotangents_read(
    run: JointRun, b: BoundSymbol, out_cts: dict[str, Proxy | None], read_by_inner: set[str]
) -> None:
    """A gradient of a gradient reaches an output of `b` that a backward traced inside the
    program reads (`autodiff/inner_grad.py`): the rule must take it, or it would be dropped
    without a word. Rules that take them are those of the ops torch differentiates twice
    (a normalization's statistics, log_sigmoid's buffer); the others (the log-sum-exp an
    attention kernel saves, which torch too treats as a constant) are refused, naming it,
    never a wrong gradient."""
    pairs = _output_pairs(run.result, b)
    asked = run.placeholders.keys()
    passed_through = {p.name for p in b.flat_proxy_args}  # (`broadcast_tensors` of a fit one)
    for r, o in pairs:
        if (
            isinstance(o, TensorProxy)
            and o.name in read_by_inner
            and o.name not in passed_through
            and out_cts.get(o.name) is not None
            and r.name not in asked
            and o.is_float
        ):
            raise AutodiffError(
                f"thunderviz cannot differentiate {b.sym.id} as to its output {o.name}, which "
                "a torch.autograd.grad inside the program reads in its backward, so a "
                "gradient of that gradient reaches it; torch too treats it as a constant, and "
                "its rule would drop that gradient. Take the inner gradient through ops torch "
                "differentiates twice (for attention, the math form: softmax(q @ k.T) @ v).",
                bsym=b,
            )


def _backward_trace(
    trace: Trace,
    bwd_bsyms: list[BoundSymbol],
    seeds: list[TensorProxy],
    grad_inputs: list[Proxy | None],
) -> tuple[Trace, list[Proxy]]:
    """The backward trace, and the forward values it reads (saved for backward, in order)."""
    names = trace.names
    saved_arg = Proxy(names.claim("saved_for_backward"))
    cts_arg = Proxy(names.claim("cotangents"))
    draft = trace.from_trace(
        name="backward",
        args=[],
        kwargs={},
        bound_symbols=list(bwd_bsyms),
        output=tuple(grad_inputs),
        tags={TraceTag.BACKWARD},
        constants={},
        output_spec=None,
    )
    draft = dce(draft)
    produced: set[str] = set()
    reads: list[Proxy] = []
    seed_names = {s.name for s in seeds}
    seen: set[str] = set()
    for bsym in draft.bound_symbols:
        for p in proxies_in((bsym.args, bsym.kwargs), []):
            if p.name not in produced and p.name not in seed_names and p.name not in seen:
                seen.add(p.name)
                reads.append(p)
        produced.update(_out_names(bsym))
    for g in grad_inputs:  # a gradient that is a forward value passed straight through
        if (
            g is not None
            and g.name not in produced
            and g.name not in seed_names
            and g.name not in seen
        ):
            seen.add(g.name)
            reads.append(g)
    constants = {p.name: trace.constants[p.name] for p in reads if p.name in trace.constants}
    saved = [p for p in reads if p.name not in constants]
    unpack = [
        BoundSymbol(sym=UNPACK, args=(saved_arg,), kwargs={}, output=tuple(saved)),
        BoundSymbol(sym=UNPACK, args=(cts_arg,), kwargs={}, output=tuple(seeds)),
    ]
    backward = draft.from_trace(
        args=[saved_arg, cts_arg], bound_symbols=unpack + draft.bound_symbols, constants=constants
    )
    return backward, saved
