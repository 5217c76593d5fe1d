"""Train a model through thunderviz.jit and through eager side by side and compare: loss and
every parameter gradient at each SGD step, with `torch.manual_seed(step)` before each step's
forward (so dropout draws the same masks in both)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn

import thunderviz as tv

TIGHT = {torch.float32: dict(rtol=1e-5, atol=1e-6), torch.float64: dict(rtol=1e-10, atol=1e-12)}


def train_like_eager(
    model: nn.Module,
    inputs: Callable[[int], tuple[tuple[Any, ...], dict[str, Any]]],
    loss_of: Callable[[Any], torch.Tensor],
    *,
    steps: int = 3,
    dtype: torch.dtype = torch.float32,
) -> tv.JittedFunction:
    """`inputs(step) -> (args, kwargs)`. Asserts equality with eager; returns the jitted model."""
    eager = copy.deepcopy(model)
    jitted = tv.jit(model)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_j = torch.optim.SGD(model.parameters(), lr=0.1)
    tol = TIGHT[dtype]
    for step in range(steps):
        args, kwargs = inputs(step)
        opt_e.zero_grad()
        opt_j.zero_grad()
        torch.manual_seed(1000 + step)
        loss_e = loss_of(eager(*args, **kwargs))
        torch.manual_seed(1000 + step)
        loss_j = loss_of(jitted(*args, **kwargs))
        loss_e.backward()
        loss_j.backward()
        torch.testing.assert_close(
            loss_j, loss_e, **tol, msg=lambda m, s=step: f"step {s} loss: {m}"
        )
        for (name, pe), pj in zip(eager.named_parameters(), model.parameters(), strict=True):
            assert (pe.grad is None) == (pj.grad is None), f"step {step}: {name}"
            if pe.grad is not None:
                torch.testing.assert_close(
                    pj.grad, pe.grad, **tol, msg=lambda m, n=name, s=step: f"step {s} {n}: {m}"
                )
        opt_e.step()
        opt_j.step()
    return jitted
