"""`thunderviz.show(...)`: the debugger for whatever you have.

    show(model, x, y)            # trace, differentiate, step: a live debugger
    show(session)                # a Session you made
    show(jitted)                 # a thunderviz.jit function after a call: its last traces
    show(jitted, x)              # ... or traced again on x, with stepping
    show(document)               # a view document (dict)
    show("run.tvz")              # a saved .tvz file (static: steps through what was recorded)
    show(a, b)                   # two runs side by side (Sessions, .tvz paths, documents)
    show(["r0.tvz", "r1.tvz"])   # the ranks of a distributed run side by side

The result is a `DebuggerWidget`; a notebook shows it when it is a cell's last value.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.trace import Trace
from thunderviz.debug.session import Session
from thunderviz.executor.jit import JittedFunction
from thunderviz.viz.tvz import document_of as view_document_of
from thunderviz.viz.tvz import load, validate
from thunderviz.widgets.sidebyside import is_side_by_side, side_by_side_document
from thunderviz.widgets.widget import DebuggerWidget

__all__ = ["show", "make_session", "document_of"]

# Keyword arguments of show() that are the widget's, not the traced program's.
_WIDGET_OPTIONS = ("live", "record", "tab", "selected", "expanded")


def _split(kwargs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    widget = {k: kwargs.pop(k) for k in _WIDGET_OPTIONS if k in kwargs}
    return widget, kwargs


def make_session(
    obj: Any,
    args: tuple[Any, ...] = (),
    kwargs: Mapping[str, Any] | None = None,
    **session_options: Any,
) -> Session | None:
    """The Session to show for `obj` called on `args` / `kwargs`: a new one for a function
    or module (or a thunderviz.jit function given inputs), `obj` itself for a Session, None
    when `obj` is a view already (a document, a .tvz path, a Trace, a jit function's last
    traces). `session_options` (fake, backward, depth, ...) go to a new Session."""
    kwargs = dict(kwargs or {})
    if isinstance(obj, Session):
        if args or kwargs:
            raise TypeError("a Session takes no inputs: it has traced its program already")
        return obj
    if isinstance(obj, JittedFunction):
        if not args and not kwargs:
            return None
        return Session(obj.fn, *args, **session_options, **kwargs)
    if isinstance(obj, (Mapping, Trace, AutodiffResult, str, os.PathLike)):
        if args or kwargs:
            raise TypeError(f"a saved view ({type(obj).__name__}) takes no inputs")
        return None
    if callable(obj):
        return Session(obj, *args, **session_options, **kwargs)
    raise TypeError(
        f"thunderviz cannot show a {type(obj).__name__}: pass a function or "
        "nn.Module with its inputs, a Session, a thunderviz.jit function, a view "
        "document or a .tvz path"
    )


def document_of(obj: Any) -> dict[str, Any]:
    """The view document of something that is not a live program."""
    if isinstance(obj, Mapping):
        return validate(dict(obj))
    if isinstance(obj, (JittedFunction, Trace, AutodiffResult)):
        return view_document_of(obj)
    if isinstance(obj, (str, os.PathLike)):
        path = Path(obj)
        if not path.exists():
            raise FileNotFoundError(f"no such .tvz file: {path}")
        return load(path)
    raise TypeError(f"not a view: {type(obj).__name__}")


def show(
    obj: Any, *args: Any, fake: bool = False, backward: bool = True, depth: int = 1, **kwargs: Any
) -> DebuggerWidget:
    """The debugger widget for `obj` (see the module docstring).

    fake / backward / depth go to the Session (`thunderviz.debug.Session`); `live`,
    `record`, `tab`, `selected`, `expanded` to the widget; every other keyword argument is
    an input of the program. A widget made from a document or a .tvz file is static
    (`live=False`): its step buttons move through the recorded steps.
    """
    widget_options, program_kwargs = _split(dict(kwargs))
    if args and not program_kwargs and is_side_by_side((obj, *args)):
        obj, args = (obj, *args), ()  # show(a, b): two runs (a tuple is runs, a list ranks)
    if is_side_by_side(obj) and not args and not program_kwargs:
        widget_options.pop("record", None)
        return DebuggerWidget(side_by_side_document(obj), **{**widget_options, "live": False})
    if isinstance(obj, DebuggerWidget):
        if args or program_kwargs:
            raise TypeError("show(widget) takes no inputs")
        return obj
    session = make_session(obj, args, program_kwargs, fake=fake, backward=backward, depth=depth)
    if session is not None:
        return DebuggerWidget(session, **widget_options)
    widget_options.pop("record", None)
    if widget_options.get("live"):
        raise ValueError("live=True needs a program and its inputs, not a saved view")
    widget_options["live"] = False
    return DebuggerWidget(document_of(obj), **widget_options)
