"""The first call as a user meets it: `tv.jit(model)` then one forward and backward (trace,
autodiff, split, compiling the generated code and running it once) versus the first
forward and backward of `torch.compile(model, backend="aot_eager")`, on the programs of
benchmarks/programs.py. Both sides are warmed the same way first (one first call each on a
throwaway small model: imports and torch's tables are loaded, nothing of the measured
models is cached), then each model is measured `rounds` times on fresh copies,
interleaved; medians with min and max. Before each call, each side forgets the code it
compiled for earlier calls (torch: `torch._dynamo.reset()`; thunderviz: the compiled code it
keeps per generated source, which a round after the first would otherwise find), so every
call compiles its program; the per-op tables both keep stay warm after a program's first
round (thunderviz's recorded decompositions and meta results, torch's fake-tensor dispatch
and kernel caches). Garbage is collected before each side's call, so
neither pays for collecting what the other left (its own collections it pays for). The
trace and the autodiff parts alone (real and fake tensors) are printed for the GPT: the
rest of the first call is compiling the generated code and running it once.

Then the same first call in fresh processes (`cold`), as a script meets it: each side in its
own subprocess, timed from after `import torch` and building the model to the end of the first
backward, so thunderviz pays `import thunderviz` and its first call, and torch.compile pays
its lazy imports (dynamo, aot_autograd) and its first call; `rounds` interleaved pairs per
program, medians with min and max. The model comes from benchmarks/programs.py, which imports
thunderviz (the GPT is thunderviz.models'): our subprocess times that import on its own and
adds it, theirs has it done before the clock starts, which can only shorten theirs.
Twice: as a bare script, and as a training script, which builds its optimizer before the
first step. torch imports dynamo (~1 s) the first time either side calls a function torch
marks `_disable_dynamo`: the optimizer's constructor is one, and so are the Python
decompositions thunderviz records for ops outside Core ATen (`cross_entropy`'s). A bare
script pays that inside the first call; a training script has paid it already, on both sides.
thunderviz's modules are compiled to bytecode first, as pip does when it installs a package
(torch's came so): this machine sets PYTHONDONTWRITEBYTECODE, and without the cache
`import thunderviz` compiles every module from source, 0.17 s instead of 0.06 s.
On a GPU (`--device cuda`) the models and inputs are made there, and each side's clock stops
after `torch.cuda.synchronize()`; `--no-cold` leaves the fresh processes out.
Run: `.venv/bin/python -m benchmarks.autodiff_speed [rounds] [torch threads] [--device cuda]
[--no-cold]`."""

from __future__ import annotations

import compileall
import copy
import gc
import json
import pathlib
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch._dynamo

import thunderviz as tv
from benchmarks.common import command_line, synchronizer
from benchmarks.programs import PROGRAMS, gpt, small
from thunderviz.core.trace import forget_compiled_code

# Each side: what it forgets of the code it compiled for earlier calls (the module docstring),
# and how it makes the model's first call
CONTENDERS: dict[str, tuple[Callable[[], None], Callable[[Any], Any]]] = {
    "thunderviz.jit": (forget_compiled_code, tv.jit),
    "torch.compile aot_eager": (
        torch._dynamo.reset,
        lambda model: torch.compile(model, backend="aot_eager"),
    ),
}


def first_call(side: str, model, args, loss_of, device: str = "cpu") -> tuple[float, float]:
    """(wall-clock, process CPU) seconds of one side's first call of `model`: its forward and
    backward, the GPU's queued work included."""
    forget, compiled = CONTENDERS[side]
    forget()  # the program's code is compiled again, as a new program's is
    gc.collect()  # neither side collects what the one before it left (both do this)
    sync = synchronizer(device)
    sync()
    t0, c0 = time.perf_counter(), time.process_time()
    loss_of(compiled(model)(*args)).backward()
    sync()
    return time.perf_counter() - t0, time.process_time() - c0


def trace_and_autodiff(fake: bool) -> tuple[float, float]:
    model, args, _ = gpt()
    t0 = time.perf_counter()
    trace = tv.trace(model, *args, fake=fake)
    t1 = time.perf_counter()
    tv.autodiff(trace)
    return t1 - t0, time.perf_counter() - t1


_ROOT = pathlib.Path(__file__).resolve().parents[1]  # where `benchmarks` imports from

