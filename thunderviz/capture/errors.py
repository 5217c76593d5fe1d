"""Errors a user can hit while tracing: what went wrong, where, and what to do."""

from __future__ import annotations

from thunderviz.core.symbol import SourceLocation

__all__ = ["CaptureError"]


class CaptureError(RuntimeError):
    """Tracing failed. The message names the op, the user's line, the module and a way out."""

    def __init__(
        self,
        message: str,
        *,
        op: str = "",
        source: SourceLocation | None = None,
        module_path: str = "",
    ) -> None:
        super().__init__(message)
        self.op = op
        self.source = source
        self.module_path = module_path
