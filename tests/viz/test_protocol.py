"""The viewer protocol has one owner per language (thunderviz/viz/protocol.py,
frontend/src/protocol.js); they must agree."""

from __future__ import annotations

import re
from pathlib import Path

from thunderviz.viz import protocol

PROTOCOL_JS = (Path(__file__).resolve().parents[2] / "frontend" / "src" / "protocol.js").read_text()


def _js_string(name: str) -> str:
    return re.search(rf'export const {name} = "([^"]*)";', PROTOCOL_JS).group(1)


def test_constants_are_the_same_in_both_languages():
    assert _js_string("MIME_TYPE") == protocol.VIEW_MIME
    assert _js_string("MODULE_PREFIX") == protocol.MODULE_PREFIX
    block = re.search(r"DEFAULT_LIMITS = Object\.freeze\(\{(.*?)\}\);", PROTOCOL_JS, re.S).group(1)
    limits = {k: int(v) for k, v in re.findall(r"^\s*(\w+): (\d+),", block, re.M)}
    assert limits == dict(protocol.DEFAULT_LIMITS)


def test_ids_round_trip():
    assert protocol.op_id("backward", 7, 0, 2) == "backward:7.0.2"
    assert protocol.parse_op_id("backward:7.0.2") == ("backward", (7, 0, 2))
    assert protocol.parse_op_id("module:fc1") is None and protocol.parse_op_id("x") is None
    # the same cases as frontend/test/protocol.test.js: an index is ASCII digits only
    for ident in ("module:", "forward:", "forward:1.a", "forward:1..2", "forward:-1", "forward: 1"):
        assert protocol.parse_op_id(ident) is None, ident
    assert (
        protocol.trace_kind_of("forward:12.0") == "forward" and protocol.trace_kind_of("x") is None
    )
    assert protocol.module_path_of(protocol.module_id("h.3")) == "h.3"
    assert protocol.module_path_of("module:") == "" and protocol.module_path_of("forward:1") is None
