"""Distributed debugging: launching local ranks, and comparing what the ranks recorded."""

from thunderviz.distributed.launch import LOOPBACK, RankError, free_port, launch

__all__ = ["LOOPBACK", "RankError", "free_port", "launch"]
