"""Running a function on several local ranks: fresh processes joined in one process group.

`launch(fn, world_size=2)` is what a notebook or a test needs to try distributed code on
one machine: spawned processes (no state inherited from the caller), the group's rendezvous
on the loopback address at a free port, a timeout on the process group (a collective that
never completes raises instead of hanging) and on the whole run, and the first rank's
exception raised in the caller, with its traceback, after the other ranks are ended.
"""

from __future__ import annotations

import datetime
import os
import pickle
import queue
import socket
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

__all__ = ["launch", "RankError", "free_port", "LOOPBACK"]

LOOPBACK = "127.0.0.1"  # the only address the ranks ever talk to


class RankError(RuntimeError):
    """A rank raised. `rank` is which one; the message carries its traceback."""

    def __init__(self, rank: int, message: str) -> None:
        super().__init__(f"rank {rank} failed:\n{message}")
        self.rank = rank


def free_port() -> int:
    """A TCP port nothing listens on now (the OS picks it when binding to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _worker(
    fn: Callable[..., Any],
    rank: int,
    world_size: int,
    port: int,
    backend: str,
    timeout_s: float,
    results: Any,
    args: tuple[Any, ...],
) -> None:
    os.environ["MASTER_ADDR"] = LOOPBACK
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)  # ranks share the machine's cores
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        dist.init_process_group(
            backend, rank=rank, world_size=world_size, timeout=datetime.timedelta(seconds=timeout_s)
        )
        # pickled by value here: torch's multiprocessing would pass tensors as shared memory
        # that dies with this process
        results.put((rank, True, pickle.dumps(fn(rank, world_size, *args))))
    except BaseException:  # noqa: BLE001 - reported to the caller, who re-raises it
        results.put((rank, False, traceback.format_exc()))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(
    fn: Callable[..., Any],
    *args: Any,
    world_size: int = 2,
    backend: str = "gloo",
    timeout: float = 60.0,
    run_timeout: float | None = None,
) -> list[Any]:
    """Run `fn(rank, world_size, *args)` on `world_size` ranks; return their results by rank.

    `fn` and `args` must be picklable by reference (a function of an importable module, not
    one defined in a notebook cell or `__main__` of an interactive session). Each process
    group has `timeout` seconds per collective; `run_timeout`, when given, bounds the whole
    run (start-up included). The first rank to raise or die ends the run: the other ranks
    are terminated and a `RankError` with that rank's traceback is raised here.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(
            target=_worker,
            daemon=True,
            args=(fn, rank, world_size, port, backend, timeout, results, args),
        )
        for rank in range(world_size)
    ]
    for p in procs:
        p.start()
    out: dict[int, Any] = {}
    deadline = None if run_timeout is None else time.monotonic() + run_timeout
    try:
        while len(out) < world_size:
            try:
                rank, ok, value = results.get(timeout=1.0)
            except queue.Empty:
                dead = [
                    i for i, p in enumerate(procs) if p.exitcode not in (None, 0) and i not in out
                ]
                if dead:
                    raise RankError(
                        dead[0],
                        f"the process exited with code {procs[dead[0]].exitcode} without a result",
                    ) from None
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"the ranks did not finish within {run_timeout:.0f} s; "
                        f"finished: {sorted(out)}"
                    ) from None
                continue
            if not ok:
                raise RankError(rank, value)
            out[rank] = pickle.loads(value)  # noqa: S301 - bytes our own child process made
    finally:
        for p in procs:
            p.join(timeout=5.0 if len(out) == world_size else 0.0)
            if p.is_alive():
                p.terminate()
                p.join(timeout=5.0)
        results.close()
    return [out[r] for r in range(world_size)]
