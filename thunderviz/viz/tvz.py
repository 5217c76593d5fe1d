"""`.tvz` files: a view document as UTF-8 JSON (docs/view-format.md).

Loading reads JSON and nothing else: no pickle, no eval, no code. A file that is not a
thunderviz document, is malformed, or was written by a newer thunderviz is refused with a
`TvzError` that says which.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from thunderviz.autodiff.vjp import AutodiffResult
from thunderviz.core.trace import Trace
from thunderviz.executor.jit import JittedFunction
from thunderviz.viz.document import FORMAT, VERSION, build_document
from thunderviz.viz.files import (
    FileTooLargeError,
    NotARegularFileError,
    read_regular_file,
    write_text_atomic,
)
from thunderviz.viz.schema import SchemaViolation, check_document, json_type

__all__ = [
    "TvzError",
    "save",
    "load",
    "validate",
    "dumps",
    "loads",
    "document_of",
    "MAX_LOAD_BYTES",
]

# The largest .tvz load() reads unless told otherwise (a big model's recorded backward is
# tens of MB; a file far larger is more likely a mistake than a document).
MAX_LOAD_BYTES = 1 << 30

_REQUIRED = ("format", "version", "traces")


class TvzError(ValueError):
    """A .tvz file (or document) that thunderviz will not read, and why."""


def _where(source: str | None) -> str:
    return f"{source}: " if source else ""


def validate(doc: Any, source: str | None = None) -> dict[str, Any]:
    """Check `doc` against the view document's schema (viz/schema.py); returns `doc`.
    Raises TvzError saying where and why. A document that passes is safe for every reader
    (static pictures, the HTML export, the widget, the viewer): every field has its type."""
    at = _where(source)
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TvzError(
            f'{at}not a thunderviz file: expected a JSON object with "format": '
            f'"{FORMAT}"'
            + (
                f', got "format": {doc.get("format")!r}'
                if isinstance(doc, dict) and "format" in doc
                else ""
            )
        )
    for key in _REQUIRED:
        if key not in doc:
            raise TvzError(f"{at}not a valid thunderviz file: missing key {key!r}")
    version = doc["version"]
    if json_type(version) != "integer" or version < 1:
        raise TvzError(
            f'{at}not a valid thunderviz file: "version" must be a positive integer, '
            f"got {version!r}"
        )
    if version > VERSION:
        raise TvzError(
            f"{at}this file was written by a newer thunderviz (format version "
            f"{version}); this thunderviz reads format version {VERSION}. "
            "Upgrade thunderviz (pip install -U thunderviz) to open it."
        )
    traces = doc["traces"]
    if not isinstance(traces, dict) or not traces:
        raise TvzError(
            f'{at}not a valid thunderviz file: "traces" must be a non-empty object '
            "(at least one trace)"
        )
    try:
        check_document(doc)  # the schema (viz/view_format.schema.json), as the viewer checks it
    except SchemaViolation as e:
        raise TvzError(f"{at}not a valid thunderviz file: {e}") from None
    return doc


def document_of(obj: Any) -> dict[str, Any]:
    """The view document of what `save`, `show` and `export_html` accept as a finished view:
    a document dict, a Session (anything with `.document()`), a Trace or AutodiffResult, or
    a `thunderviz.jit` function after a call (the traces its last call ran)."""
    if isinstance(obj, Mapping):
        return dict(obj)
    if isinstance(obj, JittedFunction):
        if obj.last is None:
            raise ValueError(
                "this thunderviz.jit function has not been called yet: call it "
                "once (or pass inputs: show(jitted, x)) and try again"
            )
        entry = obj.last
        return build_document(entry.result if entry.result is not None else entry.forward)
    if isinstance(obj, (Trace, AutodiffResult)):
        return build_document(obj)
    make: Callable[[], dict[str, Any]] | None = getattr(obj, "document", None)
    if callable(make):
        return make()
    raise TypeError(
        "save() takes a Session, a thunderviz.jit function, a Trace, an "
        f"AutodiffResult or a view document (dict), not {type(obj).__name__}"
    )


def dumps(obj: Any) -> str:
    """The .tvz text of a Session or document (validated; strict JSON, no NaN)."""
    doc = validate(document_of(obj))
    try:
        return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except ValueError as e:  # a NaN/Inf float slipped in: the document must write strings
        raise TvzError(f"the document is not strict JSON: {e}") from e
    except TypeError as e:
        raise TvzError(f"the document holds a value JSON cannot represent: {e}") from e


def save(obj: Any, path: str | os.PathLike[str]) -> Path:
    """Write a Session's view document (or a document dict) to `path` as .tvz."""
    text = dumps(obj)
    return write_text_atomic(path, text)  # an error leaves an existing file as it was


def _reject_constant(name: str) -> Any:
    raise TvzError(
        f"not a valid thunderviz file: {name} is not JSON (numbers that are NaN or "
        'infinite are written as the strings "nan", "inf", "-inf")'
    )


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400: JSON has no infinity, and JavaScript would read one
        raise ValueError(f"the number {text[:40]} is out of range")
    return value


def loads(data: str | bytes, source: str | None = None) -> dict[str, Any]:
    """Parse and validate .tvz content."""
    at = _where(source)
    if isinstance(data, bytes):
        if data[:1] == b"\x80" or (data[:1] in (b"(", b"c") and data.rstrip().endswith(b".")):
            raise TvzError(
                f"{at}not a thunderviz file: it looks like a Python pickle. thunderviz "
                "files are JSON and are never unpickled."
            )
        if data[:2] == b"PK":
            raise TvzError(
                f"{at}not a thunderviz file: it is a zip archive (a torch.save file?), not JSON"
            )
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as e:
            raise TvzError(f"{at}not a thunderviz file: not UTF-8 text (byte {e.start})") from None
    try:
        doc = json.loads(data, parse_constant=_reject_constant, parse_float=_finite_float)
    except json.JSONDecodeError as e:
        raise TvzError(
            f"{at}not a thunderviz file: malformed JSON at line {e.lineno}, column "
            f"{e.colno}: {e.msg}"
        ) from None
    except RecursionError:
        raise TvzError(f"{at}not a thunderviz file: JSON nested too deeply") from None
    except ValueError as e:  # 1e400, or an integer of thousands of digits
        raise TvzError(f"{at}not a valid thunderviz file: {e}") from None
    return validate(doc, source)


def load(path: str | os.PathLike[str], *, max_bytes: int | None = None) -> dict[str, Any]:
    """Read and validate a .tvz file; returns the view document. Only a regular file is
    read, and at most `max_bytes` of it (default `MAX_LOAD_BYTES`)."""
    p = Path(path)
    limit = MAX_LOAD_BYTES if max_bytes is None else max_bytes
    try:
        data = read_regular_file(p, limit)
    except NotARegularFileError as e:
        raise TvzError(f"not a thunderviz file: {e}") from None
    except FileTooLargeError as e:
        raise TvzError(f"{e}. Pass load(path, max_bytes=N) to open a larger file.") from None
    except OSError as e:
        raise TvzError(f"{p}: cannot read: {e.strerror or e}") from None
    return loads(data, str(p))
