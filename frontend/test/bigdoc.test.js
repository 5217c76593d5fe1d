// Issue 9: a 200 MB document holds hundreds of thousands of ops and tensors. Spreading
// such arrays into a call (`push(...xs)`, `Math.max(...xs)`) throws RangeError, so every
// path from indexing to the drawn view is run here on a document of 200k+ ops/tensors.
import { test } from "node:test";
import assert from "node:assert/strict";
import { indexDocument } from "../src/document.js";
import { defaultExpanded, fitVisibleGraph, countVisible, nodesFor } from "../src/visible.js";
import { summarizeSaved } from "../src/saved.js";
import { diffLines } from "../src/diff.js";
import { maxOf, pushAll } from "../src/arrays.js";

const N = 200_000;

/** One module `big` holding N chained ops (one tensor each), plus a small module after it. */
function bigDocument() {
  const ops = [];
  const tensors = { x: { shape: [4], dtype: "float32", device: "cpu", requires_grad: false, kind: "input", producer: null, consumers: ["forward:0"], stats: null } };
  let previous = "x";
  for (let i = 0; i <= N; i++) {
    const out = `t${i}`;
    const module = i < N ? "big" : "head";
    ops.push({ id: `forward:${i}`, parent: null, level: 0, name: "torch.sin", label: "sin", is_prim: false, module_path: module, inputs: [previous], outputs: [out], args_repr: previous, line: i + 2, line_end: i + 2, source: null, tags: [], fwd_op: null });
    tensors[out] = { shape: [4], dtype: "float32", device: "cpu", requires_grad: false, kind: "intermediate", producer: `forward:${i}`, consumers: i < N ? [`forward:${i + 1}`] : [], stats: null };
    previous = out;
  }
  const python = ["def forward(x):", ...ops.map((op) => `  ${op.outputs[0]} = sin(${op.inputs[0]})`), `  return ${previous}`].join("\n");
  const forward = { kind: "forward", name: "forward", provenance: "synthetic", python, inputs: ["x"], outputs: [previous], ops, tensors };
  return { format: "thunderviz", version: 1, title: "big", created_by: "synthetic", traces: { forward } };
}

test("a document of 200k ops and tensors indexes and builds its view without RangeError", () => {
  const index = indexDocument(bigDocument());
  const ti = index.traces.get("forward");
  assert.equal(ti.moduleTopOps("big").length, N);
  assert.equal(ti.moduleTopOps("").length, N + 1);
  const expanded = defaultExpanded(ti);
  assert.ok(!expanded.has("big"), "a 200k-op module stays collapsed by default");
  const { graph } = fitVisibleGraph(ti, expanded);
  assert.ok(graph.nodeById.has("module:big"));
  assert.equal(graph.nodeById.get("module:big").count, N);
  assert.equal(countVisible(ti, expanded), 2, "the collapsed module and head's one op");
  assert.deepEqual(nodesFor(graph, ti, "forward:123456"), ["module:big"]);
  // asking for the big module open: the fit drops it again rather than drawing 200k nodes
  const opened = fitVisibleGraph(ti, new Set(["big"]));
  assert.deepEqual(opened.dropped, ["big"]);
});

test("saved-tensor summary and trace diff of 200k rows", () => {
  const saved = Array.from({ length: N }, (_, i) => ({ name: `s${i}`, module_path: `m${i}`, bytes: i + 1 }));
  const summary = summarizeSaved(saved);
  assert.equal(summary.modules.length, N);
  assert.equal(summary.modules[0].bytes, N);
  assert.equal(maxOf(summary.modules.map((m) => m.bytes), 1), N);
  // a middle too big for the LCS table: every line removed then inserted
  const before = Array.from({ length: N }, (_, i) => `a${i}`).join("\n");
  const after = Array.from({ length: N }, (_, i) => `b${i}`).join("\n");
  const lines = diffLines(`head\n${before}\ntail`, `head\n${after}\ntail`);
  assert.equal(lines.length, 2 * N + 2);
  assert.equal(lines[1].type, "removed");
  assert.equal(lines[lines.length - 1].text, "tail");
});

test("maxOf and pushAll: empty input, floors, iterables", () => {
  assert.equal(maxOf([], 1), 1);
  assert.equal(maxOf([]), -Infinity);
  assert.equal(maxOf(new Map([["a", 3], ["b", 7]]).values(), 0), 7);
  assert.equal(maxOf([-5, -2], -10), -2);
  assert.deepEqual(pushAll([1], new Set([2, 3])), [1, 2, 3]);
});
