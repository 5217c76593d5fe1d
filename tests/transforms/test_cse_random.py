"""CSE never merges two random draws: the CSE'd trace, run under a seed, gives what eager gives
under that seed. Which ops are random is torch's `nondeterministic_seeded` tag; before it, a
word list missed rrelu's noise and `_standard_gamma`, and CSE turned `a + b` of two draws
into `2 * a`."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import thunderviz
from thunderviz.transforms import cse

PROGRAMS = {
    "rrelu": lambda x: F.rrelu(x, training=True) + F.rrelu(x, training=True),
    "standard_gamma": lambda x: torch._standard_gamma(x) + torch._standard_gamma(x),
    "dropout": lambda x: F.dropout(x, 0.5) + F.dropout(x, 0.5),
    "rand_like": lambda x: torch.rand_like(x) + torch.rand_like(x),
    "bernoulli": lambda x: torch.bernoulli(x) + torch.bernoulli(x),
    "normal": lambda x: torch.normal(x, 1.0) + torch.normal(x, 1.0),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_cse_keeps_every_random_draw(name):
    fn = PROGRAMS[name]
    x = torch.rand(64, dtype=torch.float64) * 0.9 + 0.05
    trace = thunderviz.trace(fn, x)
    run = cse(trace).python_callable()
    torch.manual_seed(7)
    expected = fn(x)
    torch.manual_seed(7)
    got = run(x)
    got = got if isinstance(got, torch.Tensor) else got[0]
    assert torch.equal(got, expected)


def test_cse_still_merges_deterministic_repeats():
    trace = thunderviz.trace(lambda x: torch.sin(x) + torch.sin(x), torch.rand(4))
    assert len(cse(trace).bound_symbols) < len(trace.bound_symbols)
