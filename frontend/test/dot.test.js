import { test } from "node:test";
import assert from "node:assert/strict";
import { Graphviz } from "@hpcc-js/wasm-graphviz";
import { DOMParser } from "linkedom";
import { escapeDotString, graphToDot, tensorLabel, nodeLabelLines, relativeModule } from "../src/dot.js";
import { buildVisibleGraph } from "../src/visible.js";
import { indexDocument } from "../src/document.js";
import { loadFixture } from "./helpers.js";

const HOSTILE_MODULE = "<img src=x onerror=alert(1)>";
const HOSTILE_LABEL = '"];\n evil [label="x';

/** The fixture with user strings an attacker controls. */
function hostileDocument() {
  const doc = loadFixture();
  for (const op of doc.traces.forward.ops) {
    if (op.module_path === "head") op.module_path = HOSTILE_MODULE;
    if (op.id === "forward:3") op.label = HOSTILE_LABEL;
  }
  doc.traces.forward.ops[0].label = "back\\slash \\N \\G & &amp; <b>";
  return doc;
}

test("tensor labels are short dtype + shape", () => {
  assert.equal(tensorLabel({ dtype: "float32", shape: [4, 16] }), "f32[4,16]");
  assert.equal(tensorLabel({ dtype: "torch.bfloat16", shape: [] }), "bf16[]");
  assert.equal(tensorLabel({ dtype: "weird", shape: [2] }), "weird[2]");
});

test("escaping neutralises quotes, backslashes, newlines and entities", () => {
  assert.equal(escapeDotString('a"b'), 'a\\"b');
  assert.equal(escapeDotString("a\\b"), "a\\\\b");
  assert.equal(escapeDotString("a\nb"), "a\\nb");
  assert.equal(escapeDotString("a&lt;b"), "a&amp;lt;b");
  assert.equal(escapeDotString("a\u0000b\u0007c"), "abc");
  assert.equal(escapeDotString(HOSTILE_LABEL), '\\"];\\n evil [label=\\"x');
});

test("labels show the module relative to the cluster and the param count", () => {
  assert.equal(relativeModule("encoder.fc1", "encoder"), "fc1");
  assert.equal(relativeModule("encoder", "encoder"), "");
  assert.equal(relativeModule("head", ""), "head");
  assert.deepEqual(nodeLabelLines({ type: "op", label: "linear", module: "encoder.fc1", clusterModule: "encoder", expandable: true, params: ["w", "b"] }), ["▸ linear", "fc1 · 2 params"]);
  assert.deepEqual(nodeLabelLines({ type: "module", label: "transformer.h.3", count: 41 }), ["▸ transformer.h.3", "(41 ops)"]);
});

test("DOT names are generated; document strings appear only inside quoted labels", () => {
  const index = indexDocument(hostileDocument());
  const ti = index.traces.get("forward");
  const { dot, items } = graphToDot(buildVisibleGraph(ti, new Set(["encoder"])), ti);
  for (const name of items.keys()) assert.match(name, /^(n\d+|cluster_\d+|n\d+->n\d+)$/);
  // every line is a statement we wrote: the hostile newline did not start a new one
  assert.ok(!/^\s*evil/m.test(dot));
  assert.ok(dot.includes('\\"];\\n evil [label=\\"x'));
});

test("Graphviz lays the hostile graph out with exactly our nodes, strings kept as text", async () => {
  const graphviz = await Graphviz.load();
  const index = indexDocument(hostileDocument());
  const ti = index.traces.get("forward");
  const graph = buildVisibleGraph(ti, new Set(["encoder"]));
  const { dot } = graphToDot(graph, ti);
  const svg = graphviz.layout(dot, "svg", "dot");
  const parsed = new DOMParser().parseFromString(svg, "image/svg+xml");
  const nodes = parsed.querySelectorAll("g.node");
  assert.equal(nodes.length, graph.nodes.length);
  assert.equal(parsed.querySelectorAll("img, script, foreignObject").length, 0);
  const texts = [...parsed.querySelectorAll("text")].map((t) => t.textContent);
  assert.ok(texts.includes(`${HOSTILE_MODULE} · 2 params`), "the module name is shown literally");
  assert.ok(texts.includes('▸ "];'), "the label's first line is shown literally");
  assert.ok(texts.includes(' evil [label="x'), "its second line too");
  assert.ok(texts.some((t) => t.includes("back\\slash \\N \\G & &amp; <b>")), "backslashes and entities are not interpreted");
});
