"""Distributed debugging: launching local ranks, and comparing what the ranks recorded."""

from thunderviz.distributed.compare import Divergence, compare
from thunderviz.distributed.launch import LOOPBACK, RankError, free_port, launch

__all__ = ["Divergence", "LOOPBACK", "RankError", "compare", "free_port", "launch"]
