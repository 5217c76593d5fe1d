"""Distributed debugging: launching local ranks, and comparing what the ranks recorded."""

from thunderviz.distributed.compare import (
    Divergence,
    RankRow,
    compare,
    format_side_by_side,
    side_by_side,
)
from thunderviz.distributed.launch import LOOPBACK, RankError, free_port, launch
from thunderviz.distributed.sessions import ddp_session, parameter_inputs

__all__ = [
    "Divergence",
    "LOOPBACK",
    "RankError",
    "RankRow",
    "compare",
    "ddp_session",
    "format_side_by_side",
    "free_port",
    "launch",
    "parameter_inputs",
    "side_by_side",
]
