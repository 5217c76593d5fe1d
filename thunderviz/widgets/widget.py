"""The Jupyter debugger widget: the one browser viewer (static/viewer.js) bound to a Session.

`DebuggerWidget(session)` shows a session's view document (forward / augmented forward /
backward graphs, trace text, saved tensors, recorded transforms) and drives the session's
`BackwardStepper` with real values: `w.step()`, `w.continue_()`, ... and the viewer's step
buttons (messages `{type: "step", action}`) run the same code and push the executed steps
to the browser.

Selection works both ways. The browser writes an id (`"forward:3"`, a tensor name,
`"module:fc1"`) into the synced state key `selected`; in Python that key is the trait
`selected_id`, and `w.selected` is the real object it names: a `BoundSymbol`, a `Proxy` or
an `nn.Module` (for a widget made from a bare document, the document's own entry).
`w.select(obj)` and `w.highlight(*objs)` go the other way.

Outputs carry a static fallback beside the widget view (`_repr_mimebundle_`): the view
document under `application/vnd.thunderviz.view+json` and a Graphviz picture as
`image/svg+xml`, so a notebook read without a kernel still shows the debugger.
"""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import anywidget
import torch
import traitlets
from IPython import get_ipython
from IPython.display import display
from ipywidgets.widgets.widget import JUPYTER_WIDGETS_ECHO, _remove_buffers

from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.proxies import Proxy, TensorProxy
from thunderviz.core.symbol import BoundSymbol
from thunderviz.core.trace import Trace
from thunderviz.debug.interpret import StepError
from thunderviz.debug.session import Session
from thunderviz.debug.stepper import BackwardStepper, StepRecord, module_within
from thunderviz.viz.document import build_document
from thunderviz.viz.protocol import (
    MODULE_PREFIX,
    VIEW_MIME,
    module_id,
    module_path_of,
    op_id,
    parse_op_id,
)
from thunderviz.viz.static import static_svg
from thunderviz.viz.tvz import validate

__all__ = ["DebuggerWidget", "ViewerNotBuilt", "VIEW_MIME", "BUNDLE_PATH", "viewer_bundle"]

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
BUNDLE_PATH = Path(__file__).resolve().parent / "static" / "viewer.js"

# Python trait name -> the key the viewer reads and writes (frontend/README.md, "Traits").
# `w.selected` and `w.highlight` are Python API (the selected object; a method), so the raw
# ids live in traits of other names and travel under the viewer's names.
_WIRE = {"selected_id": "selected", "highlight_ids": "highlight"}
_PY = {wire: name for name, wire in _WIRE.items()}

