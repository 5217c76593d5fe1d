"""Debugger sessions of distributed programs, for saving per rank and comparing.

A `Session` of a tensor-parallel program (functional collectives) needs nothing special:
each rank makes its own. DistributedDataParallel does its communication outside the
module, so `ddp_session` makes the session the way `jit(ddp)` trains: `ddp.module` traced,
DDP's bucketed gradient all-reduces in the backward, buffers broadcast first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from thunderviz.core.inputs import InputKind
from thunderviz.debug import Session
from thunderviz.executor.ddp import DDPSync

__all__ = ["ddp_session", "parameter_inputs"]


class _WithLoss(torch.nn.Module):
    """`loss_fn(module(*inputs), target)` as one module: the session's scalar output, and
    the same parameters and buffers, in the same order, as the module."""

    def __init__(self, module: torch.nn.Module, loss_fn: Callable[..., Any]) -> None:
        super().__init__()
        self.module = module
        self.loss_fn = loss_fn

    def forward(self, *inputs_and_target: Any) -> Any:
        *inputs, target = inputs_and_target
        return self.loss_fn(self.module(*inputs), target)


def ddp_session(
    ddp: DistributedDataParallel,
    *inputs: Any,
    loss_fn: Callable[..., Any] | None = None,
    target: Any = None,
    **session_kwargs: Any,
) -> Session:
    """This rank's Session of one DDP step: `ddp.module(*inputs)` (then
    `loss_fn(output, target)` when given), with DDP's gradient all-reduces in the backward
    trace as `thunderviz.jit(ddp)` runs them. Every rank makes its session at the same point
    of the program: the all-reduces run for real when the backward is recorded or stepped."""
    sync = DDPSync.of(ddp)
    if sync is None:
        raise TypeError(f"ddp_session expects a DistributedDataParallel, got {type(ddp).__name__}")
    sync.before_forward()  # buffers broadcast from rank 0, as DDP's forward does
    module = sync.module if loss_fn is None else _WithLoss(sync.module, loss_fn)
    args = inputs if loss_fn is None else (*inputs, target)
    session = Session(module, *args, **session_kwargs)
    if session.result is not None:
        session.result = sync.add_gradient_sync(session.result)
    return session


def parameter_inputs(session: Session) -> list[str]:
    """The trace names of a module session's parameters (for `compare(..., replicated=)`:
    under DDP every parameter is the same on every rank)."""
    module = session.fn
    if not isinstance(module, torch.nn.Module):
        raise TypeError("parameter_inputs needs a Session of an nn.Module")
    return [
        p.name
        for p, inp in zip(session.forward.flat_args, session.forward.inputs, strict=True)
        if inp.kind is InputKind.PARAMETER
    ]
