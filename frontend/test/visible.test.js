import { test } from "node:test";
import assert from "node:assert/strict";
import { buildVisibleGraph, defaultExpanded, fitVisibleGraph, countVisible, nodesFor, moduleId } from "../src/visible.js";
import { indexDocument } from "../src/document.js";
import { fixtureIndex } from "./helpers.js";
import { makeGptDocument, makeFlatDocument } from "./synthetic.js";

const forwardOf = (index) => index.traces.get("forward");
const ids = (graph) => graph.nodes.map((n) => n.id);
const edgeSet = (graph) => new Set(graph.edges.map((e) => `${e.from}->${e.to}:${e.tensors.join(",")}`));

test("with nothing expanded, modules collapse to one node each and single-op modules show their op", () => {
  const ti = forwardOf(fixtureIndex());
  const graph = buildVisibleGraph(ti, new Set());
  // encoder has two ops (fc1, act): collapsed; head has one op: drawn as that op
  assert.deepEqual(ids(graph), ["module:encoder", "forward:2", "forward:3", "x", "target", "output:forward"]);
  const encoder = graph.nodeById.get("module:encoder");
  assert.equal(encoder.count, 2);
  assert.ok(encoder.expandable);
});

test("an expanded module becomes a cluster around its contents", () => {
  const ti = forwardOf(fixtureIndex());
  const graph = buildVisibleGraph(ti, new Set(["encoder"]));
  const cluster = graph.root.clusters.find((c) => c.id === "module:encoder");
  assert.deepEqual(cluster.nodes, ["forward:0", "forward:1"]);
  assert.equal(graph.nodeById.get("forward:0").clusterModule, "encoder");
});

test("tensor edges connect visible nodes; params are counted on their op, not drawn", () => {
  const ti = forwardOf(fixtureIndex());
  const graph = buildVisibleGraph(ti, new Set(["encoder"]));
  const edges = edgeSet(graph);
  for (const e of ["x->forward:0:x", "forward:0->forward:1:t0", "forward:1->forward:2:t1", "forward:2->forward:3:t2", "target->forward:3:target", "forward:3->output:forward:t3"]) {
    assert.ok(edges.has(e), `missing edge ${e}`);
  }
  assert.equal(graph.edges.length, 6);
  assert.deepEqual(graph.nodeById.get("forward:0").params, ["fc1_weight", "fc1_bias"]);
  assert.ok(!graph.nodeById.has("fc1_weight"));
});

test("edges into and out of a collapsed module attach to the module node", () => {
  const ti = forwardOf(fixtureIndex());
  const edges = edgeSet(buildVisibleGraph(ti, new Set()));
  assert.ok(edges.has("x->module:encoder:x"));
  assert.ok(edges.has("module:encoder->forward:2:t1"));
  assert.ok(![...edges].some((e) => e.includes("t0")), "t0 stays inside the collapsed module");
});

test("expanding an op shows its subsymbols in an op cluster, with edges to the prims", () => {
  const ti = forwardOf(fixtureIndex());
  const graph = buildVisibleGraph(ti, new Set(["encoder", "forward:3"]));
  const cluster = graph.root.clusters.find((c) => c.id === "forward:3");
  assert.deepEqual(cluster.nodes, ["forward:3.0", "forward:3.1", "forward:3.2"]);
  const edges = edgeSet(graph);
  assert.ok(edges.has("forward:2->forward:3.0:t2"));
  assert.ok(edges.has("forward:3.0->forward:3.1:t7"));
  assert.ok(edges.has("forward:3.2->output:forward:t3"));
  assert.ok(!graph.nodeById.has("forward:3"));
});

test("ops hidden in a collapsed node map to that node (owner)", () => {
  const ti = forwardOf(fixtureIndex());
  const graph = buildVisibleGraph(ti, new Set());
  assert.equal(graph.owner.get("forward:0.1"), "module:encoder");
  assert.deepEqual(nodesFor(graph, ti, "forward:1"), ["module:encoder"]);
  const open = buildVisibleGraph(ti, new Set(["encoder", "forward:0"]));
  assert.deepEqual(nodesFor(open, ti, "forward:0").sort(), ["forward:0.0", "forward:0.1"]);
  assert.deepEqual(nodesFor(open, ti, moduleId("encoder")).sort(), ["forward:0.0", "forward:0.1", "forward:1"]);
});

