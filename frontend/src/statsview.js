// Tensor statistics: a key/value block and a small histogram drawn as inline SVG bars.

import { h, s } from "./dom.js";
import { toNumber } from "./document.js";
import { formatNumber } from "./format.js";
import { maxOf } from "./arrays.js";

const FIELDS = ["min", "max", "mean", "std", "norm", "numel", "nan", "inf"];

/** A Stats record as a key/value grid, with its histogram below when it has one. */
export function statsBlock(stats) {
  if (!stats || typeof stats !== "object") return h("div", { class: "tv-muted" }, "no statistics");
  const bad = toNumber(stats.nan) > 0 || toNumber(stats.inf) > 0;
  const cells = [];
  for (const field of FIELDS) {
    if (stats[field] === undefined || stats[field] === null) continue;
    const value = formatNumber(stats[field]);
    const alarming = (field === "nan" || field === "inf") && toNumber(stats[field]) > 0;
    cells.push(h("span", {}, field), h("span", { class: alarming ? "tv-badge tv-bad" : "" }, value));
  }
  return h(
    "div",
    { class: "tv-stats" + (bad ? " tv-stats-bad" : "") },
    h("div", { class: "tv-kv" }, cells),
    histogram(stats.hist),
  );
}

/**
 * Histogram bars (16 bins in the format) as an SVG, or null when there is none.
 * @param {{edges: any[], counts: number[]} | null | undefined} hist
 */
export function histogram(hist, { width = 200, height = 44 } = {}) {
  if (!hist || !Array.isArray(hist.counts) || hist.counts.length === 0) return null;
  const counts = hist.counts.map((c) => Math.max(0, toNumber(c) || 0));
  const max = maxOf(counts, 1);
  const plot = height - 12;
  const barWidth = width / counts.length;
  const bars = counts.map((count, i) => {
    const barHeight = Math.max(count > 0 ? 1 : 0, (count / max) * plot);
    const edges = Array.isArray(hist.edges) ? hist.edges : [];
    const range = edges.length > i + 1 ? `[${formatNumber(edges[i])}, ${formatNumber(edges[i + 1])})` : `bin ${i}`;
    return s(
      "rect",
      { attrs: { x: (i * barWidth + 0.5).toFixed(1), y: (plot - barHeight).toFixed(1), width: Math.max(1, barWidth - 1).toFixed(1), height: barHeight.toFixed(1) } },
      s("title", {}, `${range}: ${count}`),
    );
  });
  const edges = Array.isArray(hist.edges) ? hist.edges : [];
  const labels = edges.length
    ? [
        s("text", { attrs: { x: 0, y: height - 1 } }, formatNumber(edges[0])),
        s("text", { attrs: { x: width, y: height - 1, "text-anchor": "end" } }, formatNumber(edges[edges.length - 1])),
      ]
    : [];
  return s("svg", { class: "tv-hist", attrs: { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" } }, bars, labels);
}

/** A compact table of several named Stats (a step's outputs or grads). */
export function statsTable(named, onSelect) {
  const entries = Object.entries(named || {}).filter(([, v]) => v && typeof v === "object");
  if (!entries.length) return h("div", { class: "tv-muted" }, "none");
  const header = h("tr", {}, ["tensor", "norm", "min", "max", "mean", "nan", "inf"].map((t) => h("th", {}, t)));
  const rows = entries.map(([name, stats]) => {
    const bad = toNumber(stats.nan) > 0 || toNumber(stats.inf) > 0;
    return h(
      "tr",
      { class: bad ? "tv-row tv-highlight" : "tv-row", data: { tensor: name }, on: { click: () => onSelect(name) } },
      h("td", {}, h("code", {}, name)),
      ["norm", "min", "max", "mean", "nan", "inf"].map((f) =>
        h("td", { class: "tv-num" }, stats[f] === undefined || stats[f] === null ? "" : formatNumber(stats[f])),
      ),
    );
  });
  const table = h("table", { class: "tv-table" }, h("thead", {}, header), h("tbody", {}, rows));
  const withHist = entries.find(([, st]) => st.hist);
  return h("div", {}, table, withHist ? h("div", { class: "tv-muted" }, `histogram of ${withHist[0]}:`) : null, withHist ? histogram(withHist[1].hist) : null);
}
