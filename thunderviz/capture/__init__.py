"""Capture: run a PyTorch program once and record its forward Trace."""

from thunderviz.capture.api import trace
from thunderviz.capture.errors import CaptureError

__all__ = ["trace", "CaptureError"]
