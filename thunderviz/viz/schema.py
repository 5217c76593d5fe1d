"""The view document's one schema, and the checker both languages run.

`view_format.schema.json` (next to this file; docs/view-format.schema.json points at it) is
the single statement of what a view document may hold. This module checks a document
against it on `load()`; `frontend/src/viewschema.js` is the same schema generated for the
viewer (`js_twin()`, see tests/safety/test_schema.py), whose checker in
`frontend/src/document.js` follows the same rules in the same order, so both accept and
refuse the same documents (shared fixtures in frontend/test/fixtures/schema/ prove it).

The checker understands the part of JSON Schema the file uses: `$ref` (to `#/$defs/...`),
`type`, `const`, `enum`, `anyOf`, `not` (of a `const`), `properties`, `required`,
`additionalProperties`, `propertyNames`, `minProperties`, `items`, `minItems`, `maxItems`, `minLength`, `pattern` (one that reads
the same in Python and JavaScript), `minimum`, `maximum`. JSON numbers are finite (a Python
inf or nan is no number), and an integral float is an integer, as in JavaScript. Three rules
JSON Schema cannot say are checked after it: no value nested deeper than `MAX_DEPTH`, op
ids unique across all traces, and an op's parent an earlier op of its own trace.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA", "SCHEMA_PATH", "MAX_DEPTH", "SchemaViolation", "check_document",
           "json_type", "js_twin"]

SCHEMA_PATH = Path(__file__).with_name("view_format.schema.json")
SCHEMA: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
MAX_DEPTH = 64
_LARGEST_DOUBLE = int(sys.float_info.max)


class SchemaViolation(ValueError):
    """Where the document breaks the schema (`path`, e.g. "traces.forward.ops[3].inputs")
    and how."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or 'the document'}: {message}")
        self.path = path
        self.message = message


def json_type(value: Any) -> str:
    """The JSON type name of a Python value ("integer" for 2 and 2.0, "non-finite number"
    for inf and nan, which JSON cannot hold)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):  # beyond the double range JavaScript reads Infinity
        return "integer" if abs(value) <= _LARGEST_DOUBLE else "non-finite number"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "non-finite number"
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):  # tuples: an in-memory document, written as arrays
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _type_matches(value: Any, wanted: str) -> bool:
    actual = json_type(value)
    return actual == wanted or (wanted == "number" and actual == "integer")


def _same(a: Any, b: Any) -> bool:
    return json_type(a) == json_type(b) and a == b


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    target = SCHEMA["$defs"][ref.removeprefix("#/$defs/")]
    rest = {k: v for k, v in schema.items() if k != "$ref"}
    return {**target, **rest} if rest else target


def _expected(schema: dict[str, Any]) -> str:
    """A reader's description of what `schema` accepts: "string or null", "integer"."""
    schema = _resolve(schema)
    if "not" in schema:
        return f"anything but {_expected(schema['not'])}"
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return ", ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_expected(s) for s in schema["anyOf"])
    kinds = schema.get("type", "anything")
    return " or ".join(kinds) if isinstance(kinds, list) else kinds


def _shallow_ok(value: Any, schema: dict[str, Any]) -> bool:
    """Whether `value` has a type `schema` accepts (not looking inside it)."""
    schema = _resolve(schema)
    if "not" in schema and _shallow_ok(value, schema["not"]):
        return False
    if "const" in schema:
        return _same(value, schema["const"])
    if "enum" in schema:
        return any(_same(value, v) for v in schema["enum"])
    if "anyOf" in schema:
        return any(_shallow_ok(value, s) for s in schema["anyOf"])
    kinds = schema.get("type")
    if kinds is None:
        return True
    return any(_type_matches(value, k) for k in (kinds if isinstance(kinds, list) else [kinds]))


