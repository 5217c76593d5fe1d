"""Hypothesis strategies for view documents, read off the schema itself
(thunderviz/viz/view_format.schema.json): every document drawn is valid, with short
containers, few names (so references between ops and tensors often match) and hostile
strings."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from thunderviz.viz.schema import SCHEMA

NAMES = [
    "",
    "x",
    "t0",
    "t1",
    "forward:0",
    "forward:1",
    "backward:0",
    "a",
    "a.b",
    ".",
    "a..b",
    "constructor",
    "nan",
    "inf",
    "<b>x</b>",
    "a\ud800b",
    "m" * 300,
    "\n#",
]


def _resolve(schema: dict[str, Any]) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    rest = {k: v for k, v in schema.items() if k != "$ref"}
    return {**SCHEMA["$defs"][ref.removeprefix("#/$defs/")], **rest}


def from_schema(schema: dict[str, Any] = SCHEMA) -> st.SearchStrategy[Any]:
    schema = _resolve(schema)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([st.deferred(lambda s=s: from_schema(s)) for s in schema["anyOf"]])
    kinds = schema.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    return st.one_of([_of_type(kind, schema) for kind in kinds])


def _of_type(kind: str, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        low = max(schema.get("minimum", -50), -50)
        return st.integers(low, low + 100)
    if kind == "number":
        return st.sampled_from([0, -1.5, 3.25, 1e300, -1e-300]) | st.floats(-1e6, 1e6)
    if kind == "string":
        names = st.sampled_from(NAMES)
        return (
            names.filter(lambda s: len(s) >= schema.get("minLength", 0))
            if "minLength" in schema
            else names
        )
    if kind == "array":
        items = from_schema(schema["items"]) if "items" in schema else st.none()
        return st.lists(
            items, min_size=schema.get("minItems", 0), max_size=min(schema.get("maxItems", 3), 3)
        )
    assert kind == "object", kind
    return _object(schema)


def _object(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    required = set(schema.get("required", ()))
    fixed = {
        k: st.deferred(lambda s=s: from_schema(s)) for k, s in schema.get("properties", {}).items()
    }
    base = st.fixed_dictionaries(
        {k: v for k, v in fixed.items() if k in required},
        optional={k: v for k, v in fixed.items() if k not in required},
    )
    extra = schema.get("additionalProperties")
    if not isinstance(extra, dict):
        return base
    more = st.dictionaries(
        st.sampled_from(NAMES + ["forward", "backward"]),
        st.deferred(lambda: from_schema(extra)),
        min_size=schema.get("minProperties", 0),
        max_size=3,
    )
    return st.tuples(base, more).map(lambda pair: {**pair[1], **pair[0]})


def _follow_rules(doc: dict[str, Any], draw_parent: Any) -> dict[str, Any]:
    """The rules beyond the schema: version 1, op ids unique ("<kind>:<i>"), parents earlier."""
    doc["version"] = 1
    views = list(doc["traces"].items())
    views += [
        ("before", run["trace_before"])
        for run in doc.get("transforms") or ()
        if run.get("trace_before")
    ]
    for kind, trace in views:
        for i, op in enumerate(trace["ops"]):
            op["id"] = f"{kind}:{i}"
            if op.get("parent") is not None:
                earlier = draw_parent(i)
                op["parent"] = None if earlier is None else f"{kind}:{earlier}"
    return doc


@st.composite
def documents(draw: Any, compared: bool = True) -> dict[str, Any]:
    doc = draw(from_schema())
    if "comparison" in doc:
        # a comparison's other sides are view documents themselves (a rule beyond the
        # schema), which compare nothing further
        if compared:
            doc["comparison"]["documents"] = [draw(documents(compared=False))]
        else:
            del doc["comparison"]
    return _follow_rules(doc, lambda i: draw(st.none() | st.integers(0, i - 1)) if i else None)
