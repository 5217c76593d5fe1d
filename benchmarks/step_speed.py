"""Steady-state training step (forward + backward) of thunderviz.jit vs eager PyTorch on the
12-layer GPT (d_model 128, 4 heads, vocab 1000, batch 2, seq 64), in one process, runs
interleaved so machine noise hits both. Run: `.venv/bin/python -m benchmarks.step_speed`."""

from __future__ import annotations

import copy
import statistics
import time

import torch

import thunderviz as tv
from benchmarks.common import print_table
from thunderviz.models import GPT, GPTConfig

CFG = GPTConfig(vocab_size=1000, block_size=64, n_layer=12, n_head=4, d_model=128)


def step(model, idx) -> None:
    loss = model(idx, idx)
    loss.backward()
    for p in model.parameters() if not isinstance(model, tv.JittedFunction) else model.module.parameters():
        p.grad = None


def main(rounds: int = 15) -> None:
    torch.manual_seed(0)
    eager = GPT(CFG)
    jitted = tv.jit(copy.deepcopy(eager))
    idx = torch.randint(0, CFG.vocab_size, (2, 64))
    for _ in range(3):
        step(eager, idx)
        step(jitted, idx)
    times: dict[str, list[float]] = {"eager": [], "thunderviz.jit": []}
    for _ in range(rounds):
        for name, model in (("eager", eager), ("thunderviz.jit", jitted)):
            t0 = time.perf_counter()
            step(model, idx)
            times[name].append(time.perf_counter() - t0)
    rows = [(name, statistics.median(ts)) for name, ts in times.items()]
    print_table("Training step (forward + backward), median of interleaved runs", rows, "eager",
                target="thunderviz.jit within 1.10x of eager on CPU")


if __name__ == "__main__":
    main()
