// The worker-side SVG reader and the page-side builder (src/svgread.js, src/svgtree.js): Graphviz's real
// output round-trips, hostile content is dropped the same way sanitize.js drops it.
import { test } from "node:test";
import assert from "node:assert/strict";
import { parseHTML } from "linkedom";
import { svgToTree } from "../src/svgread.js";
import { buildSvg, insertInSlices, nextSliceSize } from "../src/svgtree.js";
import { layoutDot } from "../src/layout.js";

const noYield = () => Promise.resolve();

function texts(node, out = []) {
  for (const c of node.c) typeof c === "string" ? out.push(c) : texts(c, out);
  return out;
}

test("a real Graphviz layout reads into a tree with its nodes, titles and label text", async () => {
  const dot = 'digraph G { a [label="x < y & \\"z\\""]; a -> b [label="f32[2]"]; }';
  const { tree } = await layoutDot(dot, { lane: "svgtree-test" });
  assert.equal(tree.t, "svg");
  assert.ok(tree.a.viewBox);
  const all = texts(tree).join("|");
  assert.match(all, /x < y & "z"/);
  assert.match(all, /f32\[2\]/);
  assert.match(all, /a->b/);
});

test("entities are decoded once, whitespace between elements is dropped", () => {
  const tree = svgToTree('<?xml version="1.0"?>\n<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "x.dtd">\n<!-- c -->\n<svg viewBox="0 0 1 1">\n  <g class="node">\n    <text x="1">&amp;lt; &#60;&#x3e; &quot;</text>\n  </g>\n</svg>');
  const g = tree.c[0];
  assert.equal(tree.c.length, 1);
  assert.equal(g.a.class, "node");
  assert.deepEqual(g.c[0].c, ['&lt; <> "']);
});

test("elements off the allow-list go with their content; unsafe attributes go", () => {
  const tree = svgToTree(
    '<svg onload="alert(1)"><script>alert(1)</script><foreignObject><div>hi</div></foreignObject>' +
      '<a href="javascript:alert(1)"><text>in link</text></a><image href="x"/>' +
      '<polygon fill="url(https://evil/x)" stroke="red" points="0,0" style="x" onclick="y"/></svg>',
  );
  assert.deepEqual(tree.a, {});
  assert.equal(tree.c.length, 1);
  assert.deepEqual(tree.c[0], { t: "polygon", a: { stroke: "red", points: "0,0" }, c: [] });
});

test("malformed SVG is refused", () => {
  assert.throws(() => svgToTree("<svg><g></svg>"), /could not be read/);
  assert.throws(() => svgToTree("<svg><g>"), /could not be read/);
  assert.throws(() => svgToTree("<html></html>"), /could not be read/);
  assert.throws(() => svgToTree('<!DOCTYPE svg [<!ENTITY x "y">]><svg></svg>'), /could not be read/);
});

test("buildSvg makes SVG elements in order, text as text, and stops when cancelled", async () => {
  const { document } = parseHTML("<!doctype html><html><body></body></html>");
  const tree = svgToTree('<svg viewBox="0 0 2 2"><g class="node"><title>n0</title><text>&lt;img src=x onerror=alert(1)&gt;</text></g><g class="edge"></g></svg>');
  const svg = await buildSvg(tree, document, { yieldFn: noYield });
  assert.equal(svg.getAttribute("viewBox"), "0 0 2 2");
  assert.deepEqual([...svg.children].map((c) => c.getAttribute("class")), ["node", "edge"]);
  assert.equal(svg.querySelector("text").textContent, "<img src=x onerror=alert(1)>");
  assert.equal(svg.querySelectorAll("img").length, 0);
  const big = svgToTree(`<svg>${"<g><text>x</text></g>".repeat(2000)}</svg>`);
  const stopped = await buildSvg(big, document, { sliceMs: -1, yieldFn: noYield, cancelled: () => true });
  assert.equal(stopped, null);
});

