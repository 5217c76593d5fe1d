"""The widget's static twin: what a notebook shows where no kernel runs the widget.

A notebook cell shows the widget as two outputs (`TwinOutputs._ipython_display_`): first
the static twin (the view document under the view MIME, a Graphviz SVG, text), then the
widget view. JupyterLab prefers the widget view (rank -10) over every other type of a bundle
in a trusted notebook, and a notebook the user saved is trusted; reopened later its widget
model is gone and JupyterLab prints "Error displaying widget: model not found" instead of
any fallback in the same bundle (seen in JupyterLab 4.6 with ipywidgets 8.1). The twin is an
output of its own, so it renders then: the thunderviz extension draws the view MIME,
elsewhere the SVG. While the kernel runs, the widget's module (widgets/esm.py) hides its
twin (display: none; nothing is written to the notebook), so the view is not shown twice.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from IPython.core.getipython import get_ipython
from IPython.display import display

from thunderviz.viz.protocol import VIEW_MIME
from thunderviz.viz.static import static_svg
from thunderviz.widgets.esm import TEXT_MARK, TWIN_MARK

__all__ = ["WIDGET_MIME", "StaticTwin", "TwinOutputs", "view_text"]

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


class TwinOutputs:
    """The notebook outputs of a widget with a `document` trait and a `_twin` (a
    `StaticTwin`); a base of DebuggerWidget before ipywidgets' own `Widget`."""

    document: Any  # the widget's Dict trait
    comm: Any
    _twin: StaticTwin

    # False (or THUNDERVIZ_STATIC_TWIN=0): one output, the full `_repr_mimebundle_`. Off in
    # Colab, whose outputs live in separate frames (the widget could not hide its twin).
    static_twin = os.environ.get("THUNDERVIZ_STATIC_TWIN", "1") != "0"

    def static_svg(self) -> str | None:
        """The static picture of the forward (Graphviz `dot`); None if dot is missing."""
        return self._twin.svg(self.document)

    def static_bundle(self) -> dict[str, Any]:
        """The fallback alone (no widget view): the static twin's output."""
        return self._twin.bundle(self.document)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The widget view, plus a static fallback for where no kernel runs the widget: the
        view document (the thunderviz JupyterLab extension draws it interactively), a
        Graphviz SVG and text."""
        bundle = super()._repr_mimebundle_(**kwargs)  # type: ignore[misc]
        if bundle is None:
            return None
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        return {**data, **self.static_bundle()}, metadata

    def widget_bundle(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The widget view alone, with text for readers that cannot show widgets."""
        bundle = super()._repr_mimebundle_()  # type: ignore[misc]
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        return (
            {
                WIDGET_MIME: data[WIDGET_MIME],
                "text/plain": "<thunderviz debugger: live view (run the cell to use it)>",
            },
            metadata,
        )

    def _ipython_display_(self, **kwargs: Any) -> None:
        """The static twin, then the widget view, when a kernel runs the widget and
        `static_twin` is on; otherwise one output, the full bundle. A closed widget shows
        its picture only."""
        if self.comm is None:  # closed: no widget to show, the picture still is
            display(self.static_bundle(), raw=True)
            return
        ip = get_ipython()
        in_kernel = ip is not None and getattr(ip, "kernel", None) is not None
        twin = self.static_twin and "google.colab" not in sys.modules
        if not (twin and in_kernel):
            data, metadata = self._repr_mimebundle_()
            display(data, raw=True, metadata=metadata)
            return
        display(self.static_bundle(), raw=True)
        data, metadata = self.widget_bundle()
        display(data, raw=True, metadata=metadata)

    def __repr__(self) -> str:
        return view_text(self.document)


def _mark_svg(svg: str) -> str:
    """The SVG with a comment that tells the widget's module it is our static twin."""
    at = svg.find("<svg")
    return svg if at < 0 else f"{svg[:at]}<!-- {TWIN_MARK} -->\n{svg[at:]}"


def _first_trace(doc: Mapping[str, Any]) -> str:
    traces = doc.get("traces") or {}
    return "forward" if "forward" in traces else next(iter(traces))
