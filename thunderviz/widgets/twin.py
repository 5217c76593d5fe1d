"""The widget's static twin: what a notebook shows where no kernel runs the widget.

A notebook cell shows the widget as two outputs (`display_widget`): first the static twin
(the view document under the view MIME, a Graphviz SVG, text), then the widget view.
JupyterLab prefers the widget view (rank -10) over every other type of a bundle in a trusted
notebook, and a notebook the user saved is trusted; reopened later its widget model is gone
and JupyterLab prints "Error displaying widget: model not found" instead of any fallback in
the same bundle (seen in JupyterLab 4.6 with ipywidgets 8.1). The twin is an output of its
own, so it renders then: the thunderviz extension draws the view MIME, elsewhere the SVG.
While the kernel runs, the widget's module (widgets/esm.py) hides its twin (display: none;
nothing is written to the notebook), so the view is not shown twice.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from IPython import get_ipython
from IPython.display import display

from thunderviz.viz.protocol import VIEW_MIME
from thunderviz.viz.static import static_svg
from thunderviz.widgets.esm import TEXT_MARK, TWIN_MARK

__all__ = ["WIDGET_MIME", "StaticTwin", "display_widget", "view_text"]

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


class StaticTwin:
    """The static outputs of one document; the picture is drawn once per document."""

    def __init__(self) -> None:
        self._svg: str | None | bool = False  # False: not made yet; None: could not be made

    def forget(self) -> None:
        """The document changed: draw the picture again when asked."""
        self._svg = False

    def svg(self, doc: Mapping[str, Any]) -> str | None:
        """The static picture of the forward (Graphviz `dot`); None if dot is missing."""
        if self._svg is False:
            try:
                self._svg = _mark_svg(static_svg(doc, _first_trace(doc)))
            except (RuntimeError, ValueError, OSError):
                self._svg = None
        return self._svg  # type: ignore[return-value]

    def bundle(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """The twin's output: the document, the SVG (when dot ran) and text."""
        data: dict[str, Any] = {VIEW_MIME: doc}
        svg = self.svg(doc)
        if svg:
            data["image/svg+xml"] = svg
        data["text/plain"] = view_text(doc)
        return data


def view_text(doc: Mapping[str, Any]) -> str:
    """One line for the twin's text output (marked, so the widget knows its twin)."""
    parts = [
        f"{kind.replace('_', ' ')}: "
        f"{sum(1 for o in tv.get('ops', []) if o.get('parent') is None)} ops"
        for kind, tv in (doc.get("traces") or {}).items()
    ]
    return f"{TEXT_MARK} {doc.get('title') or 'thunderviz'} ({'; '.join(parts)})>"


def widget_only(bundle: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The widget view of an ipywidgets bundle alone, with text for readers that cannot
    show widgets."""
    data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
    return (
        {
            WIDGET_MIME: data[WIDGET_MIME],
            "text/plain": "<thunderviz debugger: live view (run the cell to use it)>",
        },
        metadata,
    )


def display_widget(
    static_bundle: Callable[[], dict[str, Any]],
    full_bundle: Callable[[], Any],
    widget_bundle: Callable[[], tuple[dict[str, Any], dict[str, Any]]],
    *,
    open_comm: bool,
    twin: bool,
) -> None:
    """Show a widget in a notebook: the static twin, then the widget view, when a kernel
    runs it and `twin` is on (off in Colab, whose outputs live in separate frames, where the
    widget could not hide its twin); otherwise one output, the full bundle. A closed widget
    (`open_comm` False) shows its picture only."""
    if not open_comm:
        display(static_bundle(), raw=True)
        return
    ip = get_ipython()
    in_kernel = ip is not None and getattr(ip, "kernel", None) is not None
    if not (twin and in_kernel and "google.colab" not in sys.modules):
        data, metadata = full_bundle()
        display(data, raw=True, metadata=metadata)
        return
    display(static_bundle(), raw=True)
    data, metadata = widget_bundle()
    display(data, raw=True, metadata=metadata)


def _mark_svg(svg: str) -> str:
    """The SVG with a comment that tells the widget's module it is our static twin."""
    at = svg.find("<svg")
    return svg if at < 0 else f"{svg[:at]}<!-- {TWIN_MARK} -->\n{svg[at:]}"


def _first_trace(doc: Mapping[str, Any]) -> str:
    traces = doc.get("traces") or {}
    return "forward" if "forward" in traces else next(iter(traces))
