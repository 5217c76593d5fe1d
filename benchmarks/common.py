"""Shared by the benchmarks: printing several contenders' results as ratios to a baseline."""

from __future__ import annotations


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
