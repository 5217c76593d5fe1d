"""The first call as a user meets it: `tv.jit(model)` then one forward and backward (trace,
autodiff, split, compiling the generated code and running it once) versus the first
forward and backward of `torch.compile(model, backend="aot_eager")`, on the programs of
benchmarks/programs.py. Both sides are warmed the same way first (one first call each on a
throwaway small model: imports and torch's tables are loaded, nothing of the measured
models is cached), then each model is measured `rounds` times on fresh copies,
interleaved; medians with min and max. The trace + autodiff part alone (real and fake
tensors) is printed for the GPT.
Run: `.venv/bin/python -m benchmarks.autodiff_speed [rounds] [torch threads]`."""

from __future__ import annotations

import copy
import statistics
import sys
import time

import torch
import torch._dynamo

import thunderviz as tv
from benchmarks.programs import PROGRAMS, gpt, small


def first_call_ours(model, args, loss_of) -> float:
    t0 = time.perf_counter()
    loss_of(tv.jit(model)(*args)).backward()
    return time.perf_counter() - t0


def first_call_aot_eager(model, args, loss_of) -> float:
    torch._dynamo.reset()  # nothing compiled before counts
    t0 = time.perf_counter()
    loss_of(torch.compile(model, backend="aot_eager")(*args)).backward()
    return time.perf_counter() - t0


def trace_and_autodiff(fake: bool) -> float:
    model, args, _ = gpt()
    t0 = time.perf_counter()
    tv.autodiff(tv.trace(model, *args, fake=fake))
    return time.perf_counter() - t0


def main(rounds: int = 3) -> None:
    model, args, loss_of = small()
    first_call_ours(copy.deepcopy(model), args, loss_of)  # the same warm-up for both sides
    first_call_aot_eager(copy.deepcopy(model), args, loss_of)
    print(
        f"First call (forward + backward included), median [min, max] of {rounds} "
        f"interleaved runs, {torch.get_num_threads()} torch thread(s)"
    )
    for title, make in PROGRAMS:
        model, args, loss_of = make()
        times: dict[str, list[float]] = {"thunderviz.jit": [], "torch.compile aot_eager": []}
        for _ in range(rounds):
            times["thunderviz.jit"].append(first_call_ours(copy.deepcopy(model), args, loss_of))
            times["torch.compile aot_eager"].append(
                first_call_aot_eager(copy.deepcopy(model), args, loss_of)
            )
        ours = statistics.median(times["thunderviz.jit"])
        print(f"\n{title}")
        for name, ts in times.items():
            med = statistics.median(ts)
            print(
                f"  {name:24} {med:8.3f} s  [{min(ts):.3f}, {max(ts):.3f}]  "
                f"{med / ours:6.1f}x thunderviz"
            )
    for fake in (False, True):
        ts = [trace_and_autodiff(fake) for _ in range(rounds)]
        print(
            f"\nGPT trace({'fake' if fake else 'real'} tensors) + autodiff alone: "
            f"{statistics.median(ts):.3f} s [{min(ts):.3f}, {max(ts):.3f}]"
        )
    print("\ntarget: thunderviz's first call at least 20x faster than aot_eager's")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        torch.set_num_threads(int(sys.argv[2]))
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
