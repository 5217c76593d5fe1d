"""What each rank runs for tests/distributed/test_per_rank_debugging.py: a replicated
computation behind an all-reduce, saved per rank with its recorded values, with a desync
planted on rank 1 (or none), and a rank that raises in the middle of a trace."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

import thunderviz as tv
from tests.distributed import ddp_checks
from thunderviz.distributed import ddp_session, parameter_inputs

# The lines the tests expect compare() to point at.
SCALED_LOSS_LINE = "loss = loss * (2.0 if dist.get_rank() == 1 else 1.0)"
NOISE_LINE = "y = y + 1e-3 * torch.randn(y.shape, generator=_rank_generator())"


def _rank_generator() -> torch.Generator:
    return torch.Generator().manual_seed(dist.get_rank())  # the bug: seeded per rank


def agreeing(x, w, b):
    y = fc.all_reduce(torch.tanh(x @ w), "sum", dist.group.WORLD) + b
    return (y**2).mean()


def scaled_loss(x, w, b):
    y = fc.all_reduce(torch.tanh(x @ w), "sum", dist.group.WORLD) + b
    loss = (y**2).mean()
    loss = loss * (2.0 if dist.get_rank() == 1 else 1.0)
    return loss


def unsynchronized_noise(x, w, b):
    y = fc.all_reduce(torch.tanh(x @ w), "sum", dist.group.WORLD) + b
    y = y + 1e-3 * torch.randn(y.shape, generator=_rank_generator())
    return (y**2).mean()


PROGRAMS = {
    "agreeing": agreeing,
    "scaled_loss": scaled_loss,
    "noise": unsynchronized_noise,
    "perturbed_parameter": agreeing,
}


def save_sessions(rank: int, world_size: int, folder: str) -> dict[str, object]:
    """Each program's session, values recorded, saved as <folder>/<name>.rank<r>.tvz."""
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(rank))  # per-rank data
    paths = {}
    for name, program in PROGRAMS.items():
        w = torch.randn(3, 5, generator=torch.Generator().manual_seed(9))  # replicated
        if name == "perturbed_parameter" and rank == 1:
            w[0, 0] += 0.5
        b = torch.zeros(5)
        session = tv.Session(program, x, w.requires_grad_(), b.requires_grad_())
        session.record_backward()
        paths[name] = f"{folder}/{name}.rank{rank}.tvz"
        tv.save(session, paths[name])
    paths["ddp"] = save_ddp_sessions(rank, world_size, folder)
    return paths


def save_ddp_sessions(rank: int, world_size: int, folder: str) -> dict[str, object]:
    """A DDP step's session per rank (uneven data, DDP's all-reduces in the backward), then
    the same after rank 1's replica of one weight drifted."""
    torch.manual_seed(0)
    ddp = DDP(ddp_checks.Net())
    x, y = ddp_checks.batch(rank, 0)
    out: dict[str, object] = {}
    for name in ("ddp", "ddp_drifted"):
        if name == "ddp_drifted" and rank == 1:
            with torch.no_grad():
                ddp.module.fc2.weight[0, 0] += 0.25
        session = ddp_session(ddp, x, loss_fn=F.cross_entropy, target=y)
        session.record_backward()
        out[name] = f"{folder}/{name}.rank{rank}.tvz"
        tv.save(session, out[name])
        out["replicated"] = parameter_inputs(session)
        out["backward"] = str(session.backward)
    return out


def raises_mid_trace(rank: int, world_size: int) -> None:
    """Rank 1 raises between two collectives; rank 0 goes on to the second one, which rank 1
    never joins: without the launcher ending it, rank 0 would wait for the group's timeout."""

    def program(x):
        y = fc.all_reduce(x, "sum", dist.group.WORLD)
        if dist.get_rank() == 1:
            raise ValueError("planted failure on rank 1")
        return fc.all_reduce(y * 2, "sum", dist.group.WORLD)

    tv.trace(program, torch.ones(3))
