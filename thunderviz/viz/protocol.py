"""The viewer protocol, Python side: the ids, MIME type and default limits the browser
viewer shares with Python. Its twin is `frontend/src/protocol.js`; `tests/viz/test_protocol.py`
checks that the two hold the same values.

Ids: an op is `"<trace kind>:<index path>"` (`"forward:3"`, `"backward:7.0.2"`: the third
subsymbol of the first subsymbol of backward op 7), a module is `"module:<path>"`
(`"module:"` is the root), a tensor is its name.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "VIEW_MIME",
    "MODULE_PREFIX",
    "DEFAULT_LIMITS",
    "op_id",
    "parse_op_id",
    "trace_kind_of",
    "module_id",
    "module_path_of",
]

VIEW_MIME = "application/vnd.thunderviz.view+json"
MODULE_PREFIX = "module:"

# How much of a graph is drawn (names as in the viewer): the default view opens module
# depths while at most `collapseAbove` nodes show; never more than `maxNodes` nodes; more
# graph inputs than `maxInputNodes` are one "inputs (n)" node; outputs from more than
# `maxOutputSources` nodes get no "return" node.
DEFAULT_LIMITS: Mapping[str, int] = MappingProxyType(
    {"collapseAbove": 40, "maxNodes": 2000, "maxInputNodes": 30, "maxOutputSources": 8}
)


def op_id(trace_kind: str, *path: int) -> str:
    """The id of the bound symbol at index `path` (top level first) of a trace."""
    return f"{trace_kind}:{'.'.join(map(str, path))}"


def parse_op_id(ident: str) -> tuple[str, tuple[int, ...]] | None:
    """(trace kind, index path) of an op id; None if `ident` is not one (an index is plain
    ASCII digits, as the viewer's `parseOpId` reads it)."""
    kind, colon, path = ident.partition(":")
    if not colon or kind == MODULE_PREFIX[:-1]:
        return None
    parts = path.split(".")
    if not all(p.isascii() and p.isdigit() for p in parts):
        return None
    return kind, tuple(int(p) for p in parts)


def trace_kind_of(ident: str) -> str | None:
    """`"forward:12.0"` -> `"forward"`: what precedes the colon of an id (None without one)."""
    kind, colon, _ = ident.partition(":")
    return kind if colon and kind else None


def module_id(path: str) -> str:
    return MODULE_PREFIX + path


def module_path_of(ident: str) -> str | None:
    """The module path a `"module:<path>"` id names; None for any other id."""
    return ident[len(MODULE_PREFIX) :] if ident.startswith(MODULE_PREFIX) else None
