// The graph's colours and shapes have one home, thunderviz/viz/palette.json, which the static
// pictures (thunderviz/viz/static.py) read: the viewer's DOT (dot.js) and its legend
// (style.js) must draw exactly those.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { graphToDot } from "../src/dot.js";
import { CSS } from "../src/style.js";

const palette = JSON.parse(readFileSync(fileURLToPath(new URL("../../thunderviz/viz/palette.json", import.meta.url)), "utf8"));

// One node of every type the viewer draws, one cluster of each kind, one edge.
const nodes = [
  { id: "forward:0", type: "op", label: "add", isPrim: false },
  { id: "forward:1", type: "op", label: "add.Tensor", isPrim: true },
  { id: "module:m", type: "module", label: "m", count: 2 },
  { id: "x", type: "input", label: "x" },
  { id: "inputs:forward", type: "inputs", label: "inputs (40)" },
  { id: "output:forward", type: "output", label: "return" },
  { id: "saved:s@forward:0", type: "saved", label: "s", tensors: ["s"], bytes: 8 },
];
const cluster = (id, type) => ({ id, type, label: id, nodes: [], clusters: [] });
const graph = {
  nodes,
  nodeById: new Map(nodes.map((n) => [n.id, n])),
  root: { id: null, type: "root", label: "", nodes: nodes.map((n) => n.id), clusters: [cluster("module:n", "module"), cluster("forward:2", "op")] },
  edges: [{ from: "x", to: "forward:0", tensors: ["x"] }],
};
const { dot } = graphToDot(graph, { tensors: { x: { dtype: "float32", shape: [2] }, s: { dtype: "float32", shape: [2] } } });
const attr = (line, name) => {
  const m = line.match(new RegExp(`\\s${name}=(?:"([^"]*)"|([^\\s\\]]+))`));
  return m && (m[1] ?? m[2]);
};

test("the viewer draws every node type in the palette's shape, style and colours", () => {
  const seen = new Set();
  for (const line of dot.split("\n").filter((l) => /class="tv-n-/.test(l))) {
    const type = line.match(/class="tv-n-(\w+)/)[1];
    seen.add(type);
    const want = palette.nodes[type];
    assert.ok(want, `palette.json has no entry for node type ${type}`);
    const got = { shape: attr(line, "shape"), style: attr(line, "style"), fill: attr(line, "fillcolor"), line: attr(line, "color") };
    assert.deepEqual(got, want, type);
  }
  assert.deepEqual([...seen].sort(), Object.keys(palette.nodes).sort());
});

test("clusters and edges are drawn in the palette's colours", () => {
  for (const [kind, want] of Object.entries(palette.clusters)) {
    const line = dot.split("\n").find((l) => l.includes(`class="tv-c-${kind}"`));
    assert.deepEqual({ style: attr(line, "style"), line: attr(line, "color") }, want, kind);
  }
  const edge = dot.split("\n").find((l) => l.startsWith("edge ["));
  assert.deepEqual({ line: attr(edge, "color"), text: attr(edge, "fontcolor") }, palette.edge);
});

test("the legend shows the palette's colours", () => {
  const key = (name) => CSS.match(new RegExp(`\\.tv-k-${name} \\{ background: ([^;]+); border-color: ([^;]+);`)).slice(1);
  for (const type of ["op", "prim", "module", "input", "output", "saved"]) {
    assert.deepEqual(key(type), [palette.nodes[type].fill, palette.nodes[type].line], type);
  }
  assert.equal(key("cluster")[1], palette.clusters.module.line);
});
