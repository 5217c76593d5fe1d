"""Steady-state training step (forward + backward + zeroing grads) of thunderviz.jit vs eager
PyTorch, on the project's 12-layer GPT, Hugging Face GPT-2 from a tiny config and a small
program (benchmarks/programs.py). Both sides are warmed the same way (three steps each),
then timed in interleaved runs so machine noise hits both; medians with min and max, and
the median of the per-round ratios (each round's jit time over the eager time next to it:
on a shared machine, load that drifts between rounds cancels out). A sub-millisecond
program is timed in samples of 20 steps, so the timer and one-off stalls weigh less.
Beside wall-clock time, the process's CPU time per step (`time.process_time`, all its
threads): on a loaded machine it leaves out the time the process waited for a core, which
wall-clock time cannot.
On a GPU (`--device cuda`) each sample ends with `torch.cuda.synchronize()`, so the time is
the step's as the GPU finishes it, not as Python queues it.
Run: `.venv/bin/python -m benchmarks.step_speed [rounds] [torch threads] [--device cuda]` (on
a machine shared with other work, one thread keeps the two sides from fighting over cores)."""

from __future__ import annotations

import copy
import statistics
import time

import torch

import thunderviz as tv
from benchmarks.common import command_line, synchronizer
from benchmarks.programs import PROGRAMS


def step(fn, params, args, loss_of) -> None:
    loss_of(fn(*args)).backward()
    for p in params:
        p.grad = None


def compare(
    make, rounds: int, steps_per_sample: int = 1, device: str = "cpu"
) -> dict[str, dict[str, list[float]]]:
    """Per clock ("wall", "cpu") and contender, `rounds` interleaved samples: seconds per
    step, each the mean of `steps_per_sample` consecutive steps."""
    model, args, loss_of = make(device)
    sync = synchronizer(device)
    eager = copy.deepcopy(model)
    contenders = {
        "eager": (eager, list(eager.parameters())),
        "thunderviz.jit": (tv.jit(model), list(model.parameters())),
    }
    for fn, params in contenders.values():
        for _ in range(3):
            step(fn, params, args, loss_of)
    sync()
    times = {clock: {name: [] for name in contenders} for clock in ("wall", "cpu")}
    for _ in range(rounds):
        for name, (fn, params) in contenders.items():
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(steps_per_sample):
                step(fn, params, args, loss_of)
            sync()
            times["wall"][name].append((time.perf_counter() - w0) / steps_per_sample)
            times["cpu"][name].append((time.process_time() - c0) / steps_per_sample)
    return times


def main(rounds: int = 15, device: str = "cpu") -> None:
    where = torch.cuda.get_device_name() if device.startswith("cuda") else "CPU"
    print(
        f"Training step on {where}, median [min, max] of {rounds} interleaved runs, "
        f"{torch.get_num_threads()} torch thread(s); paired: median of per-round ratios"
    )
    for title, make in PROGRAMS:
        # sub-ms: more rounds for the median, each a sample of 20 steps
        n, per_sample = (rounds, 1) if "small" not in title else (rounds * 5, 20)
        clocks = compare(make, n, per_sample, device)
        print(f"\n{title}" + (f" ({per_sample} steps a sample)" if per_sample > 1 else ""))
        for clock, times in clocks.items():
            eager = statistics.median(times["eager"])
            for name, ts in times.items():
                med = statistics.median(ts)
                paired = statistics.median(t / e for t, e in zip(ts, times["eager"], strict=True))
                print(
                    f"  {clock:4} {name:15} {med * 1e3:9.3f} ms  [{min(ts) * 1e3:.3f}, "
                    f"{max(ts) * 1e3:.3f}]  {med / eager:5.2f}x eager  paired {paired:5.2f}x"
                )
    print("\ntarget: thunderviz.jit within 1.05x of eager on models, 1.10x on small programs")


if __name__ == "__main__":
    ns = command_line(__doc__, rounds=15)
    main(ns.rounds, ns.device)
