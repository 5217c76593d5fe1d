"""Collectives in traces: torch.distributed's communication recorded as bound symbols.

Two kinds of calls reach the recorder:

* the functional collectives (`torch.distributed._functional_collectives`, the
  `torch.ops._c10d_functional` ops): pure ops that return a new tensor, followed by a
  `wait_tensor` before the result is read. They are recorded as they are, one bound symbol
  per op, with a printable name that runs (`torch.ops._c10d_functional.all_reduce(...)`)
  and a header naming the process group and its ranks (their symbols:
  `prims/collectives.py`). Eager code wraps the result in an `AsyncCollectiveTensor`
  (`_wrap_tensor_autograd`) that waits on first use; the recording waits right there
  instead, as torch does when it traces (`_maybe_wrap_tensor`).
* the in-place `torch.distributed.all_reduce` / `all_gather_into_tensor` /
  `reduce_scatter_tensor` / `broadcast`: functionalized like every other mutation, the way
  torch remaps them for tracing (`all_reduce_inplace`): the functional collective and its
  wait are recorded, and the written tensor's proxy moves to the result.

The legacy `c10d.*_` ops underneath the in-place calls return `Work` objects and alias their
inputs without saying so in their schemas: one reached any other way is refused, never
recorded as a no-op.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import _pop_mode_temporarily

from thunderviz.capture.errors import CaptureError
from thunderviz.capture.source import user_source
from thunderviz.core.locations import where
from thunderviz.core.symbol import BoundSymbol, BsymTag, Origin
from thunderviz.prims.collectives import collective_header, collective_symbol

__all__ = [
    "is_collective_call",
    "is_collective_op",
    "record_collective_call",
    "record_collective_op",
]

_FUNCTIONAL = torch.ops._c10d_functional
# Namespaces of the functional collectives (the `_autograd` one is an older alias).
_FUNCTIONAL_NAMESPACES = ("_c10d_functional", "_c10d_functional_autograd")
_COLLECTIVE_NAMESPACES = frozenset((*_FUNCTIONAL_NAMESPACES, "c10d"))
# What an in-place `dist.*` call's `op=` becomes in a functional collective.
_REDUCE_OP_NAMES = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.PRODUCT: "product",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.BAND: "band",
    dist.ReduceOp.BOR: "bor",
    dist.ReduceOp.BXOR: "bxor",
}


def _namespace(func: Any) -> str | None:
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return _op_namespace(func)
    return None


@functools.cache
def _op_namespace(op: Any) -> str:
    return (
        op._schema.name.split("::", 1)[0]
        if isinstance(op, torch._ops.OpOverload)
        else op._qualified_op_name.split("::", 1)[0]
    )


def is_collective_op(func: Any) -> bool:
    """An ATen-level op of torch.distributed (functional collectives and legacy c10d ops)."""
    return _namespace(func) in _COLLECTIVE_NAMESPACES


# --- the ATen level: what the recorder's dispatch mode sees -----------------------------------


def _at(recorder: Any) -> str:
    if recorder._source is None and not recorder.module_path:
        return "outside any line of the traced program"
    return f"at {where(recorder._source, recorder.module_path)}"


def _running_ddp() -> bool:
    """Whether DistributedDataParallel's forward is on the stack (its buffer broadcast and
    reducer calls reach the dispatcher as legacy c10d ops)."""
    frame = sys._getframe(1)
    while frame is not None:
        if isinstance(frame.f_locals.get("self"), DistributedDataParallel):
            return True
        frame = frame.f_back
    return False


def record_collective_op(
    recorder: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Run and record one collective op the dispatch mode saw; returns its real result."""
    packet = func._schema.name.split("::", 1)[1]
    if _namespace(func) == "c10d":
        ddp = _running_ddp()
        way_out = (
            "This is DistributedDataParallel's own communication (its forward broadcasts "
            "buffers, its reducer all-reduces gradients), which no trace of DDP.forward can "
            "hold: train with thunderviz.jit(ddp), which traces ddp.module and puts DDP's "
            "gradient all-reduces into the backward trace; debug one step with "
            "thunderviz.distributed.ddp_session(ddp, ...), which does the same."
            if ddp
            else "Call torch.distributed.all_reduce / all_gather_into_tensor / "
            "reduce_scatter_tensor / broadcast, or the functional collectives "
            "(torch.distributed._functional_collectives), which thunderviz records."
        )
        raise CaptureError(
            f"the in-place torch.distributed op c10d.{packet} ran "
            f"{_at(recorder)} through a call thunderviz does not record (it returns a Work "
            f"object and writes into its inputs). {way_out}",
            op=f"c10d.{packet}",
            source=recorder._source,
            module_path=recorder.module_path,
        )
    if packet == "_wrap_tensor_autograd":
        packet = "wait_tensor"  # wait here, as torch does when tracing (_maybe_wrap_tensor)
    op = getattr(getattr(_FUNCTIONAL, packet, None), "default", None)
    if op is None or op._schema.is_mutable:
        raise CaptureError(
            f"the functional collective {_namespace(func)}.{packet} "
            f"{_at(recorder)} writes into its input; thunderviz "
            "records the out-of-place collectives of torch.distributed._functional_collectives "
            "(all_reduce, all_gather_tensor, reduce_scatter_tensor, broadcast, "
            "all_to_all_single). Use one of those.",
            op=f"{_namespace(func)}.{packet}",
            source=recorder._source,
            module_path=recorder.module_path,
        )
    out = op(*args, **kwargs)
    p_args, p_kwargs = recorder.proxify((tuple(args), dict(kwargs)))
    wants_grad = recorder._wants_grad(op, p_args, p_kwargs)
    output = pytree.tree_map_only(torch.Tensor, lambda t: recorder._new_proxy(t, wants_grad), out)
    bsym = BoundSymbol(
        sym=collective_symbol(op),
        args=tuple(p_args),
        kwargs=dict(p_kwargs),
        output=output,
        origin=Origin(recorder._source, recorder.module_path),
        header=collective_header(op, tuple(args)),
    )
    if not torch.is_grad_enabled():
        bsym.tags.add(BsymTag.NO_GRAD)
    recorder._append(bsym)
    return out


