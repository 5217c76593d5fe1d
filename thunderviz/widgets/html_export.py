"""`export_html(...)`: the debugger as one self-contained HTML file that opens offline.

    export_html(model, "mlp.html", x, y)     # trace, differentiate, record the backward, write
    export_html(session, "run.html")         # a Session (its backward is recorded first)
    export_html("run.tvz", "run.html")       # a saved view

The page holds everything: the viewer bundle (static/viewer.js, inlined as text and imported
from a blob: URL, as frontend/README.md describes), the view document as JSON in a
`<script type="application/json">` (with `<`, `>` and `&` written as \\u escapes, so no string
of the program can end the tag), and a static SVG of the forward in `<noscript>`. No kernel,
no server, no network: graphs, expand/collapse, details and the recorded backward steps work
from `file://`. A Content-Security-Policy `<meta>` (`content_security_policy()`) lets the page
run only its own bootstrap script (by hash) and what that starts from blob: URLs, and load
nothing from the network. The file is written atomically (viz/files.py).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
from pathlib import Path
from typing import Any

from thunderviz.viz.files import write_text_atomic
from thunderviz.viz.static import static_svg
from thunderviz.viz.tvz import validate
from thunderviz.widgets.esm import viewer_bundle
from thunderviz.widgets.show import document_of, make_session
from thunderviz.widgets.sidebyside import is_side_by_side, side_by_side_document
from thunderviz.widgets.stepping import default_cotangents, is_steppable
from thunderviz.widgets.widget import DebuggerWidget

__all__ = ["export_html", "render_html", "json_for_script", "content_security_policy"]

_PAGE = """\
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="{generator}">
<title>{title}</title>
<style>
  html, body {{ margin: 0; padding: 0; }}
  body {{ padding: 12px; font-family: system-ui, -apple-system, "Segoe UI", sans-serif; }}
  .tvx-static {{ overflow: auto; }}
  .tvx-static svg {{ max-width: 100%; height: auto; }}