# One side's first call in a fresh process; prints (wall, CPU) seconds as JSON.
_COLD = """
import json, sys, time
import torch
import transformers
torch.set_num_threads({threads})
t = time.perf_counter(), time.process_time()
if {ours}:
    import thunderviz as tv
imported = time.perf_counter() - t[0], time.process_time() - t[1]
from benchmarks.common import synchronizer
from benchmarks.programs import PROGRAMS
model, args, loss_of = dict(PROGRAMS)[{title!r}]({device!r})
if {training}:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
sync = synchronizer({device!r})
sync()
t = time.perf_counter(), time.process_time()
if {ours}:
    loss_of(tv.jit(model)(*args)).backward()
else:
    loss_of(torch.compile(model, backend="aot_eager")(*args)).backward()
sync()
wall, cpu = time.perf_counter() - t[0], time.process_time() - t[1]
print(json.dumps([wall + imported[0], cpu + imported[1], imported[0]]))
"""


def cold_first_call(
    title: str, ours: bool, training: bool, device: str
) -> tuple[float, float, float]:
    """(wall, CPU, of the wall `import thunderviz`) seconds of one side's fresh process."""
    code = _COLD.format(
        threads=torch.get_num_threads(), ours=ours, title=title, training=training, device=device
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=_ROOT
    )
    wall, cpu, imported = json.loads(done.stdout.strip().splitlines()[-1])
    return wall, cpu, imported


def cold(rounds: int, training: bool, device: str) -> None:
    compileall.compile_dir(_ROOT / "thunderviz", quiet=1)
    compileall.compile_dir(_ROOT / "benchmarks", quiet=1)
    print(
        f"\nFirst call in a fresh process, as a {'training' if training else 'bare'} script "
        f"({'optimizer built before the first call; ' if training else ''}import thunderviz "
        f"included; torch.compile's lazy imports included), median [min, max] of {rounds} "
        "interleaved subprocess pairs"
    )
    for title, _ in PROGRAMS:
        ours, theirs = [], []
        for _ in range(rounds):
            ours.append(cold_first_call(title, True, training, device))
            theirs.append(cold_first_call(title, False, training, device))
        report(
            title,
            {
                "thunderviz.jit": [r[:2] for r in ours],
                "torch.compile aot_eager": [r[:2] for r in theirs],
            },
        )
        imported = statistics.median(r[2] for r in ours)
        print(f"  (of thunderviz's: `import thunderviz` {imported:.3f} s)")


def report(title: str, times: dict[str, list[tuple[float, float]]]) -> None:
    """Each side's (wall, CPU) runs: median [min, max], and the ratio to the first side's."""
    print(f"\n{title}")
    first = next(iter(times.values()))
    base = statistics.median(w for w, _ in first), statistics.median(c for _, c in first)
    for name, runs in times.items():
        ts, cpu = [w for w, _ in runs], statistics.median(c for _, c in runs)
        med = statistics.median(ts)
        print(
            f"  {name:24} {med:8.3f} s  [{min(ts):.3f}, {max(ts):.3f}]  "
            f"{med / base[0]:6.1f}x thunderviz  (CPU {cpu:.3f} s, {cpu / base[1]:5.1f}x)"
        )


def main(rounds: int = 3, device: str = "cpu", fresh_processes: bool = True) -> None:
    model, args, loss_of = small(device)
    for side in CONTENDERS:  # the same warm-up for both sides
        first_call(side, copy.deepcopy(model), args, loss_of, device)
    print(
        f"First call on {torch.cuda.get_device_name() if device != 'cpu' else 'CPU'} "
        f"(forward + backward included), median [min, max] of {rounds} "
        f"interleaved runs, {torch.get_num_threads()} torch thread(s); wall clock, and the "
        "process's CPU time (steadier on a loaded machine) in brackets"
    )
    for title, make in PROGRAMS:
        model, args, loss_of = make(device)
        times: dict[str, list[tuple[float, float]]] = {side: [] for side in CONTENDERS}
        for _ in range(rounds):
            for side, runs in times.items():
                runs.append(first_call(side, copy.deepcopy(model), args, loss_of, device))
        report(title, times)
    for fake in (False, True):
        parts = [trace_and_autodiff(fake) for _ in range(rounds)]
        both = [a + b for a, b in parts]
        print(
            f"\nGPT trace({'fake' if fake else 'real'} tensors) + autodiff alone: "
            f"{statistics.median(both):.3f} s [{min(both):.3f}, {max(both):.3f}] "
            f"(trace {statistics.median(a for a, _ in parts):.3f} s, "
            f"autodiff {statistics.median(b for _, b in parts):.3f} s)"
        )
    if fresh_processes:
        cold(rounds, training=False, device=device)
        cold(rounds, training=True, device=device)
    print("\ntarget: thunderviz's first call at least 20x faster than aot_eager's")


if __name__ == "__main__":
    ns = command_line(
        __doc__,
        rounds=3,
        more=lambda p: p.add_argument("--no-cold", action="store_true", help="no fresh processes"),
    )
    main(ns.rounds, ns.device, fresh_processes=not ns.no_cold)
