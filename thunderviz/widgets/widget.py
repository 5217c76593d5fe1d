"""The Jupyter debugger widget: the one browser viewer (static/viewer.js) bound to a Session.

`DebuggerWidget(session)` shows a session's view document (forward / augmented forward /
backward graphs, trace text, saved tensors, recorded transforms) and drives the session's
`BackwardStepper` with real values: `w.step()`, `w.continue_()`, ... and the viewer's step
buttons (messages `{type: "step", action}`) run the same code and push the executed steps
to the browser.

Selection works both ways. The browser writes an id (`"forward:3"`, a tensor name,
`"module:fc1"`) into the synced trait `selected`; in Python `w.selected` is the real object
it names: a `BoundSymbol`, a `Proxy` or an `nn.Module` (for a widget made from a bare
document, the document's own entry), and `w.selected_id` its id. `w.select(obj)` and
`w.highlight = [objs]` go the other way.

The parts: widgets/selection.py (ids <-> objects), stepping.py (stepping commands and the
`steps` trait), messages.py (the viewer's messages), twin.py (the static fallback outputs),
esm.py (the widget's module: the built viewer).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import anywidget
import traitlets

from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.proxies import Proxy
from thunderviz.core.symbol import BoundSymbol
from thunderviz.core.trace import Trace
from thunderviz.debug.session import Session
from thunderviz.debug.stepper import BackwardStepper, StepRecord
from thunderviz.viz.document import build_document
from thunderviz.viz.protocol import VIEW_MIME
from thunderviz.viz.tvz import validate
from thunderviz.widgets import stepping
from thunderviz.widgets.esm import BUNDLE_PATH, ViewerESM, ViewerNotBuilt, viewer_bundle
from thunderviz.widgets.messages import handle_message
from thunderviz.widgets.selection import SelectedTrait, Selection, ViewIndex, WireId
from thunderviz.widgets.stepping import StepsView, is_steppable
from thunderviz.widgets.twin import WIDGET_MIME, StaticTwin, TwinOutputs

__all__ = [
    "BUNDLE_PATH",
    "VIEW_MIME",
    "WIDGET_MIME",
    "DebuggerWidget",
    "ViewerNotBuilt",
    "viewer_bundle",
]


class DebuggerWidget(TwinOutputs, anywidget.AnyWidget):
    """The thunderviz debugger in a notebook: a Session (or a view document) in the viewer.

    DebuggerWidget(session | document | Trace | AutodiffResult, *, live=None, record=True,
                   tab="", selected=None, expanded=())

    live: a kernel drives stepping (default: whenever the session has real values and a
        backward). With live=False the viewer steps through the document's recorded steps.
    record: run the whole backward once first (`Session.record_backward`), so the document,
        the static fallback and an exported page carry every step's statistics and the
        gradient-flow overlay.

    Its notebook outputs (a static twin beside the widget view) come from `TwinOutputs`.
    """

    _esm = ViewerESM()

    # The viewer's traits (frontend/src/model.js), under its names. `selected` holds the
    # object and travels as its id (selection.py); `highlight` holds ids.
    document = traitlets.Dict().tag(sync=True)
    selected = SelectedTrait().tag(
        sync=True, to_json=Selection.to_json, from_json=Selection.from_json
    )
    highlight = traitlets.List().tag(
        sync=True, from_json=lambda ids, _w: [WireId(i) for i in ids or ()]
    )
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
        self._view: ViewIndex | None = None
        self._selection = Selection()
        self._steps_view = StepsView()
        self._twin = StaticTwin()
        self.problems: list[str] = []  # what did not work while setting up (shown as messages)
        self.last_error: BaseException | None = None  # the last error a browser action hit
        self.cotangents_defaulted = False
        if isinstance(source, DebuggerWidget):
            raise TypeError(
                "this is a DebuggerWidget already; display it, or pass its .session or .document"
            )
        if isinstance(source, Session):
            self._session = source
            self.cotangents_defaulted = stepping.prepare_session(source, record, self._problem)
            document = source.document()
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

    def _handle_message(self, _widget: Any, content: Any, _buffers: Any) -> None:
        handle_message(self, content)

    def _problem(self, text: str) -> None:
        self.problems.append(text)
        warnings.warn(f"thunderviz: {text}", stacklevel=4)

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
            self._stepper = stepping.live_stepper(self._session)
        return self._stepper

    def _index(self) -> ViewIndex:
        if self._view is None:
            self._view = ViewIndex(self.document, self._session)
        return self._view

    @traitlets.observe("document")
    def _document_changed(self, change: Any) -> None:
        self._view = None
        self._twin.forget()

    # --- selection (selection.py) --------------------------------------------------------
    @traitlets.validate("selected")
    def _valid_selected(self, proposal: Any) -> Any:
        return self._selection.accept(self._index(), proposal.value)

    @traitlets.validate("highlight")
    def _valid_highlight(self, proposal: Any) -> list[str]:
        return self._index().ids_of(proposal.value)

    @property
    def selected_id(self) -> str:
        """The id of what is selected ("forward:3", "t5", "module:fc1"; "" for nothing)."""
        return self._selection.ident

    def resolve(self, ident: str) -> Any:
        """The object an id of the viewer names (see `selected`); None if it names nothing."""
        return self._index().resolve(ident)

    def id_of(self, obj: Any) -> str:
        """The viewer's id for a BoundSymbol, Proxy, nn.Module, StepRecord or id string."""
        return self._index().id_of(obj)

    def select(self, obj: Any) -> None:
        """Select an op (BoundSymbol or id), a tensor (Proxy or name) or a module; None clears."""
        before = self.selected_id
        self.selected = obj
        if self.selected is None and before and not self.selected_id:
            # an id that named nothing here (so `selected` was None already) is cleared: no
            # trait changed, so the browser is told explicitly
            self.send_state("selected")

    # --- stepping (stepping.py) ----------------------------------------------------------
    @property
    def history(self) -> list[StepRecord]:
        return list(self.stepper.history)

    @property
    def current(self) -> BoundSymbol | None:
        """The next backward bound symbol to run (None at the end)."""
        return self.stepper.current

    def value(self, obj: Any) -> Any:
        """The stepper's real value of a tensor (Proxy or name) at the current step."""
        return self.stepper.value(obj.name if isinstance(obj, Proxy) else str(obj))

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
        return self._after(stepping.run_to(self.stepper, self._index(), target))

    def set_breakpoints(self, spec: Mapping[str, Any]) -> list[str]:
        """Replace the breakpoints from the viewer's form {ops, modules, nan_inf,
        grad_norm_above}. Returns the entries it could not use (also sent as a message)."""
        stepper = self.stepper
        usable, ignored = stepping.viewer_breakpoints(spec, self._index())
        stepper.set_breakpoints(usable)
        if ignored:
            self.message("breakpoints ignored: " + "; ".join(ignored))
        return ignored

    def _after(self, record: StepRecord | None) -> StepRecord | None:
        """Push the stepper's position to the browser."""
        steps, current = self._steps_view.state(self.stepper)
        with self.hold_sync():
            self.steps = steps
            self.current_step = current
        if current < 0 and self.stepper.stop_reason:
            self.message(self.stepper.stop_reason)
        return record

    # --- interventions (debug/interventions.py) -----------------------------------------
    def intervene(self, target: Any, fn: Any, *, seed: int = 0) -> Any:
        """`Session.intervene`, then show it: the document (gradients, gradient flow, the
        list of interventions) and the stepper's recorded steps are redrawn."""
        if self._session is None:
            raise RuntimeError("interventions need a live Session; this widget shows a document")
        iv = self._session.intervene(target, fn, seed=seed)
        self._show_interventions(
            self._session,
            f"{iv.edit.describe()} on {iv.target}: the backward re-ran from step {iv.first_step}",
        )
        return iv

    def clear_interventions(self) -> None:
        if self._session is not None and self._session.interventions:
            self._session.clear_interventions()
            self._show_interventions(self._session, "interventions cleared")

    def _show_interventions(self, session: Session, text: str) -> None:
        self._steps_view.clear()
        with self.hold_sync():
            self.document = session.document()
        if self._stepper is not None:
            self._after(None)
        self.message(text)

    # --- messages to the viewer (messages.py has the ones from it) -----------------------
    def message(self, text: str) -> None:
        """Show `text` in the viewer's message bar."""
        self.send({"type": "message", "text": str(text)})

    def error(self, text: str) -> None:
        self.send({"type": "error", "text": str(text)})
