// The debugging tab's panel: ledger marks on both traces, the ledger and intervention tables,
// clicks selecting ops, and document strings staying text.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { parseHTML } from "linkedom";
import { loadFixture } from "./helpers.js";
import { indexDocument } from "../src/document.js";

let DebugToolsPanel, ledgerMarks, hasDebugTools, describeEdit, mountViewer;
before(async () => {
  const { window } = parseHTML("<!doctype html><html><body></body></html>");
  for (const name of ["document", "DOMParser", "Node", "HTMLElement", "Element", "Event", "MouseEvent", "CustomEvent"]) {
    if (window[name] !== undefined) globalThis[name] = window[name];
  }
  ({ DebugToolsPanel, ledgerMarks, hasDebugTools, describeEdit } = await import("../src/debugtools.js"));
  ({ mountViewer } = await import("../src/index.js"));
});

function withTools() {
  const doc = loadFixture();
  // sqrt-of-relu shaped: born in the mul's backward, carried on, healed in the relu's
  doc.nan_ledger = [
    { op: "backward:1", status: "born", bad_inputs: [], bad_outputs: ["t9"] },
    { op: "backward:2", status: "propagated", bad_inputs: ["t9"], bad_outputs: ["t10"] },
    { op: "backward:6", status: "healed", bad_inputs: ["t10"], bad_outputs: [] },
  ];
  doc.interventions = [
    { target: "module fc1", kind: "module", edit: { kind: "scale", params: [0.5] }, names: ["fc1", "x"], op: "module:fc1", first_step: 6 },
    { target: "backward:4 (<img src=x onerror=alert(1)>)", kind: "backward_op", edit: { kind: "noise", params: [0.1], seed: 3 }, names: ["t4"], op: "backward:4", first_step: 4 },
  ];
  return indexDocument(doc);
}

test("the ledger marks backward ops and the forward ops they came from", () => {
  const marks = ledgerMarks(withTools());
  assert.equal(marks.get("backward:1"), "born");
  assert.equal(marks.get("backward:2"), "propagated");
  assert.equal(marks.get("backward:6"), "healed");
  assert.equal(marks.get("forward:3"), "born"); // backward:1's forward op
  assert.equal(marks.get("forward:2"), "propagated");
  assert.equal(marks.get("forward:1"), "healed");
  assert.equal(marks.has("backward:0"), false);
});

test("a document without ledger or interventions has no debugging tab", () => {
  assert.equal(hasDebugTools(indexDocument(loadFixture())), false);
  assert.equal(hasDebugTools(withTools()), true);
});

test("edits are described as the user wrote them", () => {
  assert.equal(describeEdit({ kind: "zero", params: [] }), "zero");
  assert.equal(describeEdit({ kind: "clamp", params: [-1, 1] }), "clamp(-1, 1)");
  assert.equal(describeEdit({ kind: "noise", params: [0.1], seed: 3 }), "noise(0.1, seed 3)");
  assert.equal(describeEdit({ kind: "custom", params: [], name: "halve" }), "custom halve");
});

test("rows select their op; hostile strings stay text", () => {
  const selected = [];
  const panel = new DebugToolsPanel(withTools(), (id) => selected.push(id), (id) => `op ${id}`);
  const ledgerRows = panel.el.querySelectorAll("[data-tv-ledger-op]");
  assert.deepEqual([...ledgerRows].map((r) => r.getAttribute("data-tv-ledger-op")), ["backward:1", "backward:2", "backward:6"]);
  assert.match(panel.el.textContent, /1 born, 1 healed, 1 propagated/);
  ledgerRows[2].dispatchEvent(new Event("click"));
  const editRows = panel.el.querySelectorAll("[data-tv-intervention]");
  assert.equal(editRows.length, 2);
  editRows[1].dispatchEvent(new Event("click"));
  editRows[0].dispatchEvent(new Event("click")); // a module: not an op, nothing to select
  assert.deepEqual(selected, ["backward:6", "backward:4"]);
  assert.equal(panel.el.querySelector("img"), null);
  assert.match(panel.el.textContent, /noise\(0\.1, seed 3\)/);
  panel.mark({ selected: "backward:4" });
  assert.ok(editRows[1].classList.contains("tv-selected"));
  assert.ok(!ledgerRows[0].classList.contains("tv-selected"));
});

