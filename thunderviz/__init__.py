"""thunderviz: a visual debugger for autodiff in Jupyter.

The public API lives here; nothing else needs importing.

The notebook side (`show`, `DebuggerWidget`, `export_html`, the `%thunder` magics) is
imported on first use: ipywidgets alone is ~0.2 s, half of `import thunderviz`, and a
training script that only calls `jit` never draws.
"""

from typing import TYPE_CHECKING, Any

from thunderviz import distributed  # thunderviz.distributed.compare / launch
from thunderviz.autodiff import AutodiffError, AutodiffResult, SavedTensor, get_grad, put_grad
from thunderviz.autodiff.api import differentiate as autodiff
from thunderviz.autodiff.api import grad, register_grad, value_and_grad, vjp
from thunderviz.capture import CaptureError, trace
from thunderviz.core import BoundSymbol, NumberProxy, Proxy, TensorProxy, Trace, TraceTag
from thunderviz.debug import BackwardStepper, Session, compare, grad_flow, tensor_stats
from thunderviz.executor import (
    JittedFunction,
    JittedModule,
    clear_grads,
    extract_grads,
    jit,
    last_backward_traces,
    last_traces,
    populate_grads,
)
from thunderviz.viz import TvzError, build_document, load, save, static_png, static_svg

if TYPE_CHECKING:
    from thunderviz.widgets import DebuggerWidget, export_html, load_ipython_extension, show

_FROM_WIDGETS = frozenset({"DebuggerWidget", "export_html", "load_ipython_extension", "show"})


def __getattr__(name: str) -> Any:
    if name in _FROM_WIDGETS:
        import thunderviz.widgets

        return getattr(thunderviz.widgets, name)
    raise AttributeError(f"module 'thunderviz' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "distributed",
    "AutodiffError",
    "BackwardStepper",
    "DebuggerWidget",
    "export_html",
    "load_ipython_extension",
    "show",
    "Session",
    "compare",
    "TvzError",
    "build_document",
    "grad_flow",
    "load",
    "save",
    "static_png",
    "static_svg",
    "tensor_stats",
    "JittedFunction",
    "JittedModule",
    "clear_grads",
    "extract_grads",
    "jit",
    "last_backward_traces",
    "last_traces",
    "populate_grads",
    "AutodiffResult",
    "SavedTensor",
    "autodiff",
    "get_grad",
    "grad",
    "put_grad",
    "register_grad",
    "value_and_grad",
    "vjp",
    "BoundSymbol",
    "CaptureError",
    "NumberProxy",
    "Proxy",
    "TensorProxy",
    "Trace",
    "TraceTag",
    "trace",
]
