"""Finding the user's frame: the first frame outside torch and thunderviz."""

from __future__ import annotations

import linecache
import os
import sys
from types import CodeType

import torch

from thunderviz.core.symbol import SourceLocation

__all__ = ["user_source"]

# torch's package folder and thunderviz's machinery (its subpackages): calls made from there
# are not the user's. Top-level modules such as thunderviz/models.py are user-level code.
_THUNDERVIZ_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INTERNAL_DIRS = (
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
    *(
        os.path.join(_THUNDERVIZ_DIR, d) + os.sep
        for d in sorted(os.listdir(_THUNDERVIZ_DIR))
        if os.path.isfile(os.path.join(_THUNDERVIZ_DIR, d, "__init__.py"))
    ),
)
_is_internal: dict[CodeType, bool] = {}


def _internal(code: CodeType) -> bool:
    known = _is_internal.get(code)
    if known is None:
        fname = code.co_filename
        known = fname.startswith(_INTERNAL_DIRS) or fname.startswith("<frozen")
        _is_internal[code] = known
    return known


def user_source(skip: int = 1) -> SourceLocation | None:
    """The SourceLocation of the innermost user frame on the stack, or None."""
    frame = sys._getframe(skip)
    while frame is not None and _internal(frame.f_code):
        frame = frame.f_back
    if frame is None:
        return None
    code = frame.f_code
    line = linecache.getline(code.co_filename, frame.f_lineno).strip()
    return SourceLocation(code.co_filename, frame.f_lineno, line, code.co_name)