test("the viewer shows the debugging tab only when the document has a ledger or interventions", () => {
  const tabsOf = (doc) => {
    const el = document.createElement("div");
    document.body.appendChild(el);
    const mounted = mountViewer(el, doc);
    return { el, ...mounted, tabs: [...el.querySelectorAll("[data-tv-tab]")].map((b) => b.getAttribute("data-tv-tab")) };
  };
  const plain = tabsOf(loadFixture());
  assert.ok(!plain.tabs.includes("debugging"));
  plain.destroy();
  const doc = loadFixture();
  doc.nan_ledger = [{ op: "backward:6", status: "healed", bad_inputs: ["t10"], bad_outputs: [] }];
  const tools = tabsOf(doc);
  assert.ok(tools.tabs.includes("debugging"));
  tools.el.querySelector('[data-tv-tab="debugging"]').dispatchEvent(new Event("click"));
  tools.el.querySelector('[data-tv-ledger-op="backward:6"]').dispatchEvent(new Event("click"));
  assert.equal(tools.model.get("selected"), "backward:6");
  assert.ok(tools.el.querySelector('[data-tv-ledger-op="backward:6"]').classList.contains("tv-selected"));
  tools.destroy();
});

test("with a live kernel, the buttons send the edit for the selection", () => {
  const sent = [];
  const actions = { intervene: (edit) => sent.push(["intervene", edit]), clear: () => sent.push(["clear"]) };
  const panel = new DebugToolsPanel(withTools(), () => {}, (id) => `op ${id}`, actions);
  const zero = panel.el.querySelector('[data-tv-edit="zero"]');
  assert.equal(zero.disabled, true); // nothing selected yet
  panel.mark({ selected: "module:fc1" });
  assert.equal(zero.disabled, false);
  assert.match(panel.el.querySelector("[data-tv-intervene-controls]").textContent, /at op module:fc1/);
  zero.dispatchEvent(new Event("click"));
  panel.el.querySelector('[data-tv-edit="× 0.5"]').dispatchEvent(new Event("click"));
  panel.el.querySelector('[data-tv-edit="clear"]').dispatchEvent(new Event("click"));
  assert.deepEqual(sent, [["intervene", "zero"], ["intervene", ["scale", 0.5]], ["clear"]]);
  const offline = new DebugToolsPanel(withTools(), () => {}, String, null);
  assert.equal(offline.el.querySelector("[data-tv-intervene-controls]"), null);
});

test("both graphs mark the ledger's ops: backward op by its status, forward op by its worst", async () => {
  const doc = withTools().doc;
  const el = document.createElement("div");
  document.body.appendChild(el);
  const { destroy } = mountViewer(el, doc, { expanded: ["fc1", "fc2", "encoder", "head"] });
  const ready = (kind) => el.querySelector(`.tv-graph-pane[data-tv-graph="${kind}"][data-tv-ready="true"] svg`);
  const start = Date.now();
  while (!(ready("forward") && ready("backward"))) {
    if (Date.now() - start > 10000) throw new Error("timed out waiting for both graphs");
    await new Promise((r) => setTimeout(r, 10));
  }
  const statusOf = (kind, id) => {
    const node = el.querySelector(`[data-tv-graph="${kind}"] g.node[data-tv-id="${id}"]`);
    assert.ok(node, `${id} drawn in ${kind}`);
    return ["born", "healed", "propagated"].filter((s) => node.classList.contains(`tv-ledger-${s}`));
  };
  assert.deepEqual(statusOf("backward", "backward:1"), ["born"]);
  assert.deepEqual(statusOf("backward", "backward:2"), ["propagated"]);
  assert.deepEqual(statusOf("backward", "backward:6"), ["healed"]);
  assert.deepEqual(statusOf("backward", "backward:0"), []);
  assert.deepEqual(statusOf("forward", "forward:3"), ["born"]);
  assert.deepEqual(statusOf("forward", "forward:1"), ["healed"]);
  // the key explains each mark
  const key = el.querySelector('[data-tv-graph="backward"] [data-tv-graph-action="key"]');
  for (const s of ["born", "healed", "propagated"]) assert.ok(key.querySelector(`.tv-k-ledger-${s}`), `key has ${s}`);
  assert.match(key.textContent, /NaN\/Inf born here/);
  destroy();
});
