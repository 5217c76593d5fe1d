"""The view document's one schema, and the checker both languages run.

`view_format.schema.json` (next to this file; docs/view-format.schema.json points at it) is
the single statement of what a view document may hold. This module checks a document
against it on `load()`; `frontend/src/viewschema.js` is the same schema generated for the
viewer (`js_twin()`, see tests/safety/test_schema.py), whose checker in
`frontend/src/document.js` follows the same rules in the same order, so both accept and
refuse the same documents (shared fixtures in frontend/test/fixtures/schema/ prove it).

The checker understands the part of JSON Schema the file uses: `$ref` (to `#/$defs/...`),
`type`, `const`, `enum`, `anyOf`, `not` (of a `const`), `properties`, `required`,
`additionalProperties`, `propertyNames`, `minProperties`, `items`, `minItems`, `maxItems`,
`minLength`, `pattern` (one that reads the same in Python and JavaScript), `minimum`,
`maximum`. JSON numbers are finite (a Python inf or nan is no number), and an integral float is
an integer, as in JavaScript. Three rules JSON Schema cannot say are checked after it: no value
nested deeper than `MAX_DEPTH`, op ids unique across all traces, and an op's parent an earlier
op of its own trace.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "SCHEMA",
    "SCHEMA_PATH",
    "MAX_DEPTH",
    "SchemaViolation",
    "check_document",
    "json_type",
    "js_twin",
]

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


_SIMPLE_TYPES = {
    str: "string",
    dict: "object",
    list: "array",
    tuple: "array",
    type(None): "null",
    bool: "boolean",
}


def json_type(value: Any) -> str:
    """The JSON type name of a Python value ("integer" for 2 and 2.0, "non-finite number"
    for inf and nan, which JSON cannot hold; tuples are arrays, as json writes them)."""
    simple = _SIMPLE_TYPES.get(type(value))
    if simple is not None:
        return simple
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
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


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


# --- checking: each schema node compiled once -------------------------------------------
# A path is built only for an error: checking passes (parent_path, key) pairs down instead of
# formatting "traces.forward.ops[3]" for every value of a large document; a value's JSON type
# is computed once and handed to every test of it.
KeyPath = tuple[Any, str | int] | None


def _path_text(path: KeyPath) -> str:
    keys: list[str | int] = []
    while path is not None:
        path, key = path
        keys.append(key)
    text = ""
    for key in reversed(keys):
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else str(key))
    return text


def _fail(path: KeyPath, message: str) -> None:
    raise SchemaViolation(_path_text(path), message)


_nodes: dict[int, _Node] = {}


def _node(schema: dict[str, Any]) -> _Node:
    """The compiled form of one node of SCHEMA (cached: the schema is fixed)."""
    node = _nodes.get(id(schema))
    if node is None:
        node = _nodes[id(schema)] = _Node(schema)
    return node


class _Node:
    def __init__(self, raw: dict[str, Any]) -> None:
        schema = self.schema = _resolve(raw)
        kinds = schema.get("type")
        kinds = [kinds] if isinstance(kinds, str) else kinds
        self.types = (
            None
            if kinds is None
            else frozenset([*kinds, "integer"] if "number" in kinds else kinds)
        )
        self.has_const, self.const = "const" in schema, schema.get("const")
        self.enum = schema.get("enum")
        self.alternatives = [_node(s) for s in schema["anyOf"]] if "anyOf" in schema else None
        self.negated = _node(schema["not"]) if "not" in schema else None
        self.low, self.high = schema.get("minimum"), schema.get("maximum")
        self.min_length, self.pattern = schema.get("minLength", 0), schema.get("pattern")
        self.regex = re.compile(self.pattern) if self.pattern is not None else None
        self.min_items, self.max_items = schema.get("minItems", 0), schema.get("maxItems")
        self.items = _node(schema["items"]) if "items" in schema else None
        self.required, self.min_props = schema.get("required", ()), schema.get("minProperties", 0)
        self.names = _node(schema["propertyNames"]) if "propertyNames" in schema else None
        self.props = {k: _node(v) for k, v in schema.get("properties", {}).items()}
        extra = schema.get("additionalProperties")
        self.extra = _node(extra) if isinstance(extra, dict) else None
        self.fast = self._fast_accept()

    def _fast_accept(self) -> Callable[[Any], bool] | None:
        """A quick test that passes most valid scalars (a string where a plain string goes, an
        integer within bounds) without the general machinery; False means "check fully",
        which also finds the error."""
        if self.alternatives is not None:
            fast = [a.fast for a in self.alternatives if a.fast is not None]
            if len(fast) == len(self.alternatives):
                return lambda v: any(f(v) for f in fast)
            return None
        if (
            self.enum is not None
            and all(type(v) is str for v in self.enum)
            and self.negated is None
        ):
            values = frozenset(self.enum)
            return lambda v: type(v) is str and v in values
        constrained = (
            self.negated is not None
            or self.has_const
            or self.enum is not None
            or self.min_length
            or self.regex is not None
        )
        if constrained or self.types is None:
            return None
        low = -_LARGEST_DOUBLE if self.low is None else self.low
        high = _LARGEST_DOUBLE if self.high is None else self.high
        tests = []
        if "string" in self.types:
            tests.append(lambda v: type(v) is str)
        if "boolean" in self.types:
            tests.append(lambda v: type(v) is bool)
        if "null" in self.types:
            tests.append(lambda v: v is None)
        if "integer" in self.types:
            tests.append(lambda v: type(v) is int and low <= v <= high)
        if "number" in self.types:
            tests.append(lambda v: type(v) is float and math.isfinite(v) and low <= v <= high)
        if not tests or self.types - {"string", "boolean", "null", "integer", "number"}:
            return None
        return tests[0] if len(tests) == 1 else (lambda v: any(t(v) for t in tests))

    def accepts(self, value: Any, kind: str) -> bool:
        """Whether `value` (of JSON type `kind`) has a type this node accepts."""
        if self.negated is not None and self.negated.accepts(value, kind):
            return False
        if self.has_const:
            return kind == json_type(self.const) and value == self.const
        if self.enum is not None:
            return any(kind == json_type(v) and value == v for v in self.enum)
        if self.alternatives is not None:
            return any(a.accepts(value, kind) for a in self.alternatives)
        return self.types is None or kind in self.types

    def check(self, value: Any, kind: str, path: KeyPath) -> None:
        if not self.accepts(value, kind):
            got = kind
            if kind == "non-finite number":
                got = f'{value!r}, which is not strict JSON (write "nan", "inf" or "-inf")'
            _fail(path, f"expected {_expected(self.schema)}, got {got}")
        if self.alternatives is not None:
            # The first alternative whose type fits decides (its error is the precise one).
            next(a for a in self.alternatives if a.accepts(value, kind)).check(value, kind, path)
        elif kind == "object":
            self.check_object(value, path)
        elif kind == "array":
            if len(value) < self.min_items:
                _fail(path, f"must have at least {self.min_items} items")
            if self.max_items is not None and len(value) > self.max_items:
                _fail(path, f"must have at most {self.max_items} items")
            items = self.items
            if items is not None:
                fast = items.fast
                for i, item in enumerate(value):
                    if fast is None or not fast(item):
                        items.check(item, json_type(item), (path, i))
        elif kind == "string":
            if len(value) < self.min_length:
                _fail(path, f"must have at least {self.min_length} characters")
            if self.regex is not None and self.regex.search(value) is None:
                _fail(path, f"does not match {self.pattern}")
        elif kind == "integer" or kind == "number":
            if self.low is not None and value < self.low:
                _fail(path, f"must be at least {self.low}, got {value}")
            if self.high is not None and value > self.high:
                _fail(path, f"must be at most {self.high}, got {value}")

    def check_object(self, value: dict[str, Any], path: KeyPath) -> None:
        for key in self.required:
            if key not in value:
                _fail(path, f"missing key {json.dumps(key)}")
        if len(value) < self.min_props:
            _fail(path, f"must have at least {self.min_props} entries")
        if self.names is not None:
            for key in value:
                if not self.names.accepts(key, json_type(key)):
                    _fail(path, f"key {json.dumps(key)}: expected {_expected(self.names.schema)}")
        props = self.props
        for key, sub in props.items():
            if key in value:
                item = value[key]
                if sub.fast is None or not sub.fast(item):
                    sub.check(item, json_type(item), (path, key))
        extra = self.extra
        if extra is not None:
            for key, item in value.items():
                if key not in props and (extra.fast is None or not extra.fast(item)):
                    extra.check(item, json_type(item), (path, str(key)))


def _check_depth(doc: Any) -> None:
    """Iteratively (a deep document must not exhaust the stack of its checker)."""
    containers = (dict, list, tuple)
    if not isinstance(doc, containers):
        return
    stack: list[tuple[Any, int]] = [(doc, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise SchemaViolation("", f"nested deeper than {MAX_DEPTH} levels")
        children = value.values() if isinstance(value, dict) else value
        stack.extend([(child, depth + 1) for child in children if isinstance(child, containers)])


def _check_unique_ids(doc: dict[str, Any]) -> None:
    seen: set[str] = set()
    for kind, trace in doc["traces"].items():
        for i, op in enumerate(trace["ops"]):
            if op["id"] in seen:
                raise SchemaViolation(
                    f"traces.{kind}.ops[{i}].id", f"op id {json.dumps(op['id'])} appears twice"
                )
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
                raise SchemaViolation(
                    f"{where}.ops[{i}].parent",
                    f"{json.dumps(parent)} is not an earlier op of this trace",
                )
            earlier.add(op["id"])


def _check_compared(doc: dict[str, Any]) -> None:
    """A comparison's other sides are view documents themselves (checked as one, their
    errors placed under `comparison.documents[i]`), and none compares again."""
    for i, side in enumerate((doc.get("comparison") or {}).get("documents", ())):
        where = f"comparison.documents[{i}]"
        if "comparison" in side:
            raise SchemaViolation(where, "a compared document holds no comparison of its own")
        try:
            check_document(side)
        except SchemaViolation as err:
            raise SchemaViolation(
                f"{where}.{err.path}" if err.path else where, err.message
            ) from None


def check_document(doc: Any) -> None:
    """Raise SchemaViolation at the first place `doc` breaks the schema or its rules (depth,
    unique op ids, parents first, and a comparison's documents each a valid document)."""
    _check_depth(doc)
    _node(SCHEMA).check(doc, json_type(doc), None)
    _check_unique_ids(doc)
    _check_parents(doc)
    _check_compared(doc)


def js_twin() -> str:
    """The text of frontend/src/viewschema.js (the same schema, for the viewer)."""
    return (
        "// Generated from thunderviz/viz/view_format.schema.json by\n"
        "// thunderviz.viz.schema.js_twin(). Do not edit: change the schema, then run\n"
        "//   python -c 'import thunderviz.viz.schema as s; print(s.js_twin(), end=\"\")' \\\n"
        "//     > frontend/src/viewschema.js\n"
        "// (tests/safety/test_schema.py checks the two match).\n"
        f"export const MAX_DEPTH = {MAX_DEPTH};\n"
        f"export const VIEW_SCHEMA = {json.dumps(_rules_only(SCHEMA), indent=1)};\n"
    )


def _rules_only(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema without its annotations ($schema, $id: URLs a self-contained page must
    not carry; title, $comment: prose for people), which no check reads."""
    return {k: v for k, v in schema.items() if k not in ("$schema", "$id", "title", "$comment")}