# --- the torch level: what the recorder's function mode sees ---------------------------------


def _in_place_all_reduce(
    tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM, group: Any = None, async_op: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    group = group or dist.group.WORLD
    return tensor, _FUNCTIONAL.all_reduce.default(tensor, _reduce_op_name(op), group.group_name)


def _in_place_broadcast(
    tensor: torch.Tensor,
    src: int | None = None,
    group: Any = None,
    async_op: bool = False,
    group_src: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    group = group or dist.group.WORLD
    if group_src is None:
        if src is None:
            raise ValueError("broadcast needs src or group_src")
        group_src = dist.get_group_rank(group, src)
    return tensor, _FUNCTIONAL.broadcast.default(tensor, group_src, group.group_name)


def _in_place_all_gather(
    output_tensor: torch.Tensor,
    input_tensor: torch.Tensor,
    group: Any = None,
    async_op: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    group = group or dist.group.WORLD
    return output_tensor, _FUNCTIONAL.all_gather_into_tensor.default(
        input_tensor, group.size(), group.group_name
    )


def _in_place_reduce_scatter(
    output: torch.Tensor,
    input: torch.Tensor,
    op: Any = dist.ReduceOp.SUM,
    group: Any = None,
    async_op: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    group = group or dist.group.WORLD
    return output, _FUNCTIONAL.reduce_scatter_tensor.default(
        input, _reduce_op_name(op), group.size(), group.group_name
    )


def _in_place_calls() -> dict[Callable[..., Any], Callable[..., tuple[torch.Tensor, torch.Tensor]]]:
    """torch.distributed's in-place call -> (the tensor it writes, the functional collective's
    unwaited result), with the call's own signature and defaults. Keyed by each public
    function and what it wraps (loggers, deprecation shims): the function mode sees
    whichever layer asks for torch-function handling. torch 2.13 renamed
    all_gather_into_tensor / reduce_scatter_tensor to *_single (the old names delegate)."""
    table = {
        "all_reduce": _in_place_all_reduce,
        "broadcast": _in_place_broadcast,
        "all_gather_into_tensor": _in_place_all_gather,
        "all_gather_single": _in_place_all_gather,
        "reduce_scatter_tensor": _in_place_reduce_scatter,
        "reduce_scatter_single": _in_place_reduce_scatter,
    }
    out = {}
    for name, functionalized in table.items():
        fn = getattr(dist, name, None)
        while fn is not None:
            out[fn] = functionalized
            fn = getattr(fn, "__wrapped__", None)
    return out


_IN_PLACE = _in_place_calls()


def _reduce_op_name(op: Any) -> str:
    name = _REDUCE_OP_NAMES.get(op)
    if name is None:
        raise ValueError(f"torch.distributed.ReduceOp {op} has no functional collective")
    return name


def is_collective_call(func: Any) -> bool:
    """A torch-level call the recorder hands to `record_collective_call`."""
    return func in _IN_PLACE or _namespace(func) in _FUNCTIONAL_NAMESPACES


class _CompletedWork:
    """What an `async_op=True` in-place call returns once functionalized: the collective
    already ran (and was waited on) where it was recorded."""

    def wait(self, timeout: Any = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True


def record_collective_call(
    recorder: Any, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Record a torch-level collective call at the user's line; returns what eager returns.

    Functional collectives run as they are (their ops are recorded one level down, at the
    top of the trace); an in-place call runs its functional twin and then writes the result
    into its tensor, as eager would leave it, while the recording moves the tensor's proxy
    to the new value (and into its base, for a view)."""
    source = user_source()
    outer, recorder._source = recorder._source, source
    try:
        in_place = _IN_PLACE.get(func)
        if in_place is None:
            return func(*args, **kwargs)
        try:
            signature = inspect.signature(in_place).bind(*args, **kwargs)
            written, result = in_place(*signature.args, **signature.kwargs)
        except (TypeError, ValueError) as e:  # arguments torch would refuse too; PREMUL_SUM
            raise CaptureError(
                f"torch.distributed.{func.__name__} {_at(recorder)}: {e}",
                op=f"torch.distributed.{func.__name__}",
                source=source,
                module_path=recorder.module_path,
            ) from e
        new = _FUNCTIONAL.wait_tensor.default(result)
        if new.shape != written.shape:  # all_gather_into_tensor into a stacked output
            new = new.view(written.shape)
        with _pop_mode_temporarily():  # the program's own write, not part of the recording
            written.copy_(new)
        recorder._write(written, recorder.proxy_of(new))
        return _CompletedWork() if signature.arguments.get("async_op") else None
    finally:
        recorder._source = outer
