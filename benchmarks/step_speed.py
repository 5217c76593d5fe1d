"""Steady-state training step (forward + backward + zeroing grads) of thunderviz.jit vs eager
PyTorch, on the project's 12-layer GPT, Hugging Face GPT-2 from a tiny config and a small
program (benchmarks/programs.py). Both sides are warmed the same way (three steps each),
then timed in interleaved runs so machine noise hits both; medians with min and max.
Run: `.venv/bin/python -m benchmarks.step_speed [rounds] [torch threads]` (on a machine
shared with other work, one thread keeps the two sides from fighting over cores)."""

from __future__ import annotations

import copy
import statistics
import sys
import time

import torch

import thunderviz as tv
from benchmarks.programs import PROGRAMS


def step(fn, params, args, loss_of) -> None:
    loss_of(fn(*args)).backward()
    for p in params:
        p.grad = None


def compare(make, rounds: int) -> dict[str, list[float]]:
    model, args, loss_of = make()
    eager = copy.deepcopy(model)
    contenders = {"eager": (eager, list(eager.parameters())),
                  "thunderviz.jit": (tv.jit(model), list(model.parameters()))}
    for fn, params in contenders.values():
        for _ in range(3):
            step(fn, params, args, loss_of)
    times: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, (fn, params) in contenders.items():
            t0 = time.perf_counter()
            step(fn, params, args, loss_of)
            times[name].append(time.perf_counter() - t0)
    return times


def main(rounds: int = 15) -> None:
    print(f"Training step, median [min, max] of {rounds} interleaved runs, "
          f"{torch.get_num_threads()} torch thread(s)")
    for title, make in PROGRAMS:
        n = rounds if "small" not in title else rounds * 20  # sub-ms: more runs for the median
        times = compare(make, n)
        eager = statistics.median(times["eager"])
        print(f"\n{title}")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(f"  {name:15} {med * 1e3:9.3f} ms  [{min(ts) * 1e3:.3f}, {max(ts) * 1e3:.3f}]"
                  f"  {med / eager:5.2f}x eager")
    print("\ntarget: thunderviz.jit within 1.05x of eager on models, 1.10x on small programs")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        torch.set_num_threads(int(sys.argv[2]))
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
