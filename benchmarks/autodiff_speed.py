"""Trace + autodiff + split of a 12-layer GPT (d_model 128, 4 heads, vocab 1000, batch 2,
seq 64) versus the first call of torch.compile(model, backend="aot_eager") (forward and
backward), in one process. Run: `.venv/bin/python -m benchmarks.autodiff_speed`."""

from __future__ import annotations

import copy
import time

import torch

import thunderviz as tv
from benchmarks.common import print_table
from thunderviz.models import GPT, GPTConfig

CFG = GPTConfig(vocab_size=1000, block_size=64, n_layer=12, n_head=4, d_model=128)


def main() -> None:
    torch.manual_seed(0)
    model = GPT(CFG)
    idx = torch.randint(0, CFG.vocab_size, (2, 64))
    tv.autodiff(tv.trace(GPT(GPTConfig(n_layer=1)), idx, idx))  # warm up imports and tables

    def ours(fake: bool) -> tuple[float, float, tv.AutodiffResult]:
        t0 = time.perf_counter()
        forward = tv.trace(model, idx, idx, fake=fake)
        t1 = time.perf_counter()
        result = tv.autodiff(forward)
        return t1 - t0, time.perf_counter() - t1, result

    # the first call on this model, like torch.compile's first call (warm-up above was on
    # another model: imports and torch's tables are loaded, nothing of this model is cached)
    runs = {fake: ours(fake) for fake in (False, True)}

    compiled = torch.compile(copy.deepcopy(model), backend="aot_eager")
    t0 = time.perf_counter()
    compiled(idx, idx).backward()
    aot = time.perf_counter() - t0

    for fake, (t_trace, t_autodiff, result) in runs.items():
        print(f"{'fake' if fake else 'real'} tensors: trace {t_trace:.3f} s + autodiff/split "
              f"{t_autodiff:.3f} s ({len(result.backward.bound_symbols)} backward bound symbols, "
              f"{len(result.saved_for_backward)} saved tensors)")
    rows = [("thunderviz trace(real)+autodiff", sum(runs[False][:2])),
            ("thunderviz trace(fake)+autodiff", sum(runs[True][:2])),
            ("torch.compile aot_eager 1st call", aot)]
    print_table("Trace + autodiff + split vs torch.compile(aot_eager) first call, 12-layer GPT",
                rows, "thunderviz trace(real)+autodiff", target="thunderviz at least 20x faster")


if __name__ == "__main__":
    main()
