"""Gradient flow: for every forward tensor, how big its gradient is, or why it has none.

The gradient of a forward tensor is the cotangent the backward computed for it: the reverse
sweep records which backward proxy is the accumulated cotangent of which forward proxy
(`AutodiffResult.cotangent_of`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.proxies import TensorProxy
from thunderviz.core.symbol import BsymTag
from thunderviz.debug.stats import TensorStats, json_number, tensor_stats

__all__ = ["GRAD_STATUSES", "cotangent_map", "grad_flow", "forward_tensors"]

GRAD_STATUSES = ("ok", "zero", "nan", "inf", "no_grad", "unused", "detached", "integer")


def forward_tensors(result_or_trace: Any) -> list[TensorProxy]:
    """The forward trace's tensors at top level: its arguments, then what its top-level ops
    produce, in order (each once)."""
    trace = (
        result_or_trace.forward if isinstance(result_or_trace, AutodiffResult) else result_or_trace
    )
    seen: set[str] = set()
    out: list[TensorProxy] = []
    for p in [*trace.flat_args, *(q for b in trace.bound_symbols for q in b.flat_proxy_outs)]:
        if isinstance(p, TensorProxy) and p.name not in seen:
            seen.add(p.name)
            out.append(p)
    return out


def _bound_in_backward(result: AutodiffResult) -> set[str]:
    return {p.name for b in result.backward.bound_symbols for p in b.flat_proxy_outs}


def cotangent_map(result: AutodiffResult) -> dict[str, str]:
    """Forward tensor name -> name of the backward proxy holding its full gradient, for
    the forward tensors (top level) whose gradient the backward computes."""
    bound = (
        _bound_in_backward(result)
        | set(result.backward.constants)
        | {p.name for p in result.reads_from_forward}
    )
    return {k: v for k, v in result.cotangent_of.items() if v in bound}


def _would_need(result: AutodiffResult) -> set[str]:
    """Forward tensors that would require grad if nothing were detached or under no_grad
    (what is computed from a float argument that requires grad)."""
    fwd = result.forward
    need = {
        p.name
        for p in fwd.flat_args
        if isinstance(p, TensorProxy) and p.is_float and p.requires_grad
    }
    for b in fwd.bound_symbols:
        if BsymTag.MUTATION_EPILOGUE in b.tags:
            continue
        if any(p.name in need for p in b.flat_tensor_args):
            need.update(p.name for p in b.flat_tensor_outs if p.is_float)
    return need


def grad_flow(
    result: AutodiffResult, values: Any, *, cotangents: Mapping[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """{forward tensor name: {"norm": ..., "status": ...}} for every top-level forward tensor
    (the `grad_flow` section of the view document; norms JSON-safe).

    `values`: a finished (or partly run) `BackwardStepper`, or a mapping from forward tensor
    name to its gradient (a tensor, or None). `cotangents`: the `cotangent_map(result)`, if
    already computed. Statuses: ok / zero / nan / inf (by value); integer (not a float
    tensor); no_grad (does not require grad); detached (would require grad but is cut off
    by `detach()` or `torch.no_grad()`); unused (requires grad, but no gradient reached it).
    """
    stats: dict[str, TensorStats] = {}
    if isinstance(values, Mapping):
        for name, g in values.items():
            if isinstance(g, torch.Tensor):
                stats[name] = tensor_stats(g)
    else:  # a stepper: the cotangents it has computed (statistics as it recorded them)
        cmap = cotangents if cotangents is not None else cotangent_map(result)
        for fwd_name, bwd_name in cmap.items():
            st = values.stats_of(bwd_name)
            if st is None and values.has_value(bwd_name):
                v = values.value(bwd_name)
                st = tensor_stats(v) if isinstance(v, torch.Tensor) else None
            if st is not None:
                stats[fwd_name] = st
    would_need = _would_need(result)
    flow: dict[str, dict[str, Any]] = {}
    for p in forward_tensors(result):
        if not p.is_float:
            flow[p.name] = {"norm": None, "status": "integer"}
            continue
        if not p.requires_grad:
            status = "detached" if p.name in would_need else "no_grad"
            flow[p.name] = {"norm": None, "status": status}
            continue
        st = stats.get(p.name)
        if st is None:
            flow[p.name] = {"norm": None, "status": "unused"}
            continue
        if st.nan:
            status = "nan"
        elif st.inf:
            status = "inf"
        elif st.numel == 0 or st.all_zero:
            status = "zero"
        else:
            status = "ok"
        flow[p.name] = {"norm": json_number(st.norm), "status": status}
    return flow
