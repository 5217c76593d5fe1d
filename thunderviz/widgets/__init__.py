"""Notebook integration: the debugger widget, `show()`, the `%thunder` magics and the
standalone HTML export. All of them draw with the one viewer, `static/viewer.js`."""

from thunderviz.widgets.html_export import export_html
from thunderviz.widgets.magic import load_ipython_extension
from thunderviz.widgets.show import show
from thunderviz.widgets.widget import VIEW_MIME, DebuggerWidget, ViewerNotBuilt

__all__ = [
    "DebuggerWidget",
    "VIEW_MIME",
    "ViewerNotBuilt",
    "export_html",
    "load_ipython_extension",
    "show",
]