test("small traces open fully by default", () => {
  const ti = forwardOf(fixtureIndex());
  assert.deepEqual([...defaultExpanded(ti)], ["encoder"]);
});

test("with a higher limit a 12-layer GPT opens breadth-first: 12 alike blocks, under the limit", () => {
  const index = indexDocument(makeGptDocument({ layers: 12 }));
  const ti = forwardOf(index);
  assert.ok(ti.topOps.length > 150);
  const expanded = defaultExpanded(ti, { collapseAbove: 150 });
  assert.ok(countVisible(ti, expanded) <= 150);
  const graph = buildVisibleGraph(ti, expanded);
  const blocks = graph.root.clusters.flatMap(function walk(c) { return [c, ...c.clusters.flatMap(walk)]; })
    .filter((c) => /^module:transformer\.h\.\d+$/.test(c.id));
  assert.equal(blocks.length, 12);
  // every block is opened to the same depth: attention and MLP are collapsed in each
  for (let i = 0; i < 12; i++) {
    assert.ok(graph.nodeById.has(`module:transformer.h.${i}.attn`), `block ${i} attn`);
    assert.ok(graph.nodeById.has(`module:transformer.h.${i}.mlp`), `block ${i} mlp`);
  }
  // embedding before the blocks, head and loss after
  assert.equal(graph.nodeById.get("forward:1").label, "embedding");
  assert.ok(ids(graph).some((id) => graph.nodeById.get(id).label === "cross_entropy"));
});

test("by default a 12-layer GPT opens as embeddings -> 12 shut blocks -> head -> loss", () => {
  const ti = forwardOf(indexDocument(makeGptDocument({ layers: 12 })));
  const graph = buildVisibleGraph(ti, defaultExpanded(ti));
  for (let i = 0; i < 12; i++) assert.ok(graph.nodeById.has(`module:transformer.h.${i}`));
  assert.ok(graph.nodes.length < 40);
});

test("the layout is never given more than maxNodes: deepest expansions are dropped first", () => {
  const ti = forwardOf(indexDocument(makeGptDocument({ layers: 4 })));
  const everything = new Set([...ti.modules.keys()].filter(Boolean));
  for (const id of ti.ops.keys()) everything.add(id);
  const fitted = fitVisibleGraph(ti, everything, { maxNodes: 60 });
  assert.ok(fitted.graph.nodes.length <= 60);
  assert.ok(fitted.count > 60);
  assert.ok(fitted.dropped.length > 0);
  // op (subsymbol) expansions go before module expansions
  assert.ok(fitted.dropped.every((id) => !fitted.expanded.has(id)));
  assert.ok(fitted.dropped.some((id) => ti.ops.has(id)));
});

test("a trace too big even when collapsed yields no graph", () => {
  const ti = forwardOf(indexDocument(makeFlatDocument(2100)));
  const fitted = fitVisibleGraph(ti, new Set());
  assert.equal(fitted.graph, null);
  assert.ok(fitted.count > 2000);
});

test("many graph inputs are drawn as one inputs node", () => {
  const doc = makeFlatDocument(3);
  const trace = doc.traces.forward;
  for (let i = 0; i < 40; i++) {
    trace.inputs.push(`in${i}`);
    trace.tensors[`in${i}`] = { shape: [1], dtype: "float32", kind: "input", producer: null, consumers: [] };
    trace.ops[0].inputs.push(`in${i}`);
  }
  const graph = buildVisibleGraph(forwardOf(indexDocument(doc)), new Set());
  const inputs = graph.nodes.filter((n) => n.type === "inputs");
  assert.equal(inputs.length, 1);
  assert.equal(inputs[0].tensors.length, 41);
  assert.equal(graph.nodes.filter((n) => n.type === "input").length, 0);
});
