// The side-by-side view (sidebyside.js) in linkedom's DOM: a comparison document of two
// copies of the fixture, validated like any document, its matches followed by the
// selection, its overlay and its divergence list built from text only.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { parseHTML } from "linkedom";
import { loadFixture } from "./helpers.js";

let viewer;
before(async () => {
  const { window } = parseHTML("<!doctype html><html><body></body></html>");
  for (const name of ["document", "DOMParser", "Node", "HTMLElement", "Element", "Event", "MouseEvent", "CustomEvent"]) {
    if (window[name] !== undefined) globalThis[name] = window[name];
  }
  viewer = await import("../src/index.js");
});

const HOSTILE = '<img src=x onerror="window.pwned=1">"]{}';

/** Side 0 is the fixture; side 1 the fixture with one op inserted first (ids shift by one). */
function comparisonDocument() {
  const a = loadFixture();
  const b = loadFixture();
  const forward = b.traces.forward;
  const renamed = (id) => id.replace(/^forward:(\d+)/, (_, n) => `forward:${Number(n) + 1}`);
  for (const op of forward.ops) {
    op.id = renamed(op.id);
    if (op.parent) op.parent = renamed(op.parent);
  }
  for (const trace of Object.values(b.traces)) for (const op of trace.ops) if (op.fwd_op) op.fwd_op = renamed(op.fwd_op);
  forward.ops.unshift({ id: "forward:0", parent: null, level: 0, name: "torch.Tensor.to", label: "to", module_path: "", inputs: [], outputs: ["c0"] });
  a.traces.forward.ops[2].module_path = HOSTILE;
  const matches = [0, 1, 2, 3].map((i) => ({ ops: [`forward:${i}`, `forward:${i + 1}`], forward: i === 1 ? 0.5 : 0, grad: i >= 1 ? "nan" : 0 }));
  matches.push({ ops: ["backward:6", "backward:6"], grad: 0.5 });
  a.comparison = {
    kind: "runs", labels: ["fp32", HOSTILE], documents: [b], rtol: 1e-3, measure: "values", matches,
    divergences: [{ what: "first forward difference", ops: ["forward:1", "forward:2"], op: "torch.relu", module: "encoder.act",
      source: { file: "/x/model.py", line: 12, code: "h = F.relu(h)" }, value: 0.5, detail: HOSTILE }],
  };
  return a;
}

test("a comparison document is valid; a broken compared document is refused where it breaks", () => {
  const doc = comparisonDocument();
  assert.deepEqual(viewer.validateDocument(doc), { ok: true, error: null });
  const broken = comparisonDocument();
  broken.comparison.documents[0].traces.forward.ops[1].parent = "forward:99";
  const check = viewer.validateDocument(broken);
  assert.equal(check.ok, false);
  assert.equal(check.path, "comparison.documents[0].traces.forward.ops[1].parent");
  const nested = comparisonDocument();
  nested.comparison.documents[0].comparison = comparisonDocument().comparison;
  assert.equal(viewer.validateDocument(nested).path, "comparison.documents[0]");
  const noMatches = comparisonDocument();
  delete noMatches.comparison.matches;
  assert.equal(viewer.validateDocument(noMatches).ok, false);
});

test("matches map ops, subsymbols, tensors and modules across the sides", async () => {
  const doc = comparisonDocument();
  const { sidesOf } = await import("../src/sidebyside.js");
  assert.equal(sidesOf(doc)[0].comparison, undefined);
  const index = new viewer.MatchIndex(doc.comparison, sidesOf(doc));
  assert.equal(index.counterpart(0, "forward:1", 1), "forward:2");
  assert.equal(index.counterpart(1, "forward:2", 0), "forward:1");
  assert.equal(index.counterpart(0, "forward:1.0", 1), "forward:2"); // through its parent
  assert.equal(index.counterpart(0, "t1", 1), "t1"); // forward:1's first output
  assert.equal(index.counterpart(0, "module:encoder", 1), "module:encoder");
  assert.equal(index.counterpart(1, "forward:0", 0), ""); // the inserted cast has no match
  assert.equal(index.counterpart(0, "backward:6.1", 1), "backward:6");
});

test("colours: within tolerance, above it, not finite; hostile ids stay inside their CSS string", async () => {
  const { differenceColor, cssString, overlayCss, MatchIndex } = await import("../src/sidebyside.js");
  assert.equal(differenceColor(null, 1e-3), null);
  assert.equal(differenceColor(1e-4, 1e-3), "#bbf7d0");
  assert.notEqual(differenceColor(1e-2, 1e-3), differenceColor(10, 1e-3));
  assert.equal(differenceColor(NaN, 1e-3), "#d8b4fe");
  assert.equal(cssString('a"]{} b'), '"a\\22 \\5d \\7b \\7d \\20 b"');
  const doc = comparisonDocument();
  const css = overlayCss(new MatchIndex(doc.comparison, [doc, ...doc.comparison.documents]), doc.comparison);
  assert.ok(css.includes('[data-tv-id="forward:1"]'));
  assert.ok(css.includes('[data-tv-id="module:encoder"]')); // a module takes its ops' worst
  assert.ok(!css.includes("<img") && !css.includes('"]{}'));
});

test("mounted side by side: two viewers, selection follows the match, divergences listed as text", async () => {
  const el = document.createElement("div");
  document.body.appendChild(el);
  const handle = viewer.mountViewer(el, JSON.stringify(comparisonDocument()));
  const panes = el.querySelectorAll(".tv-sbs-pane");
  assert.equal(panes.length, 2);
  assert.equal(handle.models.length, 2);
  handle.models[0].set("selected", "forward:2");
  assert.equal(handle.models[1].get("selected"), "forward:3");
  assert.equal(el.querySelector(".tv-sbs-selection").textContent, `fp32: forward:2 ↔ ${HOSTILE}: forward:3 · forward 0 · gradient nan`);
  handle.models[1].set("selected", "forward:0"); // unmatched: the other side shows nothing
  assert.equal(handle.models[0].get("selected"), "");
  const item = el.querySelector(".tv-sbs-divergences li");
  assert.ok(item.textContent.includes("encoder.act") && item.textContent.includes("model.py:12"));
  assert.ok(item.textContent.includes(HOSTILE));
  item.querySelector("button").dispatchEvent(new Event("click", { bubbles: true }));
  assert.deepEqual(handle.models.map((m) => m.get("selected")), ["forward:1", "forward:2"]);
  assert.equal(el.querySelector("img"), null);
  assert.equal([...el.querySelectorAll(".tv-sbs-label")][1].textContent, HOSTILE);
  handle.destroy();
  assert.equal(el.querySelector(".tv-sbs"), null);
});

test("the widget's render shows a comparison side by side and a plain document as before", async () => {
  const { createModel } = await import("../src/model.js");
  const el = document.createElement("div");
  document.body.appendChild(el);
  const model = createModel({ document: comparisonDocument() });
  const cleanup = viewer.render({ model, el });
  assert.equal(el.querySelectorAll(".tv-sbs-pane").length, 2);
  model.set("document", loadFixture()); // a new document: drawn the way it asks
  assert.equal(el.querySelector(".tv-sbs"), null);
  assert.ok(el.querySelector(".tv-root"));
  cleanup();
  const plain = document.createElement("div");
  const stop = viewer.render({ model: createModel({ document: loadFixture() }), el: plain });
  assert.equal(plain.querySelector(".tv-sbs"), null);
  assert.ok(plain.querySelector(".tv-root"));
  stop();
});
