// Search over the MLP fixture: tensors, modules, source lines and ops, ranked.
import { test } from "node:test";
import assert from "node:assert/strict";
import { loadFixture } from "./helpers.js";
import { indexDocument } from "../src/document.js";
import { buildSearchIndex, search } from "../src/search.js";

const index = indexDocument(loadFixture());
const entries = buildSearchIndex(index);

test("an exact tensor name comes first", () => {
  const [first] = search(entries, "t3");
  assert.deepEqual([first.kind, first.id], ["tensor", "t3"]);
});

test("a module path, a file:line and an op name are found", () => {
  const fwd = index.traces.get("forward");
  const path = [...fwd.modules.keys()].find(Boolean);
  assert.equal(search(entries, path)[0].id, `module:${path}`);
  const op = fwd.trace.ops.find((o) => o.source && o.source.line);
  const line = `${op.source.file.split("/").pop()}:${op.source.line}`;
  const hit = search(entries, line)[0];
  assert.equal(hit.kind, "line");
  assert.equal(index.opById.get(hit.id).op.source.line, op.source.line);
  assert.ok(search(entries, "LINEAR").some((e) => e.kind === "op" && /linear/i.test(e.title)));
});

test("nothing for an empty query; results are capped", () => {
  assert.deepEqual(search(entries, "  "), []);
  assert.ok(search(entries, "t", 5).length <= 5);
});

test("revealing a tensor opens the modules around its producer, not the producer itself", async () => {
  const { expansionToReveal } = await import("../src/search.js");
  const fwd = index.traces.get("forward");
  const [name, tensor] = Object.entries(fwd.tensors).find(([, t]) => t.producer && fwd.ops.get(t.producer).module_path);
  const open = expansionToReveal(index, name);
  const path = fwd.ops.get(tensor.producer).module_path;
  assert.ok(open.includes(path), open);
  assert.ok(!open.includes(tensor.producer));
  assert.deepEqual(expansionToReveal(index, `module:${path}`).includes(path), false);
});
