"""Shared by the benchmarks: their command line, and printing several contenders' results as
ratios to a baseline."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch


def print_table(
    title: str, rows: list[tuple[str, float]], baseline: str, unit: str = "s", target: str = ""
) -> None:
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


def command_line(
    doc: str, rounds: int, more: Callable[[argparse.ArgumentParser], None] = lambda p: None
) -> argparse.Namespace:
    """The speed benchmarks' shared command line, `[rounds] [torch threads] [--device D]` and
    what `more` adds, with torch's thread count set when one is given (on a machine shared
    with other work, one thread keeps the two sides from fighting over cores)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    more(parser)
    parser.add_argument("rounds", type=int, nargs="?", default=rounds)
    parser.add_argument("threads", type=int, nargs="?", default=None)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    ns = parser.parse_args()
    if ns.threads is not None:
        torch.set_num_threads(ns.threads)
    return ns


def synchronizer(device: str) -> Callable[[], None]:
    """What waits for the work queued on `device` to finish, so that a clock stopped after it
    times the GPU's work too (on the CPU there is nothing to wait for)."""
    return torch.cuda.synchronize if torch.device(device).type == "cuda" else (lambda: None)
