"""Grad rules for scatter_reduce, index_reduce and segment_reduce
(rules/indexed_reductions.py) against torch.autograd in float64: OpInfo samples, and
hand-made cases for what samples rarely hit (zeros in prod, ties in amax, include_self=False).
"""

from __future__ import annotations

import pytest
import torch

from tests.autodiff.opinfo_samples import sample_params
from tests.helpers import check_vjp

F64 = torch.float64
OPS = (
    [("scatter_reduce", r) for r in ("sum", "prod", "mean", "amax", "amin")]
    + [("index_reduce", r) for r in ("prod", "mean", "amax", "amin")]
    + [("_segment_reduce", "lengths"), ("_segment_reduce", "offsets")]
)


@pytest.mark.parametrize("fn,args,kwargs", sample_params(OPS, limit=6, spread=True))
def test_indexed_reduction_opinfo(fn, args, kwargs):
    check_vjp(fn, *args, **kwargs)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_with_zeros_and_ties(reduce, include_self):
    a = torch.tensor([[1.0, 0.0, 2.0, 3.0], [2.0, 2.0, -1.0, 0.5]], dtype=F64)
    src = torch.tensor([[0.0, 2.0, 0.0, 5.0, 1.0], [2.0, 0.0, 2.0, 2.0, -1.0]], dtype=F64)
    index = torch.tensor([[0, 1, 0, 3, 2], [1, 1, 0, 2, 2]])
    check_vjp(lambda a, s: a.scatter_reduce(1, index, s, reduce, include_self=include_self), a, src)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce_with_zeros_and_ties(reduce, include_self):
    a = torch.tensor([[1.0, 0.0], [2.0, 3.0], [0.5, 2.0]], dtype=F64)
    src = torch.tensor([[0.0, 2.0], [1.0, 0.0], [2.0, 2.0], [0.0, 3.0]], dtype=F64)
    index = torch.tensor([0, 2, 0, 0])
    check_vjp(lambda a, s: a.index_reduce(0, index, s, reduce, include_self=include_self), a, src)