_STEP_ACTIONS = ("step", "step_over", "continue", "back", "reset", "run_to")


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
# the output `_ipython_display_` shows just before the widget (see there), which is only for
# readers without a kernel. The twin is the previous output of the same output area, drawn
# by the thunderviz extension (the view MIME) or, without it, as our marked SVG or text.
_ESM_TEMPLATE = """\
// thunderviz widget module (thunderviz/widgets/widget.py): static/viewer.js + twin hiding.
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


class _ViewerESM:
    """`DebuggerWidget._esm`: read when a widget is made (so importing thunderviz works
    without a built viewer, and making a widget says how to build it)."""

    def __get__(self, obj: Any, owner: type | None = None) -> Any:
        if obj is None:
            return self
        return widget_esm()


def is_steppable(session: Session | None) -> bool:
    return session is not None and session.result is not None and not session.fake


def default_cotangents(session: Session) -> bool:
    """Give a session whose program returns non-scalar outputs (and no cotangents) ones as
    cotangents, as `out.sum().backward()` would; returns whether it did. Without this, its
    stepper would refuse to start."""
    result = session.result
    if result is None or session.cotangents is not None:
        return False
    outs = result.cotangent_outputs
    if all(isinstance(p, TensorProxy) and math.prod(p.shape) == 1 for p in outs):
        return False
    if not all(isinstance(p, TensorProxy) for p in outs):
        return False
    session.cotangents = [torch.ones(p.shape, dtype=p.dtype, device=p.device) for p in outs]
    return True


class DebuggerWidget(anywidget.AnyWidget):
    """The thunderviz debugger in a notebook: a Session (or a view document) in the viewer.

    DebuggerWidget(session | document | Trace | AutodiffResult, *, live=None, record=True,
                   tab="", selected=None, expanded=())

    live: a kernel drives stepping (default: whenever the session has real values and a
        backward). With live=False the viewer steps through the document's recorded steps.
    record: run the whole backward once first (`Session.record_backward`), so the document,
        the static fallback and an exported page carry every step's statistics and the
        gradient-flow overlay.
    """

    _esm = _ViewerESM()

    document = traitlets.Dict().tag(sync=True)
    selected_id = traitlets.Unicode("").tag(sync=True)  # synced as "selected"
    highlight_ids = traitlets.List(traitlets.Unicode()).tag(sync=True)  # synced as "highlight"
    current_step = traitlets.Int(-1).tag(sync=True)
    steps = traitlets.List().tag(sync=True)
    tab = traitlets.Unicode("").tag(sync=True)
    expanded = traitlets.List(traitlets.Unicode()).tag(sync=True)
    live = traitlets.Bool(False).tag(sync=True)

    def __init__(
        self,
        source: Any,
        *,
        live: bool | None = None,
        record: bool = True,
        tab: str = "",
        selected: Any = None,
        expanded: Iterable[str] = (),
        **kwargs: Any,
    ) -> None:
        self._session: Session | None = None
        self._stepper: BackwardStepper | None = None
        self._svg: str | None | bool = False  # False: not made yet; None: could not be made
        self._index_cache: dict[str, Any] | None = None
        self._json_cache: dict[int, tuple[int, dict[str, Any]]] = {}
        self.problems: list[str] = []  # what did not work while setting up (shown as messages)
        self.last_error: BaseException | None = None  # the last error a browser action hit
        self.cotangents_defaulted = False
        if isinstance(source, DebuggerWidget):
            raise TypeError(
                "this is a DebuggerWidget already; display it, or pass its .session or .document"
            )
        if isinstance(source, Session):
            self._session = source
            document = self._session_document(source, record)
        elif isinstance(source, Mapping):
            document = validate(dict(source))
        elif isinstance(source, (Trace, AutodiffResult)):
            document = build_document(source)
        else:
            raise TypeError(
                "DebuggerWidget shows a thunderviz Session, a view document (dict), "
                f"a Trace or an AutodiffResult, not {type(source).__name__}; for a "
                "function or module use thunderviz.show(fn, *inputs)"
            )
        if live is None:
            live = is_steppable(self._session)
        elif live and not is_steppable(self._session):
            raise ValueError(
                "live=True needs a Session with real values and a backward "
                "(not fake=True, not backward=False, not a bare document)"
            )
        super().__init__(
            document=document, live=bool(live), tab=tab, expanded=list(expanded), **kwargs
        )
        if selected is not None:
            self.select(selected)
        self.on_msg(self._handle_message)

    def _session_document(self, session: Session, record: bool) -> dict[str, Any]:
        if is_steppable(session):
            self.cotangents_defaulted = default_cotangents(session)
            if self.cotangents_defaulted:
                self._problem(
                    "the program returns a non-scalar output: the backward starts from ones "
                    "(like out.sum().backward()); pass cotangents=... to choose"
                )
            if record and not session.steps:
                try:
                    session.record_backward()
                except (StepError, ValueError, RuntimeError) as e:
                    self._problem(f"recording the backward failed: {e}")
        return session.document()

    def _problem(self, text: str) -> None:
        self.problems.append(text)
        warnings.warn(f"thunderviz: {text}", stacklevel=4)

    # --- the synced names (selected_id <-> "selected", highlight_ids <-> "highlight") ------
    def get_state(self, key: Any = None, drop_defaults: bool = False) -> dict[str, Any]:
        if isinstance(key, str):
            key = _PY.get(key, key)
        elif key is not None:
            key = [_PY.get(k, k) for k in key]
        state = super().get_state(key=key, drop_defaults=drop_defaults)
        return {_WIRE.get(k, k): v for k, v in state.items()}

    def send_state(self, key: Any = None) -> None:
        state = self.get_state(key=key)
        if not state:
            return
        if self._property_lock:  # keep the lock in step with what the front end now has
            for wire, value in state.items():
                name = _PY.get(wire, wire)
                if name in self._property_lock:
                    self._property_lock[name] = value
        state, buffer_paths, buffers = _remove_buffers(state)
        self._send(
            {"method": "update", "state": state, "buffer_paths": buffer_paths}, buffers=buffers
        )

    def set_state(self, sync_data: dict[str, Any]) -> None:
        data = {_PY.get(k, k): v for k, v in sync_data.items()}
        if JUPYTER_WIDGETS_ECHO:
            echo = {
                _WIRE.get(k, k): v
                for k, v in data.items()
                if k in self.keys and self.trait_metadata(k, "echo_update", default=True)
            }
            if echo:
                echo, paths, buffers = _remove_buffers(echo)
                self._send(
                    {"method": "echo_update", "state": echo, "buffer_paths": paths}, buffers=buffers
                )
        with self._lock_property(**data), self.hold_trait_notifications():
            for name, value in data.items():
                if name in self.keys:
                    from_json = self.trait_metadata(name, "from_json", self._trait_from_json)
                    self.set_trait(name, from_json(value, self))

    # --- what is shown -------------------------------------------------------------------
    @property
    def session(self) -> Session | None:
        """The Session this widget shows (None for a widget made from a document)."""
        return self._session

    @property
    def stepper(self) -> BackwardStepper:
        """The session's BackwardStepper (real values) that the step buttons drive. On first
        use it breaks on NaN/Inf, as the viewer's "NaN/Inf" box is ticked by default."""
        if self._stepper is None:
            if not is_steppable(self._session):
                raise RuntimeError(
                    "this widget cannot step the backward: it shows "
                    + (
                        "a document without a Session"
                        if self._session is None
                        else "a Session made with fake=True or backward=False"
                    )
                    + "; make it with thunderviz.show(model, *inputs)"
                )
            self._stepper = self._session.stepper
            self._stepper.break_on_nan(True)
        return self._stepper

    def _index(self) -> dict[str, Any]:
        """Ids the document knows (ops, tensors, modules) and Python objects by id."""
        if self._index_cache is not None:
            return self._index_cache
        doc = self.document
        ops: dict[str, dict[str, Any]] = {}
        tensors: dict[str, dict[str, Any]] = {}
        modules: set[str] = set()
        for kind, tv in (doc.get("traces") or {}).items():
            for op in tv.get("ops", []):
                ops[op["id"]] = op
                path = op.get("module_path") or ""
                while path:
                    modules.add(path)
                    path = path.rpartition(".")[0]
            for name, t in (tv.get("tensors") or {}).items():
                tensors.setdefault(name, {**t, "trace": kind})
        for run in doc.get("transforms") or []:
            for op in (run.get("trace_before") or {}).get("ops", []):
                ops.setdefault(op["id"], op)
        bsym_ids: dict[int, str] = {}
        proxies: dict[str, Proxy] = {}
        traces = self._traces()
        for kind, tr in traces.items():
            for i, b in enumerate(tr.bound_symbols):
                _walk_ids(b, kind, (i,), bsym_ids)
            for p in tr.flat_args:
                if isinstance(p, Proxy):
                    proxies.setdefault(p.name, p)
            for b in tr.walk():
                for p in (*b.flat_proxy_outs, *b.flat_proxy_args):
                    proxies.setdefault(p.name, p)
        self._index_cache = {
            "ops": ops,
            "tensors": tensors,
            "modules": modules,
            "bsym_ids": bsym_ids,
            "proxies": proxies,
            "traces": traces,
        }
        return self._index_cache

    def _traces(self) -> dict[str, Trace]:
        s = self._session
        if s is None:
            return {}
        traces: dict[str, Trace] = {"forward": s.forward}
        if s.result is not None:
            traces["augmented_forward"] = s.result.augmented_forward
            traces["backward"] = s.result.backward
        for k, run in enumerate(s.transform_runs):
            if not any(run.before is t for t in traces.values()):
                traces[f"transform{k}"] = run.before
        return traces

    @traitlets.observe("document")
    def _document_changed(self, change: Any) -> None:
        self._index_cache = None
        self._svg = False

    # --- selection -----------------------------------------------------------------------
    @property
    def selected(self) -> Any:
        """What is selected in the browser, as the real object: a BoundSymbol (an op), a
        Proxy (a tensor), an nn.Module (a module; its path when the program is a function),
        or None. Widgets made from a document give the document's op / tensor entry."""
        return self.resolve(self.selected_id)

    @selected.setter
    def selected(self, value: Any) -> None:
        self.select(value)

    def resolve(self, ident: str) -> Any:
        """The object an id of the viewer names (see `selected`); None if it names nothing."""
        if not ident:
            return None
        ix = self._index()
        s = self._session
        path = module_path_of(ident)
        if path is not None:
            if s is not None and isinstance(s.fn, torch.nn.Module):
                try:
                    return s.fn.get_submodule(path) if path else s.fn
                except AttributeError:
                    pass
            return path if path in ix["modules"] or path == "" else None
        if ident in ix["ops"]:
            if s is None:
                return ix["ops"][ident]
            bsym = _bsym_at(ix["traces"], ident)
            return bsym if bsym is not None else ix["ops"][ident]
        if ident in ix["proxies"]:
            return ix["proxies"][ident]
        if ident in ix["tensors"]:
            return ix["tensors"][ident]
        return None

    def id_of(self, obj: Any) -> str:
        """The viewer's id for a BoundSymbol, Proxy, nn.Module, StepRecord or id string."""
        if obj is None:
            return ""
        ix = self._index()
        if isinstance(obj, str):
            if obj == "" or obj in ix["ops"] or obj in ix["tensors"] or obj in ix["proxies"]:
                return obj
            path = module_path_of(obj)
            if path is not None and (path in ix["modules"] or path == ""):
                return obj
            raise ValueError(
                f"{obj!r} is not an op id (like 'forward:3'), a tensor name or a "
                "module ('module:<path>') of this view"
            )
        if isinstance(obj, StepRecord):
            return obj.op_id
        if isinstance(obj, BoundSymbol):
            found = ix["bsym_ids"].get(id(obj))
            if found is None:
                raise ValueError(f"{obj!r} is not in this session's traces")
            return found
        if isinstance(obj, Proxy):
            if obj.name not in ix["tensors"] and obj.name not in ix["proxies"]:
                raise ValueError(f"{obj.name!r} is not a tensor of this view")
            return obj.name
        if isinstance(obj, torch.nn.Module):
            root = self._session.fn if self._session is not None else None
            if isinstance(root, torch.nn.Module):
                for path, m in root.named_modules():
                    if m is obj:
                        return module_id(path)
            raise ValueError(f"this {type(obj).__name__} is not a module of the traced model")
        raise TypeError(
            f"cannot select a {type(obj).__name__}: pass a BoundSymbol, a Proxy, "
            "an nn.Module or an id string"
        )

    def select(self, obj: Any) -> None:
        """Select an op (BoundSymbol or id), a tensor (Proxy or name) or a module; None clears."""
        self.selected_id = self.id_of(obj)

    def highlight(self, *objs: Any) -> None:
        """Highlight these ops / tensors / modules (anything `select` takes, or lists of
        them) in every pane; no arguments clears."""
        ids: list[str] = []
        for obj in objs:
            items = obj if isinstance(obj, (list, tuple, set)) else [obj]
            ids.extend(self.id_of(x) for x in items if x is not None)
        self.highlight_ids = list(dict.fromkeys(i for i in ids if i))

    # --- stepping ------------------------------------------------------------------------
    @property
    def history(self) -> list[StepRecord]:
        return list(self.stepper.history)

    @property
    def current(self) -> BoundSymbol | None:
        """The next backward bound symbol to run (None at the end)."""
        return self.stepper.current

    def value(self, obj: Any) -> Any:
        """The stepper's real value of a tensor (Proxy or name) at the current step."""
        name = obj.name if isinstance(obj, Proxy) else str(obj)
        return self.stepper.value(name)

    @property
    def grads(self) -> dict[str, Any]:
        """Gradients per forward argument so far (None where not computed yet)."""
        return self.stepper.grads

    def step(self) -> StepRecord | None:
        """Run the next backward op."""
        return self._after(self.stepper.step())

    def step_over(self) -> StepRecord | None:
        """Run to the first op outside the current op's module."""
        return self._after(self.stepper.step_over())

    def continue_(self) -> StepRecord | None:
        """Run to the next breakpoint (NaN/Inf by default) or the end."""
        return self._after(self.stepper.continue_())

    def back(self) -> StepRecord | None:
        """Undo the last step."""
        return self._after(self.stepper.back())

    def reset(self) -> None:
        """Back to before the first step."""
        self.stepper.reset()
        self._after(None)

    def finish(self) -> StepRecord | None:
        """Run to the end, ignoring breakpoints."""
        return self._after(self.stepper.finish())

    def run_to(self, target: Any) -> StepRecord | None:
        """Run until `target` has run: a backward op (BoundSymbol, index, id), a forward op
        (its first backward step), an augmented-forward op (its forward op), a tensor (the
        op that produces it) or a module (the first step inside it)."""
        st = self.stepper
        if isinstance(target, (BoundSymbol, int)) and not isinstance(target, bool):
            return self._after(st.run_to(target))
        ident = self.id_of(target)
        path = module_path_of(ident)
        if path is not None:
            return self._after(self._run_to_module(path))
        return self._after(st.run_to(self._steppable_op(ident)))

    def _steppable_op(self, ident: str) -> str:
        """A backward or forward op id for `ident` (an op id or a tensor name)."""
        ix = self._index()
        op = ix["ops"].get(ident)
        if op is None:
            tensor = ix["tensors"].get(ident)
            producer = tensor.get("producer") if tensor else None
            if not producer:
                raise ValueError(f"{ident!r} is an input: no backward step produces it")
            op = ix["ops"].get(producer)
            if op is None:
                raise ValueError(f"the producer of {ident!r} is not in this view")
        kind = op["id"].partition(":")[0]
        if kind in ("backward", "forward"):
            return op["id"]
        if op.get("fwd_op"):
            return op["fwd_op"]
        raise ValueError(f"{op['id']} belongs to no forward op, so no backward step runs it")

    def _run_to_module(self, path: str) -> StepRecord | None:
        st = self.stepper
        last = None
        while not st.done:
            last = st.step()
            if last is None or last.note:  # a breakpoint fired
                return last
            if module_within(last.module_path, path):
                st.stop_reason = f"reached module {path or '(root)'}"
                last.note = st.stop_reason
                return last
        st.stop_reason = "target not reached"
        return last

    def set_breakpoints(self, spec: Mapping[str, Any]) -> list[str]:
        """Replace the breakpoints from the viewer's form {ops, modules, nan_inf,
        grad_norm_above}. Returns the entries it could not use (also sent as a message)."""
        st = self.stepper
        st.clear_breakpoints()
        ignored: list[str] = []
        for op in spec.get("ops") or ():
            try:
                in_module = module_path_of(op) if isinstance(op, str) else None
                if in_module is not None:
                    st.break_on_module(in_module)
                else:
                    st.break_on_op(self._steppable_op(self.id_of(op)))
            except (ValueError, IndexError, TypeError) as e:
                ignored.append(f"{op}: {e}")
        for path in spec.get("modules") or ():
            if isinstance(path, str):
                st.break_on_module(path.removeprefix(MODULE_PREFIX))
        st.break_on_nan(bool(spec.get("nan_inf", False)))
        norm = spec.get("grad_norm_above")
        ok = isinstance(norm, (int, float)) and not isinstance(norm, bool) and math.isfinite(norm)
        st.break_on_grad_norm(norm if ok else None)
        if ignored:
            self.message("breakpoints ignored: " + "; ".join(ignored))
        return ignored

    def _step_json(self, record: StepRecord) -> dict[str, Any]:
        cached = self._json_cache.get(record.index)
        if cached is not None and cached[0] == id(record):
            out = dict(cached[1])
        else:
            out = record.to_json()
            self._json_cache[record.index] = (id(record), out)
            out = dict(out)
        if record.note:
            out["note"] = record.note
        return out

    def _after(self, record: StepRecord | None) -> StepRecord | None:
        """Push the stepper's position to the browser."""
        st = self.stepper
        executed = [self._step_json(r) for r in st.history]
        reason = st.stop_reason
        if executed and reason and not executed[-1].get("note"):
            executed[-1]["note"] = reason
        pending = [
            {"index": i, "op": op_id("backward", i), "outputs": {}, "grads": {}}
            for i in range(len(executed), len(st))
        ]
        with self.hold_sync():
            self.steps = executed + pending
            self.current_step = len(executed) - 1
        if not executed and reason:
            self.message(reason)
        return record

    # --- interventions (debug/interventions.py) -----------------------------------------
    def intervene(self, target: Any, fn: Any, *, seed: int = 0) -> Any:
        """`Session.intervene`, then show it: the document (gradients, gradient flow, the
        list of interventions) and the stepper's recorded steps are redrawn."""
        if self._session is None:
            raise RuntimeError("interventions need a live Session; this widget shows a document")
        iv = self._session.intervene(target, fn, seed=seed)
        self._show_interventions(
            f"{iv.edit.describe()} on {iv.target}: the backward re-ran from step {iv.first_step}"
        )
        return iv

    def clear_interventions(self) -> None:
        if self._session is not None and self._session.interventions:
            self._session.clear_interventions()
            self._show_interventions("interventions cleared")

    def _show_interventions(self, text: str) -> None:
        self._json_cache.clear()
        self._svg = False
        self._index_cache = None
        with self.hold_sync():
            self.document = self._session.document()
        if self._stepper is not None:
            self._after(None)
        self.message(text)

    # --- messages ------------------------------------------------------------------------
    def message(self, text: str) -> None:
        """Show `text` in the viewer's message bar."""
        self.send({"type": "message", "text": str(text)})

    def error(self, text: str) -> None:
        self.send({"type": "error", "text": str(text)})

    def _handle_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        if not isinstance(content, Mapping):
            return
        try:
            kind = content.get("type")
            if kind == "step":
                action = content.get("action")
                if action not in _STEP_ACTIONS:
                    raise ValueError(f"unknown step action {action!r}")
                if action == "run_to":
                    target = content.get("target") or ""
                    if not target:
                        raise ValueError("select an op, tensor or module to run to")
                    self.run_to(target)
                else:
                    {
                        "step": self.step,
                        "step_over": self.step_over,
                        "continue": self.continue_,
                        "back": self.back,
                        "reset": self.reset,
                    }[action]()
            elif kind == "breakpoints":
                spec = content.get("breakpoints")
                self.set_breakpoints(spec if isinstance(spec, Mapping) else {})
            elif kind == "intervene":  # edit: "zero" or [kind, *numbers] (see GradEdit)
                edit = content.get("edit")
                target = content.get("target") or ""
                if not target:
                    raise ValueError(
                        "select a backward op, a forward op, a module or a tensor "
                        "to edit its gradient"
                    )
                self.intervene(target, tuple(edit) if isinstance(edit, list) else edit)
            elif kind == "clear_interventions":
                self.clear_interventions()
        except Exception as e:  # reported in the viewer; the kernel keeps running
            self.last_error = e
            self.error(f"{type(e).__name__}: {e}")

    # --- notebook output -----------------------------------------------------------------
    # A notebook cell shows the widget as two outputs (`_ipython_display_`): first the static
    # twin, then the widget view. JupyterLab prefers the widget view (rank -10) over every
    # other type of a bundle in a trusted notebook, and a notebook the user saved is
    # trusted; reopened later its widget model is gone and JupyterLab prints "Error
    # displaying widget: model not found" instead of any fallback in the same bundle (seen
    # in JupyterLab 4.6 with ipywidgets 8.1). The twin is an output of its own, so it
    # renders then: the thunderviz extension draws the view MIME, elsewhere the SVG. While
    # the kernel runs, the widget's module hides its twin (display: none; nothing is
    # written to the notebook), so the view is not shown twice.
    # False (or THUNDERVIZ_STATIC_TWIN=0): one output, the full `_repr_mimebundle_`. Off in
    # Colab, whose outputs live in separate frames (the widget could not hide its twin).
    static_twin = os.environ.get("THUNDERVIZ_STATIC_TWIN", "1") != "0"

    def static_svg(self) -> str | None:
        """The static picture of the forward (Graphviz `dot`); None if dot is missing."""
        if self._svg is False:
            try:
                svg = static_svg(self.document, _first_trace(self.document))
                self._svg = _mark_svg(svg)
            except (RuntimeError, ValueError, OSError):
                self._svg = None
        return self._svg  # type: ignore[return-value]

    def _text(self) -> str:
        doc = self.document
        parts = [
            f"{kind.replace('_', ' ')}: "
            f"{sum(1 for o in tv.get('ops', []) if o.get('parent') is None)} ops"
            for kind, tv in (doc.get("traces") or {}).items()
        ]
        return f"{TEXT_MARK} {doc.get('title') or 'thunderviz'} ({'; '.join(parts)})>"

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The widget view, plus a static fallback for where no kernel runs the widget: the
        view document (the thunderviz JupyterLab extension draws it interactively), a
        Graphviz SVG and text."""
        bundle = super()._repr_mimebundle_(**kwargs)
        if bundle is None:
            return None
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        data = dict(data)
        data.update(self.static_bundle())
        return data, metadata

    def static_bundle(self) -> dict[str, Any]:
        """The fallback alone (no widget view): the static twin's output."""
        data: dict[str, Any] = {VIEW_MIME: self.document}
        svg = self.static_svg()
        if svg:
            data["image/svg+xml"] = svg
        data["text/plain"] = self._text()
        return data

    def widget_bundle(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The widget view alone, with text for readers that cannot show widgets."""
        bundle = super()._repr_mimebundle_()
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        return (
            {
                WIDGET_MIME: data[WIDGET_MIME],
                "text/plain": "<thunderviz debugger: live view (run the cell to use it)>",
            },
            metadata,
        )

    def _ipython_display_(self, **kwargs: Any) -> None:
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
        return self._text()


def _mark_svg(svg: str) -> str:
    """The SVG with a comment that tells the widget's module it is our static twin."""
    at = svg.find("<svg")
    return svg if at < 0 else f"{svg[:at]}<!-- {TWIN_MARK} -->\n{svg[at:]}"


def _first_trace(doc: Mapping[str, Any]) -> str:
    traces = doc.get("traces") or {}
    return "forward" if "forward" in traces else next(iter(traces))


def _walk_ids(bsym: BoundSymbol, kind: str, path: tuple[int, ...], out: dict[int, str]) -> None:
    out.setdefault(id(bsym), op_id(kind, *path))
    for j, sub in enumerate(bsym.subsymbols):
        _walk_ids(sub, kind, (*path, j), out)


def _bsym_at(traces: Mapping[str, Trace], ident: str) -> BoundSymbol | None:
    parsed = parse_op_id(ident)
    tr = traces.get(parsed[0]) if parsed is not None else None
    if tr is None:
        return None
    indices = parsed[1]
    items = tr.bound_symbols
    bsym = None
    for i in indices:
        if not 0 <= i < len(items):
            return None
        bsym = items[i]
        items = bsym.subsymbols
    return bsym
