// The gradient-flow overlay of a graph pane: edges and nodes coloured by gradient norm
// (viridis; log, rank or per-module relative scale; NaN, Inf, zero, no-grad... each with its
// own look), the norm written on each node on demand, its toolbar controls and its legend
// below the graph. Works on any pane: the forward with document.grad_flow, the backward with
// the norms its recorded steps produced (gradflow.js: backwardFlow).

import { h, s, replace } from "./dom.js";
import { gradFlowStyle, normRange, worstStatus, paletteStops, GRAD_STATUS_STYLE, RELATIVE_DECADES } from "./gradflow.js";
import { formatNumber } from "./format.js";
import { nodesFor } from "./visible.js";

const SCALES = [
  ["log", "log"],
  ["rank", "rank"],
  ["module", "per module"],
];

export class GradOverlay {
  /** @param {HTMLElement} legend the pane's legend element */
  constructor(legend) {
    this.legend = legend;
    this.styled = [];
    this.labels = [];
    /** @type {"log" | "rank" | "module"} */
    this.scale = "log";
    this.showNorms = false;
  }

  /**
   * The pane toolbar's controls: the on/off box (reported to `onToggle`), the colour scale
   * and the "norms" box; `redraw` re-applies the overlay after a change here.
   */
  controls(onToggle, redraw) {
    const box = h("input", { attrs: { type: "checkbox" }, data: { "graph-action": "grad-flow" } });
    box.addEventListener("change", () => onToggle && onToggle(box.checked));
    const scale = h("select", { title: "Colour scale: log of the norm (absolute), its rank (separates similar blocks) or relative to the largest norm in the open module it is drawn in", data: { "graph-action": "grad-scale" } },
      SCALES.map(([value, label]) => h("option", { attrs: { value } }, label)));
    scale.addEventListener("change", () => {
      this.scale = /** @type {"log" | "rank" | "module"} */ (scale.value); // one of SCALES
      redraw();
    });
    const norms = h("input", { attrs: { type: "checkbox" }, data: { "graph-action": "grad-norms" } });
    norms.addEventListener("change", () => {
      this.showNorms = norms.checked;
      redraw();
    });
    return { box, items: [h("label", { title: "Colour by gradient norm" }, box, "grad flow"), scale, h("label", { title: "Write the gradient norm on each node (with grad flow on)" }, norms, "norms")] };
  }

  /**
   * Colour `view`'s edges and nodes by `flow` (tensor name -> {norm, status}) with inline
   * styles, which clearing restores exactly; view null: clear.
   */
  apply(view, flow) {
    for (const el of this.styled) {
      for (const prop of ["stroke", "fill", "stroke-width", "stroke-dasharray"]) el.style.removeProperty(prop);
    }
    this.styled = [];
    for (const label of this.labels) label.remove();
    this.labels = [];
    if (!view) {
      this.legend.hidden = true;
      return;
    }
    const range = normRange(flow, this.scale, (name) => tensorModule(view, name));
    const lookOf = (name) => gradFlowStyle(flow[name], range, name);
    const style = (el, props) => {
      for (const [k, v] of Object.entries(props)) if (v) el.style.setProperty(k, v);
      this.styled.push(el);
    };
    const outgoing = new Map();
    for (const { el, edge } of view.edgeEls) {
      const looks = edge.tensors.map(lookOf).filter(Boolean);
      if (!outgoing.has(edge.from)) outgoing.set(edge.from, []);
      for (const look of looks) outgoing.get(edge.from).push(look);
      if (!looks.length) continue;
      const look = pickLook(looks);
      for (const path of el.querySelectorAll(":scope > path")) {
        style(path, { stroke: look.color, "stroke-width": "2px", "stroke-dasharray": look.dash });
      }
      for (const head of el.querySelectorAll(":scope > polygon")) style(head, { stroke: look.color, fill: look.color });
    }
    for (const [id, el] of view.nodeEls) {
      const node = view.graph.nodeById.get(id);
      const own = node.type === "input" ? [lookOf(id)] : [];
      const params = (node.params || []).map(lookOf);
      const looks = [...(outgoing.get(id) || []), ...own, ...params].filter(Boolean);
      if (!looks.length) continue;
      const shape = el.querySelector(":scope > polygon, :scope > path, :scope > ellipse");
      const look = pickLook(looks);
      const okLooks = looks.filter((l) => l.status === "ok");
      const fill = okLooks.length ? pickLook(okLooks).color : null;
      if (shape) style(shape, { fill: fill || "", stroke: look.status === "ok" ? "" : look.color, "stroke-dasharray": look.dash });
      // the overlay fill replaces the theme's, so pick the label colour to match it
      if (fill) for (const text of el.querySelectorAll(":scope > text")) style(text, { fill: isDark(fill) ? "#ffffff" : "#111111" });
      if (this.showNorms) this.writeNorm(el, shape, look);
    }
    this.renderLegend(range);
  }

