"""Tensor statistics against plain-Python arithmetic on the same numbers."""

from __future__ import annotations

import json
import math
import statistics

import pytest
import torch

from thunderviz.debug.stats import HIST_BINS, tensor_stats


def _python_hist(values: list[float], lo: float, hi: float) -> list[int]:
    counts = [0] * HIST_BINS
    width = (hi - lo) / HIST_BINS
    for v in values:
        i = min(int((v - lo) / width), HIST_BINS - 1)
        counts[i] += 1
    return counts


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_float_statistics_match_python(dtype):
    gen = torch.Generator().manual_seed(0)
    t = torch.randn(7, 9, generator=gen, dtype=dtype) * 3 + 1
    values = [float(v) for v in t.reshape(-1).tolist()]
    st = tensor_stats(t)
    assert st.numel == 63 and st.nan == 0 and st.inf == 0
    assert st.min == min(values) and st.max == max(values)
    assert st.mean == pytest.approx(statistics.fmean(values), rel=1e-12)
    assert st.std == pytest.approx(statistics.pstdev(values), rel=1e-12)
    assert st.norm == pytest.approx(math.sqrt(sum(v * v for v in values)), rel=1e-12)
    assert list(st.hist_counts) == _python_hist(values, st.min, st.max)
    assert len(st.hist_edges) == HIST_BINS + 1
    assert st.hist_edges[0] == st.min and st.hist_edges[-1] == pytest.approx(st.max)
    assert sum(st.hist_counts) == 63


def test_nan_and_inf_are_counted_and_ignored_for_min_max_hist():
    t = torch.tensor([1.0, float("nan"), float("inf"), -2.0, float("-inf"), 3.0])
    st = tensor_stats(t)
    assert (st.nan, st.inf, st.numel) == (1, 2, 6)
    assert (st.min, st.max) == (-2.0, 3.0)
    assert sum(st.hist_counts) == 3  # only the finite values
    assert math.isnan(st.mean) and math.isnan(st.norm)
    js = st.to_json()
    assert js["mean"] == "nan" and js["norm"] == "nan"
    json.dumps(js, allow_nan=False)  # strict JSON


def test_infinite_norm_and_all_nonfinite_tensor():
    st = tensor_stats(torch.tensor([float("inf"), 1.0]))
    assert st.to_json()["norm"] == "inf" and st.to_json()["mean"] == "inf"
    only_bad = tensor_stats(torch.tensor([float("nan"), float("-inf")]))
    assert only_bad.min is None and only_bad.max is None and only_bad.hist_edges is None
    assert (only_bad.nan, only_bad.inf) == (1, 1)
    json.dumps(only_bad.to_json(), allow_nan=False)


def test_integer_tensors_get_min_max_mean_only():
    st = tensor_stats(torch.tensor([[3, 4], [5, 10]]))
    assert (st.min, st.max, st.mean) == (3, 10, 5.5)
    assert st.std is None and st.norm is None and st.hist_edges is None
    js = st.to_json()
    assert js["hist"] is None and js["std"] is None
    b = tensor_stats(torch.tensor([True, False, True, True]))
    assert (b.min, b.max, b.mean) == (0, 1, 0.75)


def test_constant_empty_scalar_and_low_precision_tensors():
    c = tensor_stats(torch.full((5,), 2.0))
    assert c.std == 0 and sum(c.hist_counts) == 5 and c.hist_edges[0] < 2.0 < c.hist_edges[-1]
    e = tensor_stats(torch.zeros(0, 3))
    assert e.numel == 0 and e.min is None and e.to_json()["hist"] is None
    s = tensor_stats(torch.tensor(-1.5, dtype=torch.float64))
    assert (s.min, s.max, s.norm) == (-1.5, -1.5, 1.5)
    h = tensor_stats(torch.tensor([1.0, 2.0], dtype=torch.bfloat16))
    assert h.dtype == "bfloat16" and h.mean == 1.5


def test_stats_do_not_touch_the_tensor_or_its_graph():
    t = torch.randn(4, requires_grad=True)
    before = t.detach().clone()
    st = tensor_stats(t * 2)
    assert torch.equal(t.detach(), before) and t.grad is None
    assert st.numel == 4
