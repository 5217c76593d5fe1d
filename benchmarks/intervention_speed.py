"""Re-running the backward after an intervention vs one full backward step-through, on the
12-layer GPT of the other benchmarks (d_model 128, 4 heads, vocab 1000, batch 2, seq 64).

The session holds one finished stepper (what `session.grads()` runs). Rows, each the
median of interleaved rounds:

* full step-through: `stepper.reset(); stepper.finish()` — every backward step, with the
  statistics the debugger keeps per step (the baseline);
* intervene(...): `session.intervene(target, "zero")` then `clear_interventions()`, each
  timed on its own: building the plan and re-running from the first affected step. The
  targets cover the spread: the last module the backward reaches (`blocks.0.mlp`), one in
  the middle (`blocks.6`), the first (`ln_f`, nearly the whole backward re-runs), and a
  forward op's gradient (the first block's GELU).

Target (issue 11): a re-run takes no longer than one full step-through (ratio <= 1.0).
Run: `.venv/bin/python -m benchmarks.intervention_speed`.
"""

from __future__ import annotations

import statistics
import time

import torch

import thunderviz as tv
from benchmarks.common import print_table
from thunderviz.models import GPT, GPTConfig

CFG = GPTConfig(vocab_size=1000, block_size=64, n_layer=12, n_head=4, d_model=128)


def main(rounds: int = 5) -> None:
    torch.manual_seed(0)
    model = GPT(CFG)
    idx = torch.randint(0, CFG.vocab_size, (2, 64))
    session = tv.Session(model, idx, idx, record_transforms=False)
    t0 = time.perf_counter()
    session.grads()  # the one finished stepper the interventions re-run
    first_run = time.perf_counter() - t0
    stepper = tv.BackwardStepper(session.result, session.forward_values())
    gelu = next(b for b in session.forward.bound_symbols if b.module_path == "blocks.0.mlp.1")
    targets = {
        "intervene blocks.0.mlp (last module)": "blocks.0.mlp",
        "intervene blocks.6 (middle)": "blocks.6",
        "intervene ln_f (first module)": "ln_f",
        "intervene gelu's gradient (block 0)": gelu,
    }
    times: dict[str, list[float]] = {"full step-through": [], "clear after ln_f": []}
    times.update({name: [] for name in targets})
    rerun: dict[str, int] = {}
    t0 = time.perf_counter()
    session.intervene("ln_f", "zero")  # the first call also indexes the backward's roles
    first_intervention = time.perf_counter() - t0
    session.clear_interventions()
    for _ in range(rounds):
        t0 = time.perf_counter()
        stepper.reset()
        stepper.finish()
        times["full step-through"].append(time.perf_counter() - t0)
        for name, target in targets.items():
            t0 = time.perf_counter()
            iv = session.intervene(target, "zero")
            times[name].append(time.perf_counter() - t0)
            rerun[name] = len(session.backward.bound_symbols) - iv.first_step
            t0 = time.perf_counter()
            session.clear_interventions()
            if target == "ln_f":
                times["clear after ln_f"].append(time.perf_counter() - t0)
    rows = [(name, statistics.median(ts)) for name, ts in times.items()]
    print(
        f"backward: {len(session.backward.bound_symbols)} steps; first grads() "
        f"(augmented forward + backward): {first_run:.3f} s; first intervention "
        f"(indexes the backward): {first_intervention:.3f} s"
    )
    for name, n in rerun.items():
        print(f"{name}: re-runs {n} of {len(session.backward.bound_symbols)} steps")
    print_table(
        "Backward re-run after an intervention, median of interleaved rounds",
        rows,
        "full step-through",
        target="every intervene row <= 1.00x",
    )


if __name__ == "__main__":
    main()
