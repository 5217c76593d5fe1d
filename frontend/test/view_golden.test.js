// The view golden (fixtures/view_golden.json), shared with tests/viz/test_view_golden.py:
// the viewer's default view of each document draws exactly the expected nodes, edges, graph
// inputs, return node and counts.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { indexDocument, validateDocument } from "../src/document.js";
import { defaultExpanded, fitVisibleGraph } from "../src/visible.js";

const golden = JSON.parse(readFileSync(fileURLToPath(new URL("./fixtures/view_golden.json", import.meta.url)), "utf8"));

/** The viewer's graph in the golden's terms (node ids of inputs and the return node differ per side). */
function drawn(graph) {
  const boxes = new Set(graph.nodes.filter((n) => n.type === "op" || n.type === "module").map((n) => n.id));
  const byType = (type) => graph.nodes.filter((n) => n.type === type);
  const readers = (from) => graph.edges.filter((e) => e.from === from);
  const inputsNode = byType("inputs")[0];
  const outputNode = byType("output")[0];
  const tensorsFrom = (from) => {
    const out = {};
    for (const e of readers(from)) for (const name of e.tensors) (out[name] ||= []).push(e.to);
    return out;
  };
  const intoReturn = {};
  if (outputNode) for (const e of graph.edges.filter((e) => e.to === outputNode.id)) intoReturn[e.from] = e.tensors;
  const listed = (key) => Object.fromEntries(graph.nodes.filter((n) => n[key] && n[key].length).map((n) => [n.id, n[key]]));
  return {
    nodes: [...boxes].sort(),
    edges: graph.edges.filter((e) => boxes.has(e.from) && boxes.has(e.to)).map((e) => [e.from, e.to, e.tensors]),
    input_nodes: Object.fromEntries(byType("input").map((n) => [n.label, readers(n.id).map((e) => e.to)])),
    inputs_node: inputsNode ? { label: inputsNode.label, tensors: tensorsFrom(inputsNode.id) } : null,
    return: outputNode ? intoReturn : null,
    returns: listed("returns"),
    params: listed("params"),
  };
}

for (const { name, document, expected } of golden.cases) {
  test(`the viewer's default view of the golden document "${name}"`, () => {
    assert.ok(validateDocument(document).ok);
    const ti = indexDocument(document).traces.get("forward");
    const expanded = defaultExpanded(ti);
    const { graph } = fitVisibleGraph(ti, expanded);
    const { expanded: want, ...rest } = expected;
    assert.deepEqual([...expanded].sort(), [...want].sort());
    assert.deepEqual(drawn(graph), { ...rest, nodes: [...rest.nodes].sort() });
  });
}
