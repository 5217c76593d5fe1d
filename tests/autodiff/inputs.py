"""Float64 inputs from fixed seeds for the elementwise grad rule tests, each maker on a
domain: `positive` for log/sqrt, `unit` inside (-1, 1) for asin/atanh, `randn` elsewhere."""

from __future__ import annotations

import torch

F64 = torch.float64


def vec(*values, dtype=F64):
    return torch.tensor(values, dtype=dtype)


def randn(*shape, dtype=F64, seed=0):
    return torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def positive(*shape, seed=0):
    return torch.rand(shape, dtype=F64, generator=torch.Generator().manual_seed(seed)) + 0.2


def unit(*shape, seed=0):  # inside (-1, 1)
    return torch.rand(shape, dtype=F64, generator=torch.Generator().manual_seed(seed)) * 1.6 - 0.8
