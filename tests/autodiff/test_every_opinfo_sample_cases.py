"""Cases from OpInfo samples beyond the first three, which the census skips by default
(`python -m benchmarks.opinfo_census --samples 1000` runs them all): each crashed, or was
refused, or (embedding_bag with max_norm, in tests/capture/test_no_grad_updates.py) gave no
gradient. Each against torch.autograd in float64."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tests.helpers import check_vjp

F64 = dict(dtype=torch.float64)


def test_masked_select_of_a_0_dim_tensor():
    """Positions need a dimension to select along: a 0-dim input and mask are viewed as one
    element."""
    for keep in (True, False):
        check_vjp(torch.masked_select, torch.randn((), **F64), torch.tensor(keep))


def test_atleast_nd_returning_some_arguments_as_they_came():
    """`torch.atleast_1d(x, y)` returns a 1-d `x` itself: an output nothing inside the call
    made, whose gradient is the argument's."""
    x, y = torch.randn(3, **F64), torch.randn((), **F64)
    for fn in (torch.atleast_1d, torch.atleast_2d, torch.atleast_3d):
        check_vjp(lambda a, b, fn=fn: fn([a, b]), x, y)


def test_cdist_by_matrix_product():
    """Its C++ kernel calls matmul and mT below autograd: they reach the trace whole (matmul
    recorded through its composite kernel, mT with a rule of its own)."""
    a, b = torch.randn(2, 5, 3, **F64), torch.randn(2, 6, 3, **F64)
    check_vjp(lambda a, b: torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"), a, b)


def test_group_norm_of_an_empty_batch():
    x = torch.randn(0, 4, 3, **F64)
    check_vjp(
        lambda x, w, b: F.group_norm(x, 2, w, b), x, torch.randn(4, **F64), torch.randn(4, **F64)
    )
