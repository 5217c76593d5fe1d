"""`thunderviz.jit(DistributedDataParallel(model))`: DDP's gradient sync in the backward trace.

Eager DDP does its communication outside the module: the reducer's hooks on autograd copy
each gradient into a bucket as it becomes ready and all-reduce the bucket once it is full.
Under jit the module's own forward is traced (`ddp.module`), and the reducer's work becomes
bound symbols of the backward trace: for each bucket, its gradients flattened into one
buffer, divided by the world size, all-reduced (sum) and split back, placed right after the
last of its gradients is computed, as the reducer would launch it. Buckets follow DDP's
sizes (`bucket_cap_mb`, and the smaller first bucket) in the order the gradients become
ready in the backward trace, which is how DDP rebuilds its buckets after the first step.

Also as DDP does: buffers are broadcast from rank 0 before each forward
(`broadcast_buffers`, by DDP's own method); under `no_sync()` (or with
`require_backward_grad_sync` false) the backward has no all-reduces and gradients accumulate
locally, and the next synchronized step reduces what accumulated; a parameter that gets no
gradient is an error unless `find_unused_parameters=True`, when it is left out, as DDP
leaves a parameter no rank used.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.builder import TraceBuilder
from thunderviz.core.inputs import InputKind
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol
from thunderviz.core.trace import Trace, timed_provenance
from thunderviz.prims import aten
from thunderviz.prims.collectives import ALL_REDUCE, WAIT, describe_group

__all__ = ["DDPSync", "refuse_fully_sharded"]


def refuse_fully_sharded(fn: Any) -> None:
    """FSDP2 (`fully_shard`) gathers parameters in forward hooks and reduce-scatters their
    gradients in backward hooks: none of that would reach a trace, so it is refused."""
    fsdp_module = getattr(getattr(dist, "fsdp", None), "FSDPModule", None)
    if (
        fsdp_module is not None
        and isinstance(fn, torch.nn.Module)
        and any(isinstance(m, fsdp_module) for m in fn.modules())
    ):
        raise NotImplementedError(
            f"thunderviz.jit does not support FSDP (fully_shard): {type(fn).__name__} has "
            "sharded submodules whose parameter all-gathers and gradient reduce-scatters run in "
            "module hooks outside any trace. Debug the unsharded model (or one rank's shard of "
            "it written with functional collectives), or wrap it in DistributedDataParallel, "
            "which thunderviz.jit supports."
        )


@dataclasses.dataclass
class _Bucket:
    cap: int  # bytes at which it closes
    params: list[int] = dataclasses.field(default_factory=list)  # positions in the flat args
    ready_at: int = 0  # index of the backward bound symbol after which all its grads exist
    size: int = 0


class DDPSync:
    """What jit does differently for a DistributedDataParallel module (see the module doc)."""

    def __init__(self, ddp: DistributedDataParallel) -> None:
        self.ddp = ddp
        self.module: torch.nn.Module = ddp.module
        group = ddp.process_group
        assert group is not None  # DDP's constructor sets it (the default group if none given)
        self.group = group
        self.world_size = group.size()
        config = getattr(ddp, "_bucket_config", None)
        self.bucket_bytes = ddp.bucket_bytes_cap
        self.first_bucket_bytes = (
            config.first_bucket_bytes_cap
            if config is not None
            # DDP's own default; torch.distributed imports it without exporting it
            else dist._DEFAULT_FIRST_BUCKET_BYTES  # pyright: ignore[reportPrivateImportUsage]
        )
        # gradients accumulated under no_sync() that the next synchronized step must reduce
        self._unsynced_grads = False

    @staticmethod
    def of(fn: Any) -> DDPSync | None:
        refuse_fully_sharded(fn)
        return DDPSync(fn) if isinstance(fn, DistributedDataParallel) else None

    @property
    def syncing(self) -> bool:
        """Whether this call's backward all-reduces (part of jit's cache key)."""
        return bool(self.ddp.require_backward_grad_sync) and torch.is_grad_enabled()

    def before_forward(self) -> None:
        self._refuse_custom_reduction()
        if self.ddp._check_sync_bufs_pre_fwd():
            self.ddp._sync_buffers()  # broadcast from rank 0, by DDP's own method
        # as DDP's forward leaves it: the next forward syncs buffers only after a synced one
        self.ddp.require_forward_param_sync = self.syncing
        if not torch.is_grad_enabled():
            return
        if not self.syncing:
            self._unsynced_grads = True
        elif self._unsynced_grads:
            # DDP reduces the accumulated .grad at the first synchronized backward. Our
            # backward reduces what it computes, so what accumulated locally is averaged
            # here; (old + new) averaged = old averaged + new averaged.
            self._unsynced_grads = False
            with torch.no_grad():
                for p in self.module.parameters():
                    if p.grad is not None:
                        p.grad.div_(self.world_size)
                        dist.all_reduce(p.grad, group=self.group)

    def _refuse_custom_reduction(self) -> None:
        """The backward trace averages gradients as DDP's default reducer does; a comm hook
        or DDP's mixed precision would reduce otherwise, so they are refused, not ignored."""
        custom = [
            what
            for what, on in (
                (
                    "a communication hook (register_comm_hook)",
                    getattr(self.ddp, "_comm_hooks", None),
                ),
                ("mixed_precision", getattr(self.ddp, "mixed_precision", None) is not None),
            )
            if on
        ]
        if custom:
            raise NotImplementedError(
                f"thunderviz.jit(DistributedDataParallel) does not support {' or '.join(custom)}: "
                "its backward trace averages the gradients as DDP's default reducer does. "
                "Remove it to debug the step, or write the reduction you want with functional "
                "collectives in the model (they are traced and differentiated)."
            )

    def add_gradient_sync(self, result: AutodiffResult) -> AutodiffResult:
        """The backward trace with DDP's bucketed all-reduces of the parameters' gradients."""
        if not self.syncing:
            return result
        with timed_provenance("DDP gradient all-reduce") as prov:
            backward = _with_bucket_all_reduces(self, result)
        backward.provenance.append(prov.result)
        return dataclasses.replace(result, backward=backward, grad_inputs=list(backward.output))

    def parameter_args(self, forward: Trace) -> list[tuple[int, str]]:
        """(position in the trace's flat arguments, name) of each parameter DDP syncs."""
        # by order, not path: the trace may be of a wrapper (ddp_session's loss)
        positions = [i for i, inp in enumerate(forward.inputs) if inp.kind is InputKind.PARAMETER]
        return [
            (i, name)
            for i, (name, p) in zip(positions, self.module.named_parameters(), strict=True)
            if p.requires_grad
        ]

    def buckets(self, result: AutodiffResult, params: list[tuple[int, str]]) -> list[_Bucket]:
        """Parameters grouped as DDP's reducer would, in the order their gradients become
        ready: a bucket closes once it holds `bucket_cap_mb` (the first one: DDP's smaller
        first-bucket cap); one dtype and device per bucket."""
        backward = result.backward
        produced_at: dict[str, int] = {}
        for i, bsym in enumerate(backward.bound_symbols):
            for p in bsym.flat_proxy_outs:
                produced_at[p.name] = i
        ready = []
        for index, name in params:
            g = result.grad_inputs[index]
            if g is None:
                if not self.ddp.find_unused_parameters:
                    raise RuntimeError(
                        f"DistributedDataParallel: parameter {name!r} received no gradient in "
                        "this backward, and find_unused_parameters is False: DDP would fail at "
                        "the next iteration waiting for its gradient. Pass "
                        "find_unused_parameters=True to DistributedDataParallel, or make the "
                        "forward use the parameter."
                    )
                continue
            ready.append((produced_at.get(g.name, 0), index))
        ready.sort(key=lambda r: (r[0], -r[1]))  # ties: DDP's reverse parameter order
        open_buckets: dict[tuple[Any, Any], _Bucket] = {}
        made: list[_Bucket] = []
        for at, index in ready:
            g = result.grad_inputs[index]
            kind = (g.dtype, g.device)
            bucket = open_buckets.get(kind)
            if bucket is None:
                bucket = _Bucket(self.first_bucket_bytes if not made else self.bucket_bytes)
                open_buckets[kind] = bucket
                made.append(bucket)
            bucket.params.append(index)
            bucket.ready_at = at
            bucket.size += g.nbytes
            if bucket.size >= bucket.cap:
                del open_buckets[kind]
        return sorted(made, key=lambda b: b.ready_at)


