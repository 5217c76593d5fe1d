// A graph pane's controls: the toolbar (zoom, fit, collapse, level, overlay, export) and
// the pointer: clicks select or toggle, drag pans, Ctrl/Cmd + wheel zooms. Kept apart from
// graphview.js, which draws and marks; both act on the pane through its public fields.

import { h } from "./dom.js";
import { maxOf } from "./arrays.js";
import { legend } from "./legend.js";

export const READABLE_ZOOM = 1;

/** The pane's toolbar. */
export function graphToolbar(view) {
  const { options } = view;
  const button = (label, title, action, onClick) =>
    h("button", { title, data: { "graph-action": action }, on: { click: onClick } }, label);
  const items = [
    h("span", { class: "tv-pane-title" }, options.title),
    button("−", "Zoom out (Ctrl+wheel)", "zoom-out", () => view.setZoom(view.zoom / 1.25)),
    button("+", "Zoom in (Ctrl+wheel)", "zoom-in", () => view.setZoom(view.zoom * 1.25)),
    button("Fit", "Show the whole graph", "fit", () => view.fit()),
    button("1:1", "Readable size (labels 10 px), centred on the selection", "readable", () => {
      view.setZoom(READABLE_ZOOM);
      view.centreOnFocus(true);
    }),
  ];
  if (options.onSetExpanded) {
    items.push(
      button("Default", "Default collapse", "default", () => options.onSetExpanded(options.defaultExpansion())),
      button("Collapse all", "Collapse every module and op", "collapse-all", () => options.onSetExpanded(new Set())),
    );
    const deepest = maxOf(view.ti.depth.values(), 0);
    if (deepest > 0) items.push(levelControl(view, deepest));
  }
  if (options.gradFlow && Object.keys(options.gradFlow).length) {
    const controls = view.overlay.controls(options.onGradFlowToggle, () => view.applyGradFlow());
    view.gradFlowBox = controls.box;
    items.push(...controls.items);
  }
  items.push(
    button("SVG", "Save this graph as it is drawn (expansion, selection) as an SVG file", "export-svg", () => view.exportPicture("svg")),
    button("PNG", "Save this graph as it is drawn as a PNG file", "export-png", () => view.exportPicture("png")),
    legend(),
  );
  return h("div", { class: "tv-toolbar" }, items);
}

/**
 * "symbols: level N": open every op above level N to show its subsymbols (module
 * expansions are kept; the node limit still applies).
 */
function levelControl(view, deepest) {
  const select = h(
    "select",
    { title: "Show subsymbols down to this level", data: { "graph-action": "level" } },
    Array.from({ length: deepest + 1 }, (_, level) => h("option", { attrs: { value: level } }, `level ${level}`)),
  );
  select.addEventListener("change", () => {
    const level = Number(select.value);
    const current = view.options.currentExpansion ? view.options.currentExpansion() : new Set();
    const next = new Set([...current].filter((id) => !view.ti.ops.has(id)));
    for (const [id, depth] of view.ti.depth) if (depth < level && view.ti.children.has(id)) next.add(id);
    view.options.onSetExpanded(next);
  });
  return h("label", {}, "symbols ", select);
}

/** Clicks, double-clicks, right-clicks, drag to pan and Ctrl+wheel to zoom on the pane's canvas. */
export function bindPaneEvents(view) {
  const idOf = (target) => {
    const g = target.closest && target.closest("g.node, g.cluster");
    return g ? g.getAttribute("data-tv-id") : null;
  };
  view.canvas.addEventListener("click", (event) => {
    if (view.dragMoved) return;
    const id = idOf(event.target);
    if (id === null) return;
    if (event.target.closest(".tv-toggle")) return view.options.onToggle(id);
    // a double-click opens without selecting: remember what its first click replaced
    if (event.detail === 1) view.beforeClick = view.options.currentSelection ? view.options.currentSelection() : null;
    view.options.onSelect(view.selectionOf(id));
  });
  view.canvas.addEventListener("contextmenu", (event) => {
    const id = idOf(event.target);
    if (id !== null && view.options.onContextMenu && view.options.onContextMenu(view.selectionOf(id), event)) event.preventDefault();
  });
  view.canvas.addEventListener("dblclick", (event) => {
    const g = event.target.closest && event.target.closest("g.node");
    if (g && g.classList.contains("tv-expandable") && !event.target.closest(".tv-toggle")) {
      if (view.beforeClick !== null && view.beforeClick !== undefined) view.options.onSelect(view.beforeClick);
      view.options.onToggle(g.getAttribute("data-tv-id"));
    }
  });
  // drag to pan; Ctrl/Cmd + wheel to zoom (plain wheel keeps scrolling the pane)
  view.canvas.addEventListener("pointerdown", (event) => {
    if (event.button !== 0 || event.target.closest("g.node, .tv-toggle")) return;
    view.drag = { x: event.clientX, y: event.clientY, left: view.canvas.scrollLeft, top: view.canvas.scrollTop };
    view.dragMoved = false;
  });
  view.canvas.addEventListener("pointermove", (event) => {
    if (!view.drag) return;
    const dx = event.clientX - view.drag.x;
    const dy = event.clientY - view.drag.y;
    if (!view.dragMoved && Math.abs(dx) + Math.abs(dy) < 4) return;
    view.dragMoved = true;
    view.canvas.classList.add("tv-dragging");
    view.canvas.scrollLeft = view.drag.left - dx;
    view.canvas.scrollTop = view.drag.top - dy;
  });
  const endDrag = () => {
    view.drag = null;
    view.canvas.classList.remove("tv-dragging");
    setTimeout(() => (view.dragMoved = false), 0);
  };
  view.canvas.addEventListener("pointerup", endDrag);
  view.canvas.addEventListener("pointerleave", endDrag);
  view.canvas.addEventListener(
    "wheel",
    (event) => {
      if (!event.ctrlKey && !event.metaKey) return;
      event.preventDefault();
      view.setZoom(view.zoom * (event.deltaY < 0 ? 1.15 : 1 / 1.15), { x: event.clientX, y: event.clientY });
    },
    { passive: false },
  );
}
