"""Messages from the viewer to the widget, and their answers.

The viewer sends `{type: "step", action, target?}` (its step buttons),
`{type: "breakpoints", breakpoints}` (its breakpoint panel), `{type: "intervene", target,
edit}` and `{type: "clear_interventions"}` (its debugging tab). Each runs the widget's own
Python method; an error goes back as `{type: "error", text}` (and `w.last_error`), never as
a traceback in the kernel. `{type: "message", text}` shows text in the viewer's bar.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

__all__ = ["STEP_ACTIONS", "Commands", "handle_message"]

STEP_ACTIONS = ("step", "step_over", "continue", "back", "reset", "run_to")


class Commands(Protocol):
    """What the messages run (DebuggerWidget's methods)."""

    last_error: BaseException | None

    def step(self) -> Any: ...
    def step_over(self) -> Any: ...
    def continue_(self) -> Any: ...
    def back(self) -> Any: ...
    def reset(self) -> Any: ...
    def run_to(self, target: Any) -> Any: ...
    def set_breakpoints(self, spec: Mapping[str, Any]) -> Any: ...
    def intervene(self, target: Any, fn: Any) -> Any: ...
    def clear_interventions(self) -> Any: ...
    def error(self, text: str) -> None: ...


def _step(w: Commands, content: Mapping[str, Any]) -> None:
    action = content.get("action")
    if action not in STEP_ACTIONS:
        raise ValueError(f"unknown step action {action!r}")
    if action == "run_to":
        target = content.get("target") or ""
        if not target:
            raise ValueError("select an op, tensor or module to run to")
        w.run_to(target)
        return
    {
        "step": w.step,
        "step_over": w.step_over,
        "continue": w.continue_,
        "back": w.back,
        "reset": w.reset,
    }[action]()


def _breakpoints(w: Commands, content: Mapping[str, Any]) -> None:
    spec = content.get("breakpoints")
    w.set_breakpoints(spec if isinstance(spec, Mapping) else {})


def _intervene(w: Commands, content: Mapping[str, Any]) -> None:
    edit = content.get("edit")  # "zero" or [kind, *numbers] (see debug/interventions.py)
    target = content.get("target") or ""
    if not target:
        raise ValueError(
            "select a backward op, a forward op, a module or a tensor to edit its gradient"
        )
    w.intervene(target, tuple(edit) if isinstance(edit, list) else edit)


_HANDLERS = {
    "step": _step,
    "breakpoints": _breakpoints,
    "intervene": _intervene,
    "clear_interventions": lambda w, _content: w.clear_interventions(),
}


def handle_message(w: Commands, content: Any) -> None:
    """Run what a viewer message asks; other messages are ignored."""
    if not isinstance(content, Mapping):
        return
    kind = content.get("type")
    handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
    if handler is None:
        return
    try:
        handler(w, content)
    except Exception as e:  # reported in the viewer; the kernel keeps running
        w.last_error = e
        w.error(f"{type(e).__name__}: {e}")
