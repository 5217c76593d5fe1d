// The viewer's tabs: which a document has, and what each holds (graph panes, the trace
// text, the saved tensors, the debugging tools, the transforms) beside the details panel.
// Each tab is built the first time it is shown; `app` is the App of viewer.js.

import { h } from "./dom.js";
import { TRACE_TITLES } from "./document.js";
import { describeOp } from "./opnames.js";
import { TraceText } from "./tracetext.js";
import { SavedPanel } from "./saved.js";
import { TransformsPanel } from "./transforms.js";
import { DebugToolsPanel, hasDebugTools } from "./debugtools.js";

/** The tabs of this document, in order: {id, label, create()}. */
export function defineTabs(app) {
  const { kinds } = app.index;
  const tabs = [];
  if (kinds.includes("forward") && kinds.includes("backward")) {
    tabs.push({ id: "forward_backward", label: "Forward ↔ Backward", create: () => fwdBwdTab(app) });
  }
  for (const kind of kinds) tabs.push({ id: kind, label: TRACE_TITLES[kind] || kind, create: () => traceTab(app, kind) });
  if (app.index.saved.length) tabs.push({ id: "saved", label: "Saved tensors", create: () => savedTab(app) });
  if (hasDebugTools(app.index, app.model.get("live"))) tabs.push({ id: "debugging", label: "NaN/Inf · interventions", create: () => debugTab(app) });
  if (app.index.transforms.length) tabs.push({ id: "transforms", label: "Transforms", create: () => transformsTab(app) });
  return tabs;
}

/** "follow selection": selecting in one pane opens and shows its region in the other. */
function followSwitch(app) {
  const box = h("input", { attrs: { type: "checkbox" }, data: { action: "follow" } });
  box.checked = app.local.follow;
  box.addEventListener("change", () => {
    app.local.follow = box.checked;
    if (box.checked) app.refresh(new Set(["selected"]));
  });
  return h("label", { class: "tv-follow", title: "Selecting a forward module or op opens its region in the backward pane, and the reverse" }, box, " follow selection");
}

/** The side column: the step panel (when `withSteps`) above the details panel. */
function sideColumn(withSteps) {
  const detailsSlot = h("div", {});
  const stepsSlot = withSteps ? h("div", {}) : null;
  return { detailsSlot, stepsSlot, sideEl: h("div", { class: "tv-col tv-side" }, stepsSlot, detailsSlot) };
}

function fwdBwdTab(app) {
  const forward = app.graphView("forward", "Forward");
  const backward = app.graphView("backward", "Backward");
  const side = sideColumn(true);
  side.sideEl.prepend(followSwitch(app));
  const el = h("div", { class: "tv-panel-tab tv-layout-fwdbwd", data: { panel: "forward_backward" } },
    h("div", { class: "tv-col" }, forward.el), h("div", { class: "tv-col" }, backward.el), side.sideEl);
  return { el, views: [forward, backward], texts: [], detailsSlot: side.detailsSlot, stepsSlot: side.stepsSlot };
}

function traceTab(app, kind) {
  const view = app.graphView(kind, TRACE_TITLES[kind] || kind);
  const text = new TraceText(app.index.traces.get(kind), (id) => app.select(id));
  const side = sideColumn(kind === "backward");
  const el = h("div", { class: "tv-panel-tab tv-layout-trace", data: { panel: kind } },
    h("div", { class: "tv-col" }, view.el), h("div", { class: "tv-col" }, text.el), side.sideEl);
  return { el, views: [view], texts: [text], detailsSlot: side.detailsSlot, stepsSlot: side.stepsSlot, kind };
}

function debugTab(app) {
  const actions = app.model.get("live") ? {
    intervene: (edit) => app.intervene(app.model.get("selected") || "", edit),
    clear: () => app.model.send({ type: "clear_interventions" }),
  } : null;
  const debug = new DebugToolsPanel(app.index, (id) => app.select(id), (id) => describeOp(app.index, id), actions);
  const side = sideColumn(false);
  const el = h("div", { class: "tv-panel-tab tv-layout-saved", data: { panel: "debugging" } }, h("div", { class: "tv-col" }, debug.el), side.sideEl);
  return { el, views: [], texts: [], debug, detailsSlot: side.detailsSlot, stepsSlot: null };
}

function savedTab(app) {
  const saved = new SavedPanel(app.index.saved, (id) => app.select(id), (id) => describeOp(app.index, id));
  const side = sideColumn(false);
  const el = h("div", { class: "tv-panel-tab tv-layout-saved", data: { panel: "saved" } }, h("div", { class: "tv-col" }, saved.el), side.sideEl);
  return { el, views: [], texts: [], saved, detailsSlot: side.detailsSlot, stepsSlot: null };
}

function transformsTab(app) {
  const panel = new TransformsPanel(app.index.transforms, { limits: app.limits });
  const el = h("div", { class: "tv-panel-tab tv-layout-transforms", data: { panel: "transforms" } }, panel.el);
  return { el, views: [], texts: [], detailsSlot: null, stepsSlot: null, transforms: panel };
}