</style>
</head>
<body>
<div id="tv-app" data-tv-export="{version}"></div>
<noscript><div class="tvx-static"><p>The interactive view needs JavaScript. A static picture of the
forward trace:</p>
{svg}</div></noscript>
<script type="application/json" id="tv-doc">{document}</script>
<script type="application/json" id="tv-options">{options}</script>
<script type="text/plain" id="tv-bundle">{bundle}</script>
<script type="module">{bootstrap}</script>
</body>
</html>
"""

# The page's one inline script: it imports the viewer bundle (inlined as text) from a blob:
# URL and mounts it. The Content-Security-Policy allows exactly this script, by its hash.
# Parsing a big document (a 12-layer GPT's is 4 MB) is a task of its own: the viewer's first
# slice of checking it then starts in a fresh task, and no task of the page reaches 100 ms.
_BOOTSTRAP = """
const text = document.getElementById("tv-bundle").textContent;
const url = URL.createObjectURL(new Blob([text], { type: "text/javascript" }));
const viewer = await import(url);
const doc = JSON.parse(document.getElementById("tv-doc").textContent);
const options = JSON.parse(document.getElementById("tv-options").textContent);
const app = document.getElementById("tv-app");
await new Promise((resolve) => setTimeout(resolve, 0));
window.thunderviz = { viewer, handle: viewer.mountViewer(app, doc, options) };
"""


def content_security_policy(bootstrap: str = _BOOTSTRAP) -> str:
    """The page's policy: nothing from the network (`default-src 'none'`, no connections),
    scripts only the bootstrap (by hash) and what it starts from blob: URLs (the viewer
    bundle, the layout worker), WebAssembly compilation for Graphviz, inline styles (the
    viewer's own), images only from data:/blob:. No 'unsafe-inline' for scripts, so an
    inline event handler (`onclick=...`) never runs."""
    digest = base64.b64encode(hashlib.sha256(bootstrap.encode("utf-8")).digest()).decode("ascii")
    return "; ".join(
        [
            "default-src 'none'",
            f"script-src 'sha256-{digest}' blob: 'wasm-unsafe-eval'",
            "worker-src blob:",
            "style-src 'unsafe-inline'",
            "img-src data: blob:",
            "font-src data:",
            "connect-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
        ]
    )


_SCRIPT_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def json_for_script(value: Any) -> str:
    """JSON text safe inside `<script type="application/json">`: strict JSON (no NaN), with
    `<`, `>`, `&` and the JS line separators as \\u escapes (JSON.parse reads them back)."""
    text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return re.sub("[<>&\u2028\u2029]", lambda m: _SCRIPT_ESCAPES[m.group(0)], text)


def _inline_bundle() -> str:
    bundle = viewer_bundle()
    lowered = bundle.lower()
    if "</script" in lowered or "<!--" in bundle:
        raise RuntimeError(
            "static/viewer.js contains '</script' or '<!--' and cannot be inlined "
            "in a <script> element; rebuild it (`make frontend`) with a bundler "
            "setting that escapes them"
        )
    return bundle


def _static_picture(doc: dict[str, Any]) -> str:
    """The forward's static SVG for <noscript>, as inline HTML SVG: no XML prolog, doctype,
    comments or namespace URLs (the HTML parser puts <svg> in the SVG namespace itself)."""
    traces = doc.get("traces") or {}
    kind = "forward" if "forward" in traces else next(iter(traces))
    try:
        svg = static_svg(doc, kind)
    except (RuntimeError, ValueError, OSError) as e:
        return f"<p>(no picture: {html.escape(str(e))})</p>"
    at = svg.find("<svg")
    svg = svg[at:] if at >= 0 else svg
    svg = re.sub(r"<!--.*?-->", "", svg, flags=re.S)
    svg = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", svg)
    if "</noscript" in svg.lower():  # user text is XML-escaped by Graphviz; never expected
        return "<p>(no picture)</p>"
    return svg.strip()


def render_html(
    doc: dict[str, Any],
    *,
    title: str | None = None,
    tab: str = "",
    height: str | int = "calc(100vh - 24px)",
    static: bool = True,
) -> str:
    """The page for a view document (see the module docstring)."""
    doc = validate(doc)
    name = title if title is not None else str(doc.get("title") or "thunderviz")
    options: dict[str, Any] = {"height": height}
    if tab:
        options["tab"] = tab
    return _PAGE.format(
        generator=html.escape(str(doc.get("created_by") or "thunderviz")),
        title=html.escape(f"{name} · thunderviz"),
        version=int(doc.get("version", 1)),
        svg=_static_picture(doc) if static else "",
        document=json_for_script(doc),
        options=json_for_script(options),
        bundle=_inline_bundle(),
        bootstrap=_BOOTSTRAP,
        csp=html.escape(content_security_policy()),
    )


def export_html(
    obj: Any,
    path: str | os.PathLike[str],
    *args: Any,
    fake: bool = False,
    backward: bool = True,
    depth: int = 1,
    title: str | None = None,
    tab: str = "",
    record: bool = True,
    static: bool = True,
    **kwargs: Any,
) -> Path:
    """Write the debugger for `obj` to `path` as one self-contained HTML file.

    obj: a function or nn.Module (with its inputs as *args / **kwargs), a Session, a
    DebuggerWidget, a thunderviz.jit function (after a call), a view document or a .tvz path;
    a tuple `(a, b)` of two runs or a list of ranks' files: the side-by-side view.
    record: record every backward step first (`Session.record_backward`), so the page can
    step through the backward offline. static: add the static SVG in <noscript>.
    Returns the path written.
    """
    if isinstance(obj, DebuggerWidget):
        if args or kwargs:
            raise TypeError("export_html(widget, path) takes no inputs")
        doc = obj.document
    elif is_side_by_side(obj) and not args and not kwargs:
        doc = side_by_side_document(obj)
    else:
        session = make_session(obj, args, kwargs, fake=fake, backward=backward, depth=depth)
        if session is None:
            doc = document_of(obj)
        else:
            if record and is_steppable(session) and not session.steps:
                default_cotangents(session)
                session.record_backward()
            doc = session.document()
    # Atomic: an error (while rendering or writing) leaves an existing file as it was.
    return write_text_atomic(path, render_html(doc, title=title, tab=tab, static=static))
