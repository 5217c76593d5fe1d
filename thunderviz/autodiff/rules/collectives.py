"""Grad rules for the functional collectives of torch.distributed.

Each rank runs its own trace; a collective's backward is again a collective, which every
rank runs at the same place of its backward (the ranks trace the same program). The pairs
are those of torch's own autograd for these ops (`torch/distributed/_functional_collectives.py`):

* all_reduce(sum) ↔ all_reduce(sum) of the cotangent: each input reaches every output.
* all_gather ↔ reduce_scatter(sum): rank r's input is chunk r of every rank's output.
* reduce_scatter(sum) ↔ all_gather: chunk r of every input is summed into rank r's output.
* all_to_all ↔ the all_to_all with input and output splits swapped.
* wait_tensor passes the cotangent through.

torch refuses the backward of every reduction but sum; `avg` is the sum divided by the
group's size, so its backward is the sum's divided by it too (all_reduce(avg) of the
cotangent; all_gather then divide). Max, min, product and the bitwise ones have no
gradient here, as in torch. torch's broadcast has no backward: ours is the reduce to the
source that the forward's fan-out implies (the source's input reaches every rank's output;
no other rank's input reaches any), written as an all_reduce so that every rank runs the
same collective and only the source keeps the sum.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from thunderviz.autodiff.errors import AutodiffError
from thunderviz.autodiff.joint import get_grad, put_grad
from thunderviz.autodiff.registry import RuleSet
from thunderviz.autodiff.rules.common import only_where, pass_through
from thunderviz.core.context import building, current_builder
from thunderviz.core.locations import where
from thunderviz.prims import aten
from thunderviz.prims.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    BROADCAST,
    REDUCE_SCATTER,
    WAIT,
    collective_header,
)

RULES = RuleSet("collectives")

_DIFFERENTIABLE_REDUCTIONS = ("sum", "avg")


def _reduction(op_id: str, reduce_op: str) -> str:
    reduce_op = reduce_op.lower()
    if reduce_op not in _DIFFERENTIABLE_REDUCTIONS:
        builder = current_builder()  # the rule's forward builder knows the op's line
        at = where(builder.origin.source, builder.origin.module_path) if builder is not None else ""
        raise AutodiffError(
            f"{op_id} with reduce_op={reduce_op!r} at {at} has no gradient (torch's autograd "
            "for the functional collectives supports 'sum'; thunderviz adds 'avg'). Reduce "
            "with 'sum' or 'avg', or run this collective under torch.no_grad()."
        )
    return reduce_op


def _communicate(sym, *args):
    """Call a collective in a rule's backward, its line headed by what it does and over which
    ranks (as captured collectives are)."""
    out = sym(*args)
    recorded = building().bound_symbols[-1]
    recorded.header = collective_header(sym.fn, args)
    return out


def _dense(g):
    """These collectives read their input as one dense block (all_reduce copies its own)."""
    return aten.contiguous.default(g)


pass_through(RULES, WAIT)


@RULES.grad(ALL_REDUCE)
def all_reduce(x, reduce_op, group_name):
    reduce_op = _reduction(ALL_REDUCE.id, reduce_op)
    out = ALL_REDUCE(x, reduce_op, group_name)
    g = get_grad(out)
    put_grad(x, WAIT(_communicate(ALL_REDUCE, g, reduce_op, group_name)))
    return out


@RULES.grad(ALL_GATHER)
def all_gather_into_tensor(x, group_size, group_name):
    out = ALL_GATHER(x, group_size, group_name)
    g = get_grad(out)
    put_grad(x, WAIT(_communicate(REDUCE_SCATTER, _dense(g), "sum", group_size, group_name)))
    return out


@RULES.grad(REDUCE_SCATTER)
def reduce_scatter_tensor(x, reduce_op, group_size, group_name):
    reduce_op = _reduction(REDUCE_SCATTER.id, reduce_op)
    out = REDUCE_SCATTER(x, reduce_op, group_size, group_name)
    g = get_grad(out)
    gathered = WAIT(_communicate(ALL_GATHER, _dense(g), group_size, group_name))
    put_grad(x, gathered if reduce_op == "sum" else aten.div.Tensor(gathered, group_size))
    return out


@RULES.grad(ALL_TO_ALL)
def all_to_all_single(x, output_split_sizes, input_split_sizes, group_name):
    out = ALL_TO_ALL(x, output_split_sizes, input_split_sizes, group_name)
    g = get_grad(out)
    put_grad(
        x,
        WAIT(
            _communicate(ALL_TO_ALL, _dense(g), input_split_sizes, output_split_sizes, group_name)
        ),
    )
    return out


@RULES.grad(BROADCAST)
def broadcast(x, src, group_name):
    out = BROADCAST(x, src, group_name)
    g = get_grad(out)
    total = WAIT(_communicate(ALL_REDUCE, g, "sum", group_name))
    # Which rank this trace runs on is fixed when it is traced (one trace per process).
    # torch.distributed does not export it; the one way from a group name to the group
    group = dist.distributed_c10d._resolve_process_group(group_name)  # pyright: ignore[reportPrivateImportUsage]
    is_source = dist.get_rank(group) == src
    keep = aten.full.default([], is_source, dtype=torch.bool, device=x.device)
    put_grad(x, only_where(keep, total))
    return out
