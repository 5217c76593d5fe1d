"""thunderviz: a visual debugger for autodiff in Jupyter.

The public API lives here; nothing else needs importing.

What a training script that only calls `jit` (or `trace`, `autodiff`) never uses is
imported on first use: the notebook side (`show`, `DebuggerWidget`, `export_html`, the
`%thunder` magics; ipywidgets alone is ~0.2 s), the debugger (`Session`, `compare`, ...), the
saved and static views (`save`, `static_svg`, ...; graphviz) and `distributed`: together
~0.25 s of a fresh process, ~0.02 s of it with the widgets already left out.
"""

from typing import TYPE_CHECKING, Any

from thunderviz.autodiff import AutodiffError, AutodiffResult, SavedTensor, get_grad, put_grad
from thunderviz.autodiff.api import differentiate as autodiff
from thunderviz.autodiff.api import grad, register_grad, value_and_grad, vjp
from thunderviz.capture import CaptureError, trace
from thunderviz.core import BoundSymbol, NumberProxy, Proxy, TensorProxy, Trace, TraceTag
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

if TYPE_CHECKING:
    import thunderviz.distributed as distributed
    from thunderviz.debug import BackwardStepper, Session, compare, grad_flow, tensor_stats
    from thunderviz.viz import TvzError, build_document, load, save, static_png, static_svg
    from thunderviz.widgets import DebuggerWidget, export_html, load_ipython_extension, show

_FROM_WIDGETS = frozenset({"DebuggerWidget", "export_html", "load_ipython_extension", "show"})
_FROM_DEBUG = frozenset({"BackwardStepper", "Session", "compare", "grad_flow", "tensor_stats"})
_FROM_VIZ = frozenset({"TvzError", "build_document", "load", "save", "static_png", "static_svg"})


def __getattr__(name: str) -> Any:
    """A public name imported on first use (module docstring); kept here after, so that
    later reads are plain attribute reads."""
    if name in _FROM_WIDGETS:
        import thunderviz.widgets as where
    elif name in _FROM_DEBUG:
        import thunderviz.debug as where
    elif name in _FROM_VIZ:
        import thunderviz.viz as where
    elif name == "distributed":
        import thunderviz.distributed

        return thunderviz.distributed  # the import made it an attribute of this module
    else:
        raise AttributeError(f"module 'thunderviz' has no attribute {name!r}")
    value = getattr(where, name)
    globals()[name] = value
    return value


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