def _with_bucket_all_reduces(sync: DDPSync, result: AutodiffResult) -> Trace:
    backward = result.backward
    params = sync.parameter_args(result.forward)
    names = dict(params)
    buckets = sync.buckets(result, params)
    after: dict[int, list[BoundSymbol]] = {}
    reduced: dict[str, Proxy] = {}
    group_name = sync.group.group_name
    for number, bucket in enumerate(buckets):
        grads: list[TensorProxy] = []
        for i in bucket.params:
            g = result.grad_inputs[i]
            assert isinstance(g, TensorProxy)  # a bucket holds parameters that have gradients
            grads.append(g)
        builder = TraceBuilder(backward.names)
        with builder:
            outs = _all_reduce_average(grads, sync.world_size, group_name)
        first = builder.bound_symbols[0]
        total = sum(g.nbytes for g in grads)
        first.header = (
            f"DDP bucket {number} ({total} bytes): average of the gradients of "
            f"{', '.join(names[i] for i in bucket.params)} over "
            f"{describe_group(group_name)}"
        )
        after.setdefault(bucket.ready_at, []).extend(builder.bound_symbols)
        reduced.update({g.name: out for g, out in zip(grads, outs, strict=True)})
    bsyms: list[BoundSymbol] = []
    for i, bsym in enumerate(backward.bound_symbols):
        bsyms.append(bsym)
        bsyms.extend(after.get(i, ()))
    output = tuple(
        reduced.get(g.name, g) if isinstance(g, TensorProxy) and i in names else g
        for i, g in enumerate(backward.output)
    )
    return backward.from_trace(bound_symbols=bsyms, output=output)


def _all_reduce_average(
    grads: list[TensorProxy], world_size: int, group_name: str
) -> list[TensorProxy]:
    """One bucket: flatten into one buffer, divide by the world size, all-reduce (sum), split
    back: the reducer's default (its buffer is divided, then all-reduced)."""
    flat = [aten.reshape.default(g, [-1]) for g in grads]
    buffer = flat[0] if len(flat) == 1 else aten.cat.default(flat)
    summed = WAIT(ALL_REDUCE(aten.div.Tensor(buffer, world_size), "sum", group_name))
    if len(grads) == 1:
        return [aten.view.default(summed, list(grads[0].shape))]
    pieces = aten.split_with_sizes.default(summed, [g.numel for g in grads])
    return [aten.view.default(piece, list(g.shape)) for piece, g in zip(pieces, grads, strict=True)]
