"""Distributed debugging: launching local ranks, and comparing what the ranks recorded."""

from thunderviz.distributed.compare import Divergence, compare
from thunderviz.distributed.launch import LOOPBACK, RankError, free_port, launch
from thunderviz.distributed.sessions import ddp_session, parameter_inputs

__all__ = ["Divergence", "LOOPBACK", "RankError", "compare", "ddp_session", "free_port", "launch",
           "parameter_inputs"]
