"""Per-tensor statistics: what the debugger shows for every value it computes.

Statistics are computed on a CPU float64 copy, so they are the same whatever device or
dtype the tensor lives in, and reading them never changes the tensor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = ["TensorStats", "tensor_stats", "json_number", "HIST_BINS"]

HIST_BINS = 16


def json_number(x: float | int | None) -> float | int | str | None:
    """A number as the view document writes it: NaN and ±Inf become "nan", "inf", "-inf"."""
    if x is None or isinstance(x, (bool, int)):
        return x
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


@dataclass(frozen=True)
class TensorStats:
    """Summary of one tensor. Fields that do not apply (std of an integer tensor, anything of
    an empty one) are None. `min`/`max`/`hist` ignore NaN and ±Inf; `mean`, `std` and `norm`
    are over all values, so one NaN makes them NaN, as it makes the tensor's use NaN."""

    numel: int
    dtype: str
    min: float | None = None
    max: float | None = None
    mean: float | None = None
    std: float | None = None
    norm: float | None = None
    nan: int = 0
    inf: int = 0
    hist_edges: tuple[float, ...] | None = None
    hist_counts: tuple[int, ...] | None = None
    is_float: bool = True

    @property
    def has_nan_or_inf(self) -> bool:
        return self.nan > 0 or self.inf > 0

    @property
    def all_zero(self) -> bool:
        return self.numel > 0 and self.min == 0 and self.max == 0 and not self.has_nan_or_inf

    def to_json(self) -> dict[str, Any]:
        """The `Stats` record of docs/view-format.md (JSON-safe: no NaN/Inf floats)."""
        hist = None
        if self.hist_edges is not None and self.hist_counts is not None:
            hist = {
                "edges": [json_number(e) for e in self.hist_edges],
                "counts": list(self.hist_counts),
            }
        return {
            "min": json_number(self.min),
            "max": json_number(self.max),
            "mean": json_number(self.mean),
            "std": json_number(self.std),
            "norm": json_number(self.norm),
            "numel": self.numel,
            "nan": self.nan,
            "inf": self.inf,
            "hist": hist,
        }

    def __str__(self) -> str:
        def f(x: float | None) -> str:
            return "-" if x is None else f"{x:.4g}"

        bad = f" nan={self.nan} inf={self.inf}" if self.has_nan_or_inf else ""
        return (
            f"{self.dtype}[{self.numel}] min={f(self.min)} max={f(self.max)} "
            f"mean={f(self.mean)} std={f(self.std)} norm={f(self.norm)}{bad}"
        )


def tensor_stats(t: Any) -> TensorStats:
    """Statistics of a tensor (or a Python number, treated as a 0-dim tensor).

    Computed with numpy on a CPU float64 copy: one pass per statistic, no torch kernels
    (whose threading costs more than the work on the small tensors a backward is made of).
    """
    if not isinstance(t, torch.Tensor):
        t = torch.tensor(t)
    dtype = str(t.dtype).removeprefix("torch.")
    numel = t.numel()
    is_float = t.is_floating_point() or t.is_complex()
    if t.device.type == "meta" or _is_fake(t):
        return TensorStats(numel=numel, dtype=dtype, is_float=is_float)
    if numel == 0:
        return TensorStats(numel=0, dtype=dtype, is_float=is_float)
    a = _float64_array(t)
    with np.errstate(all="ignore"):
        if not is_float:
            return TensorStats(
                numel=numel,
                dtype=dtype,
                min=float(a.min()),
                max=float(a.max()),
                mean=float(a.mean()),
                is_float=False,
            )
        finite_mask = np.isfinite(a)
        n_finite = int(np.count_nonzero(finite_mask))
        n_nan = int(np.count_nonzero(np.isnan(a))) if n_finite != numel else 0
        n_inf = numel - n_finite - n_nan
        finite = a if n_finite == numel else a[finite_mask]
        mean = float(a.mean())
        std = float(a.std())
        # sum of squares without BLAS (whose thread pool fights torch's for the cores)
        norm = float(np.sqrt(np.square(a).sum()))
        if n_finite == 0:
            return TensorStats(
                numel=numel, dtype=dtype, mean=mean, std=std, norm=norm, nan=n_nan, inf=n_inf
            )
        lo, hi = float(finite.min()), float(finite.max())
        edges: tuple[float, ...] | None = None
        counts: tuple[int, ...] | None = None
        if math.isfinite(hi - lo):
            edges, counts = _histogram(finite, lo, hi)
        if not math.isfinite(norm):  # overflowed in the sum of squares: scale first
            scale = max(abs(lo), abs(hi))
            if n_finite == numel and scale > 0:
                norm = float(scale * np.sqrt(np.square(a / scale).sum()))
    return TensorStats(
        numel=numel,
        dtype=dtype,
        min=lo,
        max=hi,
        mean=mean,
        std=std,
        norm=norm,
        nan=n_nan,
        inf=n_inf,
        hist_edges=edges,
        hist_counts=counts,
    )


_NUMPY_DTYPES = {
    torch.float64,
    torch.float32,
    torch.float16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
}


def _float64_array(t: torch.Tensor) -> np.ndarray:
    """A flat float64 numpy copy of `t` (complex: its magnitudes; sparse: its dense values,
    zeros included, as `Embedding(sparse=True)`'s gradient stands for them)."""
    with torch.no_grad():
        x = t.detach()
        if x.layout != torch.strided:
            x = x.to_dense()
        if x.is_complex():
            x = x.abs()
        if x.dtype not in _NUMPY_DTYPES:  # bfloat16, float8, ...: numpy has no such type
            x = x.to(torch.float32 if x.is_floating_point() else torch.int64)
        if x.device.type != "cpu":
            x = x.cpu()
        return x.numpy().astype(np.float64).reshape(-1)


def _histogram(
    finite: np.ndarray, lo: float, hi: float
) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """HIST_BINS equal bins over [lo, hi] (the last bin includes hi); one bin of width 1
    around the value when all values are equal, as numpy does."""
    if hi == lo:
        edges = np.linspace(lo - 0.5, hi + 0.5, HIST_BINS + 1)
        counts = np.zeros(HIST_BINS, dtype=np.int64)
        counts[HIST_BINS // 2] = finite.size
    else:
        edges = np.linspace(lo, hi, HIST_BINS + 1)
        idx = ((finite - lo) * (HIST_BINS / (hi - lo))).astype(np.int64)
        np.clip(idx, 0, HIST_BINS - 1, out=idx)
        counts = np.bincount(idx, minlength=HIST_BINS)
    return tuple(float(v) for v in edges), tuple(int(v) for v in counts)


def _is_fake(t: torch.Tensor) -> bool:
    return type(t).__name__ == "FakeTensor"
