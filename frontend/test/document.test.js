import { test } from "node:test";
import assert from "node:assert/strict";
import { validateDocument, parseDocument, toNumber, indexDocument, findTensor, FORMAT_VERSION, MIME_TYPE } from "../src/document.js";
import { loadFixture, fixtureIndex } from "./helpers.js";

test("constants match the documented contract", () => {
  assert.equal(MIME_TYPE, "application/vnd.thunderviz.view+json");
  assert.equal(FORMAT_VERSION, 1);
});

test("the fixture validates", () => {
  assert.deepEqual(validateDocument(loadFixture()), { ok: true, error: null });
});

test("anything without the format marker is not a thunderviz file", () => {
  for (const bad of [null, 3, "x", [], {}, { format: "other", version: 1, traces: {} }]) {
    const result = validateDocument(bad);
    assert.equal(result.ok, false);
    assert.match(result.error, /^Not a thunderviz file/);
  }
});

test("a newer format version says which versions and what to do", () => {
  const doc = { ...loadFixture(), version: 3 };
  assert.equal(
    validateDocument(doc).error,
    "This file was written by a newer thunderviz (format version 3); this viewer reads version 1. Upgrade thunderviz.",
  );
});

test("missing or empty traces are rejected by name", () => {
  const doc = loadFixture();
  delete doc.traces;
  assert.match(validateDocument(doc).error, /"traces" is missing/);
  assert.match(validateDocument({ ...loadFixture(), traces: {} }).error, /"traces" is missing or empty/);
});

test("broken ops are rejected with the trace and position", () => {
  const doc = loadFixture();
  doc.traces.backward.ops[2] = { name: "no id" };
  assert.match(validateDocument(doc).error, /traces\.backward\.ops\[2\]: missing key "id"/);
  const dup = loadFixture();
  dup.traces.forward.ops[1].id = "forward:0";
  assert.match(validateDocument(dup).error, /"forward:0" appears twice/);
});

test("parseDocument turns bad JSON text into a message, not an exception", () => {
  assert.match(parseDocument("{nope").error, /not valid JSON/);
  assert.deepEqual(parseDocument('{"a": 1}'), { doc: { a: 1 }, error: null });
});

test("NaN and infinities written as strings decode to numbers", () => {
  assert.ok(Number.isNaN(toNumber("nan")));
  assert.equal(toNumber("inf"), Infinity);
  assert.equal(toNumber("-inf"), -Infinity);
  assert.equal(toNumber(2.5), 2.5);
});

test("the index orders traces forward, augmented forward, backward", () => {
  assert.deepEqual(fixtureIndex().kinds, ["forward", "augmented_forward", "backward"]);
});

test("forward ops know the derived ops whose fwd_op they are", () => {
  const index = fixtureIndex();
  assert.deepEqual(index.derivedByForward.get("forward:0"), ["augmented_forward:0", "backward:7", "backward:8", "backward:9"]);
});

test("derived ops without a module take their forward op's module", () => {
  const index = fixtureIndex();
  const backward = index.traces.get("backward");
  // backward:8 has module_path "" and fwd_op forward:0 (module encoder.fc1)
  assert.equal(backward.moduleOfOp.get("backward:8"), "encoder.fc1");
  assert.equal(backward.moduleOfOp.get("backward:0"), ""); // mse_loss lives at the root
});

test("each printed line belongs to the deepest op covering it", () => {
  const forward = fixtureIndex().traces.get("forward");
  assert.equal(forward.lineOwner[8], "forward:0");
  assert.equal(forward.lineOwner[9], "forward:0.0");
  assert.equal(forward.lineOwner[10], "forward:0.1");
  assert.equal(forward.lineOwner[5], null);
});

test("a tensor's producer is its deepest producing op", () => {
  const forward = fixtureIndex().traces.get("forward");
  assert.equal(forward.producers.get("t0"), "forward:0.1");
  assert.equal(forward.producers.get("t3"), "forward:3.2");
});

test("findTensor prefers the asked-for trace", () => {
  const index = indexDocument(loadFixture());
  assert.equal(findTensor(index, "x", "backward").kind, "backward");
  assert.equal(findTensor(index, "x").kind, "forward");
  assert.equal(findTensor(index, "nope"), null);
});
