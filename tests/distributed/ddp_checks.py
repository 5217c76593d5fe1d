"""What each rank runs for tests/distributed/test_ddp.py: thunderviz.jit(DDP(model)) against
eager DDP (the reference: torch's own reducer), on uneven per-rank data."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel as DDP

import thunderviz as tv
from thunderviz.prims.collectives import is_collective

STEPS = 3


class Net(torch.nn.Module):
    def __init__(self, unused: bool = False) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(5, 16)
        self.bn = torch.nn.BatchNorm1d(16)  # buffers: DDP broadcasts them from rank 0
        self.fc2 = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 3)
        self.spare = torch.nn.Linear(3, 3) if unused else None

    def forward(self, x):
        return self.head(F.relu(self.fc2(F.relu(self.bn(self.fc1(x))))))


def batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * rank + step)
    n = 6 if rank == 0 else 4  # uneven per-rank data
    return torch.randn(n, 5, generator=g), torch.randint(0, 3, (n,), generator=g)


def _train(model: torch.nn.Module, call, rank: int, no_sync_first: bool) -> dict[str, object]:
    """SGD steps; with `no_sync_first`, each step first accumulates one batch under no_sync()."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads, unsynced_collectives = [], [], []
    for step in range(STEPS):
        opt.zero_grad()
        if no_sync_first:
            with model.no_sync():
                x, y = batch(rank, 100 + step)
                F.cross_entropy(call(x), y).backward()
            if isinstance(call, tv.JittedFunction):
                backward = tv.last_backward_traces(call)[0]
                unsynced_collectives.append(sum(map(is_collective, backward.bound_symbols)))
        x, y = batch(rank, step)
        loss = F.cross_entropy(call(x), y)
        loss.backward()
        losses.append(loss.detach())
        grads.append(
            {n: p.grad.clone() for n, p in model.module.named_parameters() if p.grad is not None}
        )
        opt.step()
    return {
        "losses": torch.stack(losses),
        "grads": grads,
        "unsynced_collectives": unsynced_collectives,
        "state": {k: v.detach().clone() for k, v in model.module.state_dict().items()},
    }


def train_both(
    rank: int, world_size: int, no_sync_first: bool = False, **ddp_kwargs
) -> dict[str, object]:
    torch.manual_seed(0)
    base = Net(unused=ddp_kwargs.get("find_unused_parameters", False))
    eager = DDP(copy.deepcopy(base), **ddp_kwargs)
    ours = DDP(copy.deepcopy(base), **ddp_kwargs)
    jitted = tv.jit(ours)
    reference = _train(eager, eager, rank, no_sync_first)
    result = _train(ours, jitted, rank, no_sync_first)
    backward = tv.last_backward_traces(jitted)[0]
    bsyms = backward.bound_symbols
    collectives = [i for i, b in enumerate(bsyms) if is_collective(b)]
    computes = [i for i, b in enumerate(bsyms) if not is_collective(b)]
    return {
        "reference": reference,
        "ours": result,
        "backward": str(backward),
        "n_collectives": len(collectives),
        "first_collective_before_last_compute": bool(collectives) and collectives[0] < computes[-1],
    }


def fsdp_refused(rank: int, world_size: int) -> str:
    model = Net()
    fully_shard(model)
    try:
        tv.jit(model)
    except NotImplementedError as e:
        return str(e)
    return "not refused"


def ddp_trace_refused(rank: int, world_size: int) -> str:
    """tracing DDP.forward itself meets DDP's own communication: refused, pointing to jit."""
    try:
        tv.trace(DDP(Net()), batch(rank, 0)[0])
    except tv.CaptureError as e:
        return str(e)
    return "not refused"


def unused_without_flag(rank: int, world_size: int) -> str:
    """A parameter without a gradient under find_unused_parameters=False: eager DDP fails at
    the next iteration; jit says so when it builds the backward."""
    try:
        tv.jit(DDP(Net(unused=True)))(batch(rank, 0)[0])
    except RuntimeError as e:
        return str(e)
    return "not refused"


def comm_hook_refused(rank: int, world_size: int) -> str:
    ddp = DDP(Net())
    ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    try:
        tv.jit(ddp)(batch(rank, 0)[0])
    except NotImplementedError as e:
        return str(e)
    return "not refused"


def run_all(rank: int, world_size: int) -> dict[str, object]:
    """Every DDP check in one spawn (starting ranks is the slow part)."""
    return {
        "buckets": train_both(rank, world_size, bucket_cap_mb=0.0004),
        "no_sync": train_both(rank, world_size, no_sync_first=True),
        "unused": train_both(rank, world_size, find_unused_parameters=True),
        "fsdp": fsdp_refused(rank, world_size),
        "trace_ddp": ddp_trace_refused(rank, world_size),
        "unused_without_flag": unused_without_flag(rank, world_size),
        "comm_hook": comm_hook_refused(rank, world_size),
    }
