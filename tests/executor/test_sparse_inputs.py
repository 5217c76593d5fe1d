"""A graph network's sparse adjacency as an input (COO and CSR), multiplied in each of the
ways torch offers: traced, keyed and run like a dense input, with eager's gradients for the
dense factors. Before, `torch.sparse.mm` had no grad rule and a CSR tensor failed in jit's
key, its input copy and its repeated-call check (no strides). Compared with eager."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import thunderviz as tv

PRODUCTS = {
    "matmul": lambda a, b: a @ b,
    "sparse.mm": torch.sparse.mm,
    "mm": torch.mm,
    "spmm": torch.spmm,
}


class GCN(nn.Module):
    def __init__(self, product: str) -> None:
        super().__init__()
        self.inp = nn.Linear(4, 8, dtype=torch.float64)
        self.out = nn.Linear(8, 2, dtype=torch.float64)
        self.product = PRODUCTS[product]

    def forward(self, x, adjacency):
        h = self.product(adjacency, self.inp(x)).relu()
        return self.product(adjacency, self.out(h)).log_softmax(-1)


def _adjacency(layout: str) -> torch.Tensor:
    torch.manual_seed(1)
    dense = (torch.rand(6, 6) < 0.4).double() + torch.eye(6, dtype=torch.float64)
    return dense.to_sparse() if layout == "coo" else dense.to_sparse_csr()


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", ["coo", "csr"])
@pytest.mark.parametrize("product", PRODUCTS)
def test_a_sparse_adjacency_trains_as_in_eager(layout, product):
    torch.manual_seed(0)
    eager = GCN(product)
    ours = copy.deepcopy(eager)
    jitted, adjacency = tv.jit(ours), _adjacency(layout)
    for _ in range(3):
        x = torch.randn(6, 4, dtype=torch.float64)
        want, got = eager(x, adjacency), jitted(x, adjacency)
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
        want.sum().backward()
        got.sum().backward()
    for a, b in zip(eager.parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(b.grad, a.grad, rtol=0, atol=1e-12)
    assert jitted.cache_misses == 1


def test_the_sparse_factors_own_gradient_is_refused_with_the_way_out():
    adjacency = _adjacency("coo").requires_grad_()
    x = torch.randn(6, 4, dtype=torch.float64)
    with pytest.raises(tv.AutodiffError, match=r"torch.sparse.mm.*\.detach\(\)"):
        tv.jit(GCN("sparse.mm"))(x, adjacency)