test("insertInSlices puts the graph in slices, one wait between each, in order, and stops when cancelled", async () => {
  const { document } = parseHTML("<!doctype html><html><body><div id=c><p>old</p></div></body></html>");
  const groups = Array.from({ length: 50 }, (_, i) => `<g class="node"><title>n${i}</title><text>t${i}</text></g>`).join("");
  const source = `<svg viewBox="0 0 9 9"><g class="graph"><title>G</title><polygon points="0,0"/>${groups}</g></svg>`;
  const container = document.getElementById("c");
  const sizes = [];
  let svg = await buildSvg(svgToTree(source), document, { yieldFn: noYield });
  const graph = svg.firstElementChild;
  const seen = () => graph.querySelectorAll("g.node").length;
  // each group is 3 elements: slices of at most 10 elements hold 4 groups (12 >= 10 stops it)
  const done = await insertInSlices(container, svg, { maxElements: 10, waitFn: async () => sizes.push(svg.isConnected ? seen() : -1) });
  assert.equal(done, true);
  assert.equal(sizes[0], -1, "the old content stays until the first turn");
  assert.deepEqual(sizes.slice(1), [4, 8, 12, 16, 20, 24, 28, 32, 36, 40, 44, 48]);
  assert.equal(container.children.length, 1);
  assert.deepEqual([...graph.querySelectorAll("g.node > title")].map((t) => t.textContent), Array.from({ length: 50 }, (_, i) => `n${i}`));
  assert.equal(graph.firstElementChild.localName, "title", "the graph's own title and background stay first");

  svg = await buildSvg(svgToTree(source), document, { yieldFn: noYield });
  let turns = 0;
  const stopped = await insertInSlices(container, svg, { maxElements: 10, waitFn: async () => turns++, cancelled: () => turns > 2 });
  assert.equal(stopped, false);
  assert.equal(svg.querySelectorAll("g.node").length, 8);
});

test("insertInSlices with targetFrameMs: slices grow while frames are cheap and shrink when one runs long", async () => {
  const { document } = parseHTML("<!doctype html><html><body><div id=c></div></body></html>");
  // 4000 groups of 3 elements; the render time reported after each slice: cheap, cheap, then one frame at 4x the target
  const groups = Array.from({ length: 4000 }, (_, i) => `<g class="node"><title>n${i}</title><text>t${i}</text></g>`).join("");
  const svg = await buildSvg(svgToTree(`<svg><g class="graph">${groups}</g></svg>`), document, { yieldFn: noYield });
  const graph = svg.firstElementChild;
  const counts = [];
  const renderMs = [0, 5, 5, 160, 5];
  const waitFn = async () => {
    counts.push(graph.querySelectorAll("g.node").length);
    return renderMs[counts.length - 1] ?? 5;
  };
  assert.equal(await insertInSlices(document.getElementById("c"), svg, { maxElements: 300, targetFrameMs: 40, waitFn }), true);
  const slices = counts.slice(1).map((n, i) => n - counts[i]); // groups per slice
  // 300 elements (100 groups), then x3 (at most), then 900 * 40 / 5 capped at 2700, then 2700 * 40 / 160 = 675
  assert.deepEqual(slices.slice(0, 4), [100, 300, 900, 225]);
  assert.equal(graph.querySelectorAll("g.node").length, 4000);
  assert.deepEqual([...graph.querySelectorAll("g.node > title")].map((t) => t.textContent).slice(0, 3), ["n0", "n1", "n2"]);
});

test("nextSliceSize keeps within its bounds", () => {
  assert.equal(nextSliceSize(800, 20, 40), 1600);
  assert.equal(nextSliceSize(800, 0, 40), 2400);
  assert.equal(nextSliceSize(800, 80, 40), 400);
  assert.equal(nextSliceSize(300, 400, 40), 200);
  assert.equal(nextSliceSize(6000, 1, 40), 6400);
});
