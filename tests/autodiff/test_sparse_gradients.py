"""`Embedding(sparse=True)` gets a sparse gradient, as in eager: SparseAdam trains it under
jit to eager's parameters, and the debugger (its stepper's statistics, its comparison with
autograd) reads the sparse gradient by its values."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn

import thunderviz as tv


class SparseLookup(nn.Module):
    def __init__(self, bag: str | None = None) -> None:
        super().__init__()
        self.emb = (
            nn.Embedding(20, 4, sparse=True)
            if bag is None
            else nn.EmbeddingBag(20, 4, mode=bag, sparse=True)
        )
        self.out = nn.Linear(4, 1)

    def forward(self, i):
        if isinstance(self.emb, nn.EmbeddingBag):
            i = i.view(2, 3)  # two bags of three
        return self.out(self.emb(i)).pow(2).sum()


def _optimizers(model):
    return (
        torch.optim.SparseAdam(list(model.emb.parameters()), lr=0.1),
        torch.optim.Adam(list(model.out.parameters()), lr=0.1),
    )


@pytest.mark.parametrize("bag", [None, "sum", "mean"])  # (torch: no sparse max bags)
def test_sparse_adam_trains_the_jitted_embedding_as_eager(bag):
    torch.manual_seed(0)
    eager = SparseLookup(bag).double()
    ours = copy.deepcopy(eager)
    jitted = tv.jit(ours)
    opts = {id(eager): _optimizers(eager), id(ours): _optimizers(ours)}
    for _ in range(3):
        i = torch.randint(0, 20, (6,))
        for run, model in ((eager, eager), (jitted, ours)):
            run(i).backward()
            assert model.emb.weight.grad.layout == torch.sparse_coo
            for opt in opts[id(model)]:
                opt.step()
                opt.zero_grad()
    for (name, p), q in zip(eager.named_parameters(), ours.parameters(), strict=True):
        torch.testing.assert_close(q, p, rtol=1e-12, atol=1e-12, msg=name)


def test_the_debugger_reads_a_sparse_gradient():
    torch.manual_seed(0)
    session = tv.Session(SparseLookup().double(), torch.randint(0, 20, (6,)))
    stepper = session.stepper
    stepper.finish()
    grad = stepper.grads["emb_weight"]
    assert grad.layout == torch.sparse_coo
    stats, dense = tv.tensor_stats(grad), tv.tensor_stats(grad.to_dense())
    assert (stats.numel, stats.norm, stats.min) == (dense.numel, dense.norm, dense.min)
    assert all(c.allclose for c in session.compare_with_autograd())
