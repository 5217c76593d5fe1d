"""What the backward stepper starts from: the augmented forward run on real inputs (its
saved-for-backward tensors and, if asked, every forward value's statistics), and the
cotangents the backward begins with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils import _pytree as pytree

from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.proxies import Proxy
from thunderviz.core.rng import generators_of, preserved_rng
from thunderviz.core.symbol import BsymTag
from thunderviz.debug.interpret import MISSING, StepError, number_default, run_bsym, where_of
from thunderviz.debug.stats import TensorStats, tensor_stats

__all__ = ["ForwardRun", "cotangent_values", "env_reader", "run_forward"]


@dataclass
class ForwardRun:
    """The augmented forward's values by proxy name (arguments, outputs, saved tensors; every
    value when recorded) and, when recorded, their statistics."""

    values: dict[str, Any]
    stats: dict[str, TensorStats] = field(default_factory=dict)


def env_reader(
    env: Mapping[str, Any], fallback: Mapping[str, Any] | None = None
) -> Callable[[Proxy], Any]:
    """Reads a proxy's value from `env`, then `fallback`, then its number default."""

    def read(p: Proxy) -> Any:
        v = env.get(p.name, MISSING)
        if v is MISSING and fallback is not None:
            v = fallback.get(p.name, MISSING)
        if v is MISSING:
            v = number_default(p)
        if v is MISSING:
            raise StepError(f"{p.name} is read before any step produced it")
        return v

    return read


def _call_args(
    result: AutodiffResult, forward_inputs: Sequence[Any]
) -> tuple[list[Any], dict[str, Any]]:
    fwd = result.forward
    values = list(forward_inputs)
    mutated = {
        b.args[0].name
        for b in result.augmented_forward.bound_symbols
        if BsymTag.MUTATION_EPILOGUE in b.tags and b.args and isinstance(b.args[0], Proxy)
    }
    names = [p.name for p in fwd.flat_args]
    # Never write into the caller's tensors: the program's own in-place updates (BatchNorm's
    # running statistics, an input updated in place) land on copies. Everything but
    # parameters is copied, not only what the trace says it mutates: interpreting a
    # torch-level call runs the call itself, which may update a buffer in place.
    for i, name in enumerate(names):
        v = values[i]
        if isinstance(v, torch.Tensor) and (
            name in mutated or not isinstance(v, torch.nn.Parameter)
        ):
            values[i] = v.detach().clone()
    n = len(fwd.args)
    return values[:n], dict(zip(fwd.kwargs, values[n:], strict=True))


def run_forward(
    result: AutodiffResult, forward_inputs: Sequence[Any], record: bool = False
) -> ForwardRun:
    """Run the augmented forward on `forward_inputs` (one per forward argument) under the
    caller's RNG state, which it leaves as it was (dropout draws what eager would), and the
    program's own generators' (a module's `self.gen`), left as they were too. With `record`
    it is interpreted bound symbol by bound symbol, keeping every value's stats."""
    with preserved_rng(generators_of(result.augmented_forward.constants)):
        return _run_recorded(result, forward_inputs) if record else _run(result, forward_inputs)


def _run(result: AutodiffResult, forward_inputs: Sequence[Any]) -> ForwardRun:
    aug = result.augmented_forward
    pos, kw = _call_args(result, forward_inputs)
    with torch.no_grad():
        out, saved = aug.python_callable()(*pos, **kw)
    primal, saved_names = aug.output
    env = {p.name: v for p, v in zip(aug.flat_args, [*pos, *kw.values()], strict=True)}
    flat_p = pytree.tree_leaves(primal)
    flat_v = pytree.tree_leaves(out)
    if len(flat_p) == len(flat_v):
        env.update({p.name: v for p, v in zip(flat_p, flat_v, strict=True) if isinstance(p, Proxy)})
    env.update({p.name: v for p, v in zip(saved_names, saved, strict=True)})
    return ForwardRun(env)


def _run_recorded(result: AutodiffResult, forward_inputs: Sequence[Any]) -> ForwardRun:
    aug = result.augmented_forward
    pos, kw = _call_args(result, forward_inputs)
    run = ForwardRun(dict(aug.constants))
    env, stats = run.values, run.stats
    env.update({p.name: v for p, v in zip(aug.flat_args, [*pos, *kw.values()], strict=True)})
    for p in aug.flat_args:
        if isinstance(env.get(p.name), torch.Tensor):
            stats[p.name] = tensor_stats(env[p.name])

    def write(name: str, value: Any) -> None:
        env[name] = value
        if isinstance(value, torch.Tensor):
            stats[name] = tensor_stats(value)

    with torch.no_grad():
        for bsym in aug.bound_symbols:
            try:
                run_bsym(bsym, env_reader(env), write)
            except StepError:
                raise
            except Exception as e:
                raise StepError(
                    f"the augmented forward failed at {bsym.sym.id} "
                    f"{where_of(bsym)}: {type(e).__name__}: {e}",
                    bsym,
                ) from e
    return run


def cotangent_values(
    result: AutodiffResult, forward_values: Mapping[str, Any], cotangents: Any
) -> list[Any]:
    """One cotangent per forward output that takes one (`result.cotangent_outputs`), from a
    sequence in that order (or one per place the program returns such an output at), a dict
    by output name or a single tensor; None: ones for scalar outputs (a non-scalar output
    needs one given)."""
    outs = result.cotangent_outputs
    if cotangents is None:
        values = []
        for p in outs:
            v = forward_values.get(p.name)
            if not isinstance(v, torch.Tensor) or v.numel() != 1:
                shapes = [q.type_string() for q in outs]
                raise ValueError(
                    "the forward returns non-scalar outputs that take a cotangent "
                    f"({', '.join(f'{q.name}: {s}' for q, s in zip(outs, shapes, strict=True))}); "  # noqa: E501
                    "pass cotangents=[...] (one tensor per output, in that order) or a dict "
                    "by output name"
                )
            values.append(torch.ones_like(v))
        return values
    if isinstance(cotangents, torch.Tensor):
        cotangents = [cotangents]
    if isinstance(cotangents, Mapping):
        missing = [p.name for p in outs if p.name not in cotangents]
        if missing:
            raise ValueError(f"cotangents missing for forward outputs {missing}")
        return [cotangents[p.name] for p in outs]
    cotangents = list(cotangents)
    wanted = {p.name for p in outs}
    places = [p for p in result.forward.flat_outputs if p.name in wanted]
    if len(cotangents) == len(places) != len(outs):  # one per place: `return y, y` takes two
        by_name = result.cotangents_by_name(list(zip(places, cotangents, strict=True)))
        return [by_name[p.name] for p in outs]
    if len(cotangents) != len(outs):
        raise ValueError(
            f"expected {len(outs)} cotangents (for {[p.name for p in outs]}), got {len(cotangents)}"
        )
    return cotangents