  /** The norm (or the status) as a text just below the node's shape. */
  writeNorm(el, shape, look) {
    const texts = el.querySelectorAll(":scope > text");
    const last = texts[texts.length - 1];
    const x = last ? last.getAttribute("x") : "0";
    const bottom = shape ? shapeBottom(shape) : null;
    const y = bottom !== null ? bottom + 10 : Number(last ? last.getAttribute("y") : 0) + 12;
    const text = look.status === "ok" ? formatNumber(look.norm) : GRAD_STATUS_STYLE[look.status] ? GRAD_STATUS_STYLE[look.status].label : look.status;
    const label = s("text", { class: "tv-norm-label", attrs: { x, y: y.toFixed(1), "text-anchor": "middle", "font-size": "10" } }, text);
    el.appendChild(label);
    this.labels.push(label);
  }

  renderLegend(range) {
    const stops = paletteStops().map((s) => `${s.color} ${Math.round(s.offset * 100)}%`).join(", ");
    const bar = h("div", { class: "tv-legend-bar" });
    bar.style.background = `linear-gradient(to right, ${stops})`;
    const statuses = Object.entries(GRAD_STATUS_STYLE).map(([, look]) => {
      const swatch = h("span", { class: "tv-swatch" });
      swatch.style.borderTopColor = look.color;
      swatch.style.borderTopStyle = look.dash ? "dashed" : "solid";
      return h("span", {}, swatch, look.label);
    });
    replace(
      this.legend,
      h("div", {}, SCALE_TITLES[this.scale] || SCALE_TITLES.log),
      bar,
      this.scale === "module"
        ? h("div", { class: "tv-legend-scale" }, h("span", {}, `≤ 1e-${RELATIVE_DECADES} × module max`), h("span", {}, range ? `norms ${formatNumber(range.min)} … ${formatNumber(range.max)}` : "–"), h("span", {}, "module max"))
        : h("div", { class: "tv-legend-scale" }, h("span", {}, range ? formatNumber(range.min) : "–"),
          range && range.scale === "rank" ? h("span", {}, `median ${formatNumber(range.median)}`) : null,
          h("span", {}, range ? formatNumber(range.max) : "–")),
      h("div", { class: "tv-legend-items" }, statuses),
    );
    this.legend.hidden = false;
  }
}

const SCALE_TITLES = {
  log: "gradient norm (log scale)",
  rank: "gradient norm (by rank: even steps from smallest to largest)",
  module: "gradient norm relative to the largest in its open module (log scale)",
};

/**
 * The open module a tensor's gradient is drawn in: the module cluster around the visible
 * node of its producer (or, for an input or parameter, of its first consumer); "" at the
 * top level. The module scale compares norms within what one open module shows.
 */
export function tensorModule(view, name) {
  const { ti, graph } = view;
  const op = ti.producers.get(name) || ((ti.tensors[name] || {}).consumers || [])[0];
  if (typeof op !== "string" || !graph) return "";
  const node = graph.nodeById.get(nodesFor(graph, ti, op)[0]);
  return node && typeof node.clusterModule === "string" ? node.clusterModule : "";
}

/** Largest y of a polygon's points, an ellipse or a path's coordinates; null if unknown. */
function shapeBottom(shape) {
  if (shape.tagName.toLowerCase() === "ellipse") return Number(shape.getAttribute("cy")) + Number(shape.getAttribute("ry"));
  const numbers = String(shape.getAttribute("points") || shape.getAttribute("d") || "").match(/-?[\d.]+(?:e-?\d+)?/g) || [];
  let bottom = null;
  for (let i = 1; i < numbers.length; i += 2) if (bottom === null || Number(numbers[i]) > bottom) bottom = Number(numbers[i]);
  return bottom;
}

/** The most alarming look; among "ok" ones, the largest norm. */
function pickLook(looks) {
  const status = worstStatus(looks.map((l) => l.status));
  const candidates = looks.filter((l) => l.status === status);
  return candidates.reduce((a, b) => (b.norm > a.norm ? b : a), candidates[0]);
}

function isDark(hex) {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
  return 0.299 * r + 0.587 * g + 0.114 * b < 110;
}
