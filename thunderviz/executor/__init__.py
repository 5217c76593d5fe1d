"""Execution: traces run as generated Python over torch ops, and `jit`, which trains through
them with torch.autograd."""

from thunderviz.executor.grads import clear_grads, extract_grads, populate_grads
from thunderviz.executor.jit import JittedFunction
from thunderviz.executor.jitted_module import JittedModule, jit
from thunderviz.executor.last_traces import last_backward_traces, last_traces

__all__ = [
    "JittedFunction",
    "JittedModule",
    "clear_grads",
    "extract_grads",
    "jit",
    "last_backward_traces",
    "last_traces",
    "populate_grads",
]
