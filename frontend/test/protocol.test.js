// The op and module ids of the viewer protocol (src/protocol.js), as its Python twin
// thunderviz/viz/protocol.py writes and reads them (tests/viz/test_protocol.py: the same cases).
import { test } from "node:test";
import assert from "node:assert/strict";
import { isModuleId, moduleId, modulePathOf, opId, parseOpId, traceKindOfId } from "../src/protocol.js";

test("op ids round trip", () => {
  assert.equal(opId("backward", 7, 0, 2), "backward:7.0.2");
  assert.deepEqual(parseOpId("backward:7.0.2"), { kind: "backward", path: [7, 0, 2] });
  assert.equal(traceKindOfId("forward:12.0"), "forward");
});

test("module ids and names are not op ids", () => {
  for (const id of ["module:fc1", "module:", "x", "forward:", "forward:1.a", "forward:1..2", "forward:-1", "forward: 1"]) assert.equal(parseOpId(id), null, id);
  assert.equal(modulePathOf(moduleId("h.3")), "h.3");
  assert.ok(isModuleId("module:") && !isModuleId("forward:1"));
});