def _check(value: Any, schema: dict[str, Any], path: str) -> None:
    schema = _resolve(schema)
    if not _shallow_ok(value, schema):
        got = json_type(value)
        if got == "non-finite number":
            got = f'{value!r}, which is not strict JSON (write "nan", "inf" or "-inf")'
        raise SchemaViolation(path, f"expected {_expected(schema)}, got {got}")
    if "anyOf" in schema:
        # The first alternative whose type fits decides (its error is the precise one).
        chosen = next(s for s in schema["anyOf"] if _shallow_ok(value, s))
        _check(value, chosen, path)
        return
    kind = json_type(value)
    if kind in ("integer", "number"):
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaViolation(path, f"must be at least {schema['minimum']}, got {value}")
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaViolation(path, f"must be at most {schema['maximum']}, got {value}")
    elif kind == "string":
        if len(value) < schema.get("minLength", 0):
            raise SchemaViolation(path, f"must have at least {schema['minLength']} characters")
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            raise SchemaViolation(path, f"does not match {schema['pattern']}")
    elif kind == "array":
        if len(value) < schema.get("minItems", 0):
            raise SchemaViolation(path, f"must have at least {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaViolation(path, f"must have at most {schema['maxItems']} items")
        items = schema.get("items")
        if items is not None:
            for i, item in enumerate(value):
                _check(item, items, f"{path}[{i}]")
    elif kind == "object":
        _check_object(value, schema, path)


def _check_object(value: dict[str, Any], schema: dict[str, Any], path: str) -> None:
    at = f"{path}." if path else ""
    for key in schema.get("required", ()):
        if key not in value:
            raise SchemaViolation(path, f"missing key {json.dumps(key)}")
    if len(value) < schema.get("minProperties", 0):
        raise SchemaViolation(path, f"must have at least {schema['minProperties']} entries")
    names = schema.get("propertyNames")
    if names is not None:
        for key in value:
            if not _shallow_ok(key, names):
                raise SchemaViolation(path, f"key {json.dumps(key)}: expected {_expected(names)}")
    props = schema.get("properties", {})
    for key, sub in props.items():
        if key in value:
            _check(value[key], sub, at + key)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict):
        for key, item in value.items():
            if key not in props:
                _check(item, extra, at + str(key))


def _check_depth(doc: Any) -> None:
    """Iteratively (a deep document must not exhaust the stack of its checker)."""
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, (list, tuple)):
            children = value
        else:
            continue
        if depth > MAX_DEPTH:
            raise SchemaViolation("", f"nested deeper than {MAX_DEPTH} levels")
        stack.extend((child, depth + 1) for child in children)


def _check_unique_ids(doc: dict[str, Any]) -> None:
    seen: set[str] = set()
    for kind, trace in doc["traces"].items():
        for i, op in enumerate(trace["ops"]):
            if op["id"] in seen:
                raise SchemaViolation(f"traces.{kind}.ops[{i}].id",
                                      f"op id {json.dumps(op['id'])} appears twice")
            seen.add(op["id"])


def _check_parents(doc: dict[str, Any]) -> None:
    """Parents come before their children (docs/view-format.md): a reader building the op
    tree in one pass never meets a cycle (an op that is its own parent hung the viewer)."""
    views = [(f"traces.{kind}", trace) for kind, trace in doc["traces"].items()]
    for i, run in enumerate(doc.get("transforms") or ()):
        if run.get("trace_before") is not None:
            views.append((f"transforms[{i}].trace_before", run["trace_before"]))
    for where, trace in views:
        earlier: set[str] = set()
        for i, op in enumerate(trace["ops"]):
            parent = op.get("parent")
            if parent is not None and parent not in earlier:
                raise SchemaViolation(f"{where}.ops[{i}].parent",
                                      f"{json.dumps(parent)} is not an earlier op of this trace")
            earlier.add(op["id"])


def check_document(doc: Any) -> None:
    """Raise SchemaViolation at the first place `doc` breaks the schema or its three rules."""
    _check_depth(doc)
    _check(doc, SCHEMA, "")
    _check_unique_ids(doc)
    _check_parents(doc)


def js_twin() -> str:
    """The text of frontend/src/viewschema.js (the same schema, for the viewer)."""
    return ("// Generated from thunderviz/viz/view_format.schema.json by\n"
            "// thunderviz.viz.schema.js_twin(). Do not edit: change the schema, then run\n"
            "//   python -c 'import thunderviz.viz.schema as s; print(s.js_twin(), end=\"\")' \\\n"
            "//     > frontend/src/viewschema.js\n"
            "// (tests/safety/test_schema.py checks the two match).\n"
            f"export const MAX_DEPTH = {MAX_DEPTH};\n"
            f"export const VIEW_SCHEMA = {json.dumps(_rules_only(SCHEMA), indent=1)};\n")


def _rules_only(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema without its annotations ($schema, $id: URLs a self-contained page must
    not carry; title, $comment: prose for people), which no check reads."""
    return {k: v for k, v in schema.items() if k not in ("$schema", "$id", "title", "$comment")}

