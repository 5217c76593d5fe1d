"""Shared by the benchmarks: timing several contenders in one process, printing ratios."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def best_of(fn: Callable[[], Any], repeat: int = 3) -> float:
    """Seconds of the fastest of `repeat` runs (the least disturbed by a noisy machine)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def median_of(fn: Callable[[], Any], repeat: int = 20, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def print_table(title: str, rows: list[tuple[str, float]], baseline: str, unit: str = "s",
                target: str = "") -> None:
    """rows: (name, value). Prints each value and its ratio to the baseline row."""
    base = dict(rows)[baseline]
    width = max(len(n) for n, _ in rows)
    print(f"\n{title}")
    print(f"{'':{width}}  {unit:>10}  {'vs ' + baseline:>16}")
    for name, value in rows:
        ratio = value / base if base else float("nan")
        print(f"{name:{width}}  {value:10.4f}  {ratio:15.2f}x")
    if target:
        print(f"target: {target}")
