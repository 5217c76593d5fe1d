"""Where a recorded call came from, in words: the user's line and the module path, for the
messages of errors raised while tracing or differentiating it."""

from __future__ import annotations

from thunderviz.core.symbol import SourceLocation

__all__ = ["where"]


def where(source: SourceLocation | None, module_path: str) -> str:
    parts = []
    if source is not None:
        parts.append(f"{source.filename}:{source.lineno} ({source.code!r})")
    if module_path:
        parts.append(f"in module '{module_path}'")
    return " ".join(parts) or "at an unknown location"
