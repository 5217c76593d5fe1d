"""Views: the JSON view document, static pictures, and `.tvz` files."""

from thunderviz.viz.document import FORMAT, VERSION, build_document, trace_view
from thunderviz.viz.static import static_png, static_svg
from thunderviz.viz.tvz import TvzError, load, save

__all__ = [
    "FORMAT",
    "VERSION",
    "TvzError",
    "build_document",
    "load",
    "save",
    "static_png",
    "static_svg",
    "trace_view",
]
