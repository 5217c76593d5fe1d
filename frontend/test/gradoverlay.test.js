// Gradient-flow overlay options: the per-module relative scale and the norms written on
// the nodes, as pure functions and in the viewer rendered into linkedom.
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { parseHTML } from "linkedom";
import { loadFixture, fixtureIndex } from "./helpers.js";
import { normRange, gradFlowStyle, modulePosition, paletteColor, RELATIVE_DECADES } from "../src/gradflow.js";

let mountViewer, window, tensorModule;
before(async () => {
  ({ window } = parseHTML("<!doctype html><html><body></body></html>"));
  for (const name of ["document", "DOMParser", "Node", "HTMLElement", "Element", "Event", "MouseEvent", "CustomEvent"]) {
    if (window[name] !== undefined) globalThis[name] = window[name];
  }
  ({ mountViewer } = await import("../src/index.js"));
  ({ tensorModule } = await import("../src/gradoverlay.js"));
});

test("module scale: each norm relative to the largest in its module", () => {
  const modules = { a1: "a", a2: "a", b1: "b", b2: "b", bad: "b" };
  const flow = { a1: { norm: 10, status: "ok" }, a2: { norm: 0.01, status: "ok" }, b1: { norm: 1e-6, status: "ok" }, b2: { norm: 1e-7, status: "ok" }, bad: { norm: "nan", status: "nan" } };
  const range = normRange(flow, "module", (name) => modules[name]);
  assert.equal(range.moduleMax.get("a"), 10);
  assert.equal(range.moduleMax.get("b"), 1e-6);
  // each module's largest gets the top colour, though b's is 10^7 times smaller than a's
  assert.equal(modulePosition("a1", 10, range), 1);
  assert.equal(modulePosition("b1", 1e-6, range), 1);
  assert.equal(gradFlowStyle(flow.b1, range, "b1").color, paletteColor(1));
  // one decade below the module max: 1 - 1/RELATIVE_DECADES; three or more decades: 0
  assert.ok(Math.abs(modulePosition("b2", 1e-7, range) - (1 - 1 / RELATIVE_DECADES)) < 1e-9);
  assert.equal(modulePosition("a2", 0.01, range), 0);
  assert.equal(gradFlowStyle(flow.bad, range, "bad").status, "nan");
  // the log scale, for contrast, puts b1 near the bottom
  assert.ok(gradFlowStyle(flow.b1, normRange(flow, "log"), "b1").color !== paletteColor(1));
});

test("a tensor's module: the open module cluster its producer (or a parameter's consumer) is drawn in", async () => {
  const { buildVisibleGraph } = await import("../src/visible.js");
  const ti = fixtureIndex().traces.get("forward");
  const open = { ti, graph: buildVisibleGraph(ti, new Set(["encoder"])) };
  assert.equal(tensorModule(open, "t0"), "encoder");
  assert.equal(tensorModule(open, "t1"), "encoder");
  assert.equal(tensorModule(open, "t2"), ""); // head: one op, drawn at the top level
  assert.equal(tensorModule(open, "fc1_weight"), "encoder");
  assert.equal(tensorModule(open, "no-such-tensor"), "");
  const closed = { ti, graph: buildVisibleGraph(ti, new Set()) };
  assert.equal(tensorModule(closed, "t0"), ""); // inside the collapsed encoder node
});

const until = async (predicate, what, ms = 10000) => {
  const start = Date.now();
  while (!predicate()) {
    if (Date.now() - start > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
};

test("the norms box writes each coloured node's norm on it; the module scale recolours", async () => {
  const el = document.createElement("div");
  document.body.appendChild(el);
  const { destroy } = mountViewer(el, loadFixture(), { expanded: ["encoder", "head"] });
  const pane = () => el.querySelector('.tv-graph-pane[data-tv-graph="forward"]');
  await until(() => el.querySelector('.tv-graph-pane[data-tv-graph="forward"][data-tv-ready="true"] svg'), "the forward graph");
  const change = (sel, value) => {
    const input = pane().querySelector(`[data-tv-graph-action="${sel}"]`);
    if (typeof value === "boolean") input.checked = value;
    else for (const option of input.querySelectorAll("option")) option.toggleAttribute("selected", option.getAttribute("value") === value);
    input.dispatchEvent(new window.Event("change"));
  };
  const labelOf = (id) => {
    const label = pane().querySelector(`g.node[data-tv-id="${id}"] > text.tv-norm-label`);
    return label ? label.textContent : null;
  };
  change("grad-flow", true);
  assert.equal(labelOf("forward:1"), null, "no norms until asked");
  change("grad-norms", true);
  assert.equal(labelOf("forward:1"), "0.42"); // act's output t1
  assert.equal(labelOf("forward:3"), "1"); // the loss t3
  const fill = (id) => pane().querySelector(`g.node[data-tv-id="${id}"] > :is(polygon, path, ellipse)`).style.getPropertyValue("fill");
  const logFill = fill("forward:1");
  change("grad-scale", "module");
  assert.equal(fill("forward:1"), paletteColor(1), "t1 is encoder's largest norm");
  assert.notEqual(logFill, paletteColor(1));
  assert.match(pane().querySelector(".tv-legend").textContent, /relative to the largest in its open module/);
  change("grad-norms", false);
  assert.equal(pane().querySelectorAll("text.tv-norm-label").length, 0);
  change("grad-flow", false);
  assert.equal(fill("forward:1"), "");
  destroy();
});
