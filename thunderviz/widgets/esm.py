"""The widget's ES module: the built viewer (static/viewer.js) and the code that hides the
static twin while a kernel runs the widget (widgets/twin.py writes the twin)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = [
    "BUNDLE_PATH",
    "TEXT_MARK",
    "TWIN_MARK",
    "ViewerESM",
    "ViewerNotBuilt",
    "viewer_bundle",
    "widget_esm",
]

BUNDLE_PATH = Path(__file__).resolve().parent / "static" / "viewer.js"


class ViewerNotBuilt(RuntimeError):
    """static/viewer.js is missing: the front end has not been built."""


_bundle_cache: dict[str, Any] = {}


def viewer_bundle() -> str:
    """The text of the built viewer (static/viewer.js), read once per file version."""
    try:
        stat = BUNDLE_PATH.stat()
    except FileNotFoundError:
        raise ViewerNotBuilt(
            f"the thunderviz viewer is not built: {BUNDLE_PATH} does not exist. Run "
            "`make frontend` in the thunderviz checkout (it builds frontend/ into that file), "
            "or install a thunderviz wheel, which ships it."
        ) from None
    key = (stat.st_mtime_ns, stat.st_size)
    if _bundle_cache.get("key") != key:
        _bundle_cache["text"] = BUNDLE_PATH.read_text(encoding="utf-8")
        _bundle_cache["key"] = key
    return _bundle_cache["text"]


# The widget's ES module: the viewer bundle, imported from a blob: URL (as the static pages
# of frontend/README.md do), with a render() that first hides this output's static twin:
# the output shown just before the widget (widgets/twin.py), which is only for
# readers without a kernel. The twin is the previous output of the same output area, drawn
# by the thunderviz extension (the view MIME) or, without it, as our marked SVG or text.
_ESM_TEMPLATE = """\
// thunderviz widget module (thunderviz/widgets/esm.py): static/viewer.js + twin hiding.
const BUNDLE = __BUNDLE__;
const viewer = await import(URL.createObjectURL(new Blob([BUNDLE], { type: "text/javascript" })));
const MARK = __MARK__;
const TEXT_MARK = __TEXT_MARK__;

function isTwin(child) {
  if (!child || !child.classList || !child.classList.contains("jp-OutputArea-child")) return false;
  if (child.querySelector(".tv-jl-renderer")) return true;  // the extension drew the view MIME
  for (const img of child.querySelectorAll("img")) {  // the marked SVG, drawn as an image
    if ((img.getAttribute("src") || "").includes(MARK)) return true;
  }
  for (const svg of child.querySelectorAll("svg")) {  // ... or inline
    for (const node of svg.childNodes) {
      if (node.nodeType === 8 && node.data.includes(MARK)) return true;
    }
  }
  const out = child.querySelector(".jp-OutputArea-output");
  return Boolean(out) && out.textContent.trim().startsWith(TEXT_MARK);  // the text fallback
}

function hideTwin(el) {
  // The twin may not be drawn yet when the widget renders (the extension loads its viewer
  // on first use) and the widget's element may not be in the page yet: look again for 5 s.
  let undo = () => {};
  let stopped = false;
  const attempt = (triesLeft) => {
    if (stopped) return;
    const child = el.closest ? el.closest(".jp-OutputArea-child") : null;
    const twin = child ? child.previousElementSibling : null;
    if (isTwin(twin)) {
      const before = twin.style.display;
      twin.style.display = "none";
      twin.setAttribute("data-tv-twin-hidden", "true");
      undo = () => { twin.style.display = before; twin.removeAttribute("data-tv-twin-hidden"); };
    } else if (triesLeft > 0) {
      setTimeout(() => attempt(triesLeft - 1), 200);
    }
  };
  attempt(25);
  return () => { stopped = true; undo(); };
}

export function render(ctx) {
  let restore = () => {};
  try { restore = hideTwin(ctx.el); } catch (e) { /* never let hiding break the view */ }
  const cleanup = viewer.render(ctx);
  return () => { if (typeof cleanup === "function") cleanup(); restore(); };
}
export default { render };
"""
# Marks the static twin's SVG (a comment) and text, so the widget can tell it from a user's.
TWIN_MARK = "thunderviz-static-view"
TEXT_MARK = "<thunderviz view:"


def widget_esm() -> str:
    """The `_esm` source of DebuggerWidget (the bundle inside; see _ESM_TEMPLATE)."""
    bundle = viewer_bundle()
    cached = _bundle_cache.get("esm")
    if cached is not None and cached[0] == _bundle_cache["key"]:
        return cached[1]
    text = (
        _ESM_TEMPLATE.replace("__MARK__", json.dumps(TWIN_MARK))
        .replace("__TEXT_MARK__", json.dumps(TEXT_MARK))
        .replace("__BUNDLE__", json.dumps(bundle))
    )  # last: the bundle is not searched
    _bundle_cache["esm"] = (_bundle_cache["key"], text)
    return text


class ViewerESM:
    """`DebuggerWidget._esm`: read when a widget is made (so importing thunderviz works
    without a built viewer, and making a widget says how to build it)."""

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return widget_esm()
