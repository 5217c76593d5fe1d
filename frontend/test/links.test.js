import { test } from "node:test";
import assert from "node:assert/strict";
import { linkedHighlights, addExplicitHighlights } from "../src/links.js";
import { fixtureIndex } from "./helpers.js";

const sorted = (set) => [...set].sort();

test("selecting a forward op highlights the derived ops and its saved tensors", () => {
  const h = linkedHighlights(fixtureIndex(), "forward:2");
  assert.deepEqual(sorted(h.ops), ["augmented_forward:2", "backward:2", "backward:3", "backward:4", "backward:5"]);
  assert.deepEqual(sorted(h.saved), ["fc2_weight"]);
});

test("selecting a subsymbol links through its enclosing op's grad rule", () => {
  const h = linkedHighlights(fixtureIndex(), "forward:3.1");
  assert.ok(h.ops.has("backward:0") && h.ops.has("backward:1"));
  assert.ok(h.saved.has("t7"));
});

test("selecting a backward op highlights its forward op and siblings in other traces only", () => {
  const h = linkedHighlights(fixtureIndex(), "backward:6");
  assert.ok(h.ops.has("forward:1"));
  assert.ok(h.ops.has("augmented_forward:1"));
  assert.ok(!h.ops.has("backward:6.0"), "not its own trace's siblings");
  assert.deepEqual(sorted(h.saved), ["t1"]); // fwd_op forward:1, and backward:6 consumes it
});

test("selecting a module highlights everything inside it in every trace", () => {
  const h = linkedHighlights(fixtureIndex(), "module:encoder");
  assert.deepEqual(sorted(h.modules), ["encoder"]);
  for (const id of ["forward:0", "forward:1", "augmented_forward:0", "augmented_forward:1", "backward:6", "backward:7", "backward:8", "backward:9"]) {
    assert.ok(h.ops.has(id), id);
  }
  assert.ok(!h.ops.has("forward:2"));
  assert.deepEqual(sorted(h.saved), ["t1", "x"]);
});

test("selecting a saved tensor highlights its producer, forward op and consumers", () => {
  const h = linkedHighlights(fixtureIndex(), "t1");
  assert.ok(h.tensors.has("t1"));
  for (const id of ["forward:1.0", "forward:2", "augmented_forward:1", "backward:4", "backward:6"]) assert.ok(h.ops.has(id), id);
  assert.ok(h.saved.has("t1"));
});

test("nothing selected highlights nothing; Python's highlight list adds ids of any kind", () => {
  const index = fixtureIndex();
  const h = addExplicitHighlights(linkedHighlights(index, ""), index, ["backward:3", "module:head", "t9", 7]);
  assert.deepEqual(sorted(h.ops), ["backward:3"]);
  assert.deepEqual(sorted(h.modules), ["head"]);
  assert.deepEqual(sorted(h.tensors), ["t9"]);
});
