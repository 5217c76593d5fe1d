// The whole viewer rendered into linkedom's DOM (no browser): tabs, a real wasm layout,
// clicks through the model, error boxes, and hostile strings staying text. Real-browser
// tests live with the Python side; this keeps `npm test` honest about the wiring.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { parseHTML } from "linkedom";
import { loadFixture } from "./helpers.js";

let mountViewer;
let window;
before(async () => {
  ({ window } = parseHTML("<!doctype html><html><body></body></html>"));
  for (const name of ["document", "DOMParser", "Node", "HTMLElement", "Element", "Event", "MouseEvent", "CustomEvent"]) {
    if (window[name] !== undefined) globalThis[name] = window[name];
  }
  ({ mountViewer } = await import("../src/index.js"));
});

const until = async (predicate, what, ms = 10000) => {
  const start = Date.now();
  while (!predicate()) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

function mount(doc, options) {
  const el = document.createElement("div");
  document.body.appendChild(el);
  return { el, ...mountViewer(el, doc, options) };
}

const graphReady = (el, kind) => el.querySelector(`.tv-graph-pane[data-tv-graph="${kind}"][data-tv-ready="true"] svg`);

test("opens on Forward ↔ Backward with one tab per section of the document", async () => {
  const { el, destroy } = mount(loadFixture());
  const tabs = [...el.querySelectorAll("[data-tv-tab]")].map((b) => b.getAttribute("data-tv-tab"));
  assert.deepEqual(tabs, ["forward_backward", "forward", "augmented_forward", "backward", "saved", "transforms"]);
  await until(() => graphReady(el, "forward") && graphReady(el, "backward"), "both graphs");
  assert.ok(el.querySelector('g.node[data-tv-id="forward:0"]'));
  assert.ok(el.querySelector('g.node[data-tv-id="backward:8"]'));
  destroy();
});

test("a click selects through the model and links forward to backward", async () => {
  const { el, model, destroy } = mount(loadFixture());
  await until(() => graphReady(el, "forward") && graphReady(el, "backward"), "both graphs");
  const node = el.querySelector('g.node[data-tv-id="forward:2"] > text');
  node.dispatchEvent(new window.Event("click", { bubbles: true }));
  assert.equal(model.get("selected"), "forward:2");
  assert.ok(el.querySelector('g.node[data-tv-id="forward:2"]').classList.contains("tv-selected"));
  const linked = [...el.querySelectorAll('[data-tv-graph="backward"] g.node.tv-highlight')].map((g) => g.getAttribute("data-tv-id")).sort();
  assert.deepEqual(linked, ["backward:2", "backward:3", "backward:4", "backward:5"]);
  assert.match(el.querySelector(".tv-details").textContent, /torch\.nn\.functional\.linear/);
  destroy();
});

test("local stepping: continue stops at the recorded NaN", async () => {
  const { el, model, destroy } = mount(loadFixture());
  el.querySelector('[data-tv-action="continue"]').dispatchEvent(new window.Event("click", { bubbles: true }));
  assert.equal(model.get("current_step"), 8);
  assert.match(el.querySelector(".tv-status").textContent, /^step 9 \/ 10/);
  destroy();
});

test("bad documents show a message instead of throwing", () => {
  const cases = [
    [{ format: "nope" }, /Not a thunderviz file/],
    [{ ...loadFixture(), version: 3 }, /newer thunderviz \(format version 3\)/],
    [{ format: "thunderviz", version: 1 }, /"traces" is missing/],
  ];
  for (const [doc, message] of cases) {
    const { el, destroy } = mount(doc);
    assert.match(el.querySelector(".tv-error").textContent, message);
    destroy();
  }
});

test("hostile names render as text: no element comes from a document string", async () => {
  const doc = loadFixture();
  const evil = "<img src=x onerror=alert(1)>";
  doc.title = evil;
  for (const op of doc.traces.forward.ops) {
    if (op.module_path === "head") op.module_path = evil;
    op.args_repr = evil;
  }
  const { el, model, destroy } = mount(doc, { tab: "forward" });
  await until(() => graphReady(el, "forward"), "forward graph");
  model.set("selected", "forward:2");
  assert.equal(el.querySelectorAll("img, script, foreignObject").length, 0);
  assert.equal(el.querySelector(".tv-title").textContent, evil);
  assert.ok(el.querySelector(".tv-details").textContent.includes(evil));
  assert.ok([...el.querySelectorAll("svg text")].some((t) => t.textContent.includes(evil)));
  destroy();
});

test("mountViewer's ready settles once the view is built, or once a bad document's error shows", async () => {
  const good = mount(loadFixture());
  await good.ready;
  assert.ok(good.el.querySelector("[data-tv-tab]"));
  assert.equal(good.el.querySelector(".tv-loading"), null);
  good.destroy();
  const doc = loadFixture();
  doc.traces.forward.ops.at(-1).line = "seven";
  const bad = mount(doc);
  await bad.ready;
  assert.match(bad.el.querySelector(".tv-error").textContent, /traces\.forward\.ops\[\d+\]\.line/);
  bad.destroy();
});
