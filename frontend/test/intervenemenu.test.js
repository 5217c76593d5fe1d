// The right-click intervention menu, in the viewer rendered into linkedom: which nodes
// take it, what it says without a kernel, and the message a choice sends with one.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { parseHTML } from "linkedom";
import { loadFixture } from "./helpers.js";

let window, render, createModel, canIntervene;
before(async () => {
  ({ window } = parseHTML("<!doctype html><html><body></body></html>"));
  for (const name of ["document", "DOMParser", "Node", "HTMLElement", "Element", "Event", "MouseEvent", "CustomEvent"]) {
    if (window[name] !== undefined) globalThis[name] = window[name];
  }
  ({ render } = await import("../src/viewer.js"));
  ({ createModel } = await import("../src/model.js"));
  ({ canIntervene } = await import("../src/intervenemenu.js"));
});

const until = async (predicate, what, ms = 10000) => {
  const start = Date.now();
  while (!predicate()) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

async function mount(live) {
  const sent = [];
  const model = createModel({ document: loadFixture(), live, expanded: ["encoder"] }, { onSend: (m) => sent.push(m) });
  const el = document.createElement("div");
  document.body.appendChild(el);
  const cleanup = render({ model, el, options: {} });
  await until(() => el.querySelector('.tv-graph-pane[data-tv-graph="backward"][data-tv-ready="true"] svg'), "the backward graph");
  const rightClick = (sel) => {
    const event = new window.Event("contextmenu", { bubbles: true, cancelable: true });
    event.clientX = 120;
    event.clientY = 80;
    el.querySelector(sel).dispatchEvent(event);
    return event;
  };
  return { el, model, sent, rightClick, menu: () => el.querySelector("[data-tv-intervene-menu]"), cleanup };
}

test("backward ops and modules take an intervention; forward ops and tensors do not", () => {
  assert.ok(canIntervene("backward:3"));
  assert.ok(canIntervene("module:encoder"));
  assert.ok(!canIntervene("forward:1"));
  assert.ok(!canIntervene("t3"));
  assert.ok(!canIntervene(null));
});

test("without a kernel the menu opens, disabled, and says interventions need a live kernel", async () => {
  const { menu, rightClick, model, sent, cleanup } = await mount(false);
  assert.equal(menu().hidden, true);
  const event = rightClick('[data-tv-graph="backward"] g.node[data-tv-id="backward:1"] > text');
  assert.equal(event.defaultPrevented, true);
  assert.equal(menu().hidden, false);
  assert.equal(model.get("selected"), "backward:1");
  const items = menu().querySelectorAll("[data-tv-menu-edit]");
  assert.deepEqual([...items].map((b) => b.getAttribute("data-tv-menu-edit")), ["zero", "× 0.5", "× 2", "clip norm 1", "clamp ±1e-3"]);
  assert.ok([...items].every((b) => b.disabled));
  assert.match(menu().querySelector("[data-tv-menu-note]").textContent, /need a live kernel/);
  items[0].dispatchEvent(new window.Event("click"));
  assert.deepEqual(sent, []);
  // a forward op keeps the browser's own menu
  menu().dispatchEvent(Object.assign(new window.Event("keydown"), { key: "Escape" }));
  assert.equal(menu().hidden, true);
  const forward = rightClick('[data-tv-graph="forward"] g.node[data-tv-id="forward:2"] > text');
  assert.equal(forward.defaultPrevented, false);
  assert.equal(menu().hidden, true);
  cleanup && cleanup();
});

test("with a live kernel a choice sends the intervene message for the node and closes", async () => {
  const { el, model, menu, rightClick, sent, cleanup } = await mount(true);
  rightClick('[data-tv-graph="backward"] g.cluster[data-tv-id="module:encoder"] > text');
  assert.equal(menu().hidden, false);
  assert.match(menu().textContent, /Edit the gradient at/);
  assert.equal(menu().querySelector("[data-tv-menu-note]"), null);
  menu().querySelector('[data-tv-menu-edit="× 0.5"]').dispatchEvent(new window.Event("click"));
  assert.deepEqual(sent, [{ type: "intervene", target: "module:encoder", edit: ["scale", 0.5] }]);
  assert.equal(menu().hidden, true);
  // grad flow turns on for the effect, and stays on in the document the kernel sends back
  const box = () => el.querySelector('[data-tv-graph="backward"] [data-tv-graph-action="grad-flow"]');
  assert.equal(box().checked, true);
  model.set("document", loadFixture());
  await until(() => el.querySelector('.tv-graph-pane[data-tv-graph="backward"][data-tv-ready="true"] svg'), "the redrawn backward graph");
  assert.equal(box().checked, true);
  assert.equal(el.querySelector('[data-tv-graph="backward"] .tv-legend').hidden, false);
  cleanup && cleanup();
});
