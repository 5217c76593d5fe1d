// The gradient-flow overlay of a graph pane: edges and nodes coloured by gradient norm
// (viridis, log or rank scale; NaN, Inf, zero, no-grad... each with its own look) and its
// legend below the graph. Works on any pane: the forward with document.grad_flow, the
// backward with the norms its recorded steps produced (gradflow.js: backwardFlow).

import { h, replace } from "./dom.js";
import { gradFlowStyle, normRange, worstStatus, paletteStops, GRAD_STATUS_STYLE } from "./gradflow.js";
import { formatNumber } from "./format.js";

export class GradOverlay {
  /** @param {HTMLElement} legend the pane's legend element */
  constructor(legend) {
    this.legend = legend;
    this.styled = [];
  }

  /**
   * Colour `view`'s edges and nodes by `flow` (tensor name -> {norm, status}) with inline
   * styles, which clearing restores exactly; view null: clear.
   */
  apply(view, flow, scale = "log") {
    for (const el of this.styled) {
      for (const prop of ["stroke", "fill", "stroke-width", "stroke-dasharray"]) el.style.removeProperty(prop);
    }
    this.styled = [];
    if (!view) {
      this.legend.hidden = true;
      return;
    }
    const range = normRange(flow, scale);
    const style = (el, props) => {
      for (const [k, v] of Object.entries(props)) if (v) el.style.setProperty(k, v);
      this.styled.push(el);
    };
    const outgoing = new Map();
    for (const { el, edge } of view.edgeEls) {
      const looks = edge.tensors.map((t) => gradFlowStyle(flow[t], range)).filter(Boolean);
      if (!outgoing.has(edge.from)) outgoing.set(edge.from, []);
      outgoing.get(edge.from).push(...looks);
      if (!looks.length) continue;
      const look = pickLook(looks);
      for (const path of el.querySelectorAll(":scope > path")) {
        style(path, { stroke: look.color, "stroke-width": "2px", "stroke-dasharray": look.dash });
      }
      for (const head of el.querySelectorAll(":scope > polygon")) style(head, { stroke: look.color, fill: look.color });
    }
    for (const [id, el] of view.nodeEls) {
      const node = view.graph.nodeById.get(id);
      const own = node.type === "input" ? [gradFlowStyle(flow[id], range)] : [];
      const params = (node.params || []).map((p) => gradFlowStyle(flow[p], range));
      const looks = [...(outgoing.get(id) || []), ...own, ...params].filter(Boolean);
      if (!looks.length) continue;
      const shape = el.querySelector(":scope > polygon, :scope > path, :scope > ellipse");
      const look = pickLook(looks);
      const okLooks = looks.filter((l) => l.status === "ok");
      const fill = okLooks.length ? pickLook(okLooks).color : null;
      if (shape) style(shape, { fill: fill || "", stroke: look.status === "ok" ? "" : look.color, "stroke-dasharray": look.dash });
      // the overlay fill replaces the theme's, so pick the label colour to match it
      if (fill) for (const text of el.querySelectorAll(":scope > text")) style(text, { fill: isDark(fill) ? "#ffffff" : "#111111" });
    }
    this.renderLegend(range);
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
      h("div", {}, range && range.scale === "rank" ? "gradient norm (by rank: even steps from smallest to largest)" : "gradient norm (log scale)"),
      bar,
      h("div", { class: "tv-legend-scale" }, h("span", {}, range ? formatNumber(range.min) : "–"),
        range && range.scale === "rank" ? h("span", {}, `median ${formatNumber(range.median)}`) : null,
        h("span", {}, range ? formatNumber(range.max) : "–")),
      h("div", { class: "tv-legend-items" }, statuses),
    );
    this.legend.hidden = false;
  }
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
