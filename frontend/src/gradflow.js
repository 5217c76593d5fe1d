// Gradient-flow overlay: gradient norms on a log colour scale, and a distinct look for
// each non-"ok" status, so vanishing, exploding and missing gradients stand out.

import { toNumber } from "./document.js";

/** Look of each status. `dash` doubles the colour so the overlay also reads in greyscale. */
export const GRAD_STATUS_STYLE = {
  zero: { color: "#9e9e9e", dash: "4,3", label: "zero" },
  nan: { color: "#d62728", dash: "", label: "NaN" },
  inf: { color: "#e377c2", dash: "", label: "Inf" },
  no_grad: { color: "#b0b7bf", dash: "1,3", label: "no grad" },
  unused: { color: "#8d6e63", dash: "1,3", label: "unused" },
  detached: { color: "#7b1fa2", dash: "6,3", label: "detached" },
  integer: { color: "#607d8b", dash: "2,2", label: "integer" },
};

/** When a node has several tensors, the most alarming status wins. */
const STATUS_PRIORITY = ["nan", "inf", "zero", "detached", "unused", "no_grad", "integer", "ok"];

export function worstStatus(statuses) {
  let best = "ok";
  for (const s of statuses) {
    if (STATUS_PRIORITY.indexOf(s) !== -1 && STATUS_PRIORITY.indexOf(s) < STATUS_PRIORITY.indexOf(best)) best = s;
  }
  return best;
}

/** Viridis, sampled: perceptually even and readable for colour-blind users. */
const PALETTE = ["#440154", "#414487", "#2a788e", "#22a884", "#7ad151", "#fde725"];

/**
 * The finite positive "ok" norms: their range and, sorted, for the rank scale. null when
 * there are none.
 * @param {Record<string, any>} gradFlow
 * @param {"log"|"rank"|"module"} [scale] log: colour by log norm (absolute); rank: by the norm's rank
 *   among all (evenly spread, so twelve blocks of similar norms still look different);
 *   module: relative to the largest norm in the tensor's module (needs `moduleOf`)
 * @param {((name: string) => string) | null} [moduleOf] a tensor's module path, for "module"
 */
export function normRange(gradFlow, scale = "log", moduleOf = null) {
  const norms = [];
  const moduleMax = new Map();
  for (const [name, entry] of Object.entries(gradFlow || {})) {
    if (!entry || entry.status !== "ok") continue;
    const norm = toNumber(entry.norm);
    if (!(Number.isFinite(norm) && norm > 0)) continue;
    norms.push(norm);
    if (scale === "module" && moduleOf) {
      const module = moduleOf(name);
      if (!(moduleMax.get(module) >= norm)) moduleMax.set(module, norm);
    }
  }
  if (!norms.length) return null;
  norms.sort((a, b) => a - b);
  const range = { min: norms[0], max: norms[norms.length - 1], median: norms[Math.floor(norms.length / 2)], scale, sorted: norms };
  return scale === "module" && moduleOf ? { ...range, moduleMax, moduleOf } : range;
}

/** The module scale spans this many decades below each module's largest norm. */
export const RELATIVE_DECADES = 3;

/**
 * Position of a tensor's norm relative to the largest in its module (range.moduleOf), in
 * [0, 1]: 1 at the module's max, 0 at RELATIVE_DECADES decades below it or less.
 */
export function modulePosition(name, norm, range) {
  const max = range.moduleMax.get(range.moduleOf(name));
  if (!(max > 0) || !(norm > 0)) return 0;
  return Math.min(1, Math.max(0, 1 + Math.log10(norm / max) / RELATIVE_DECADES));
}

/** Position of `norm` among the range's sorted norms, in [0, 1]. */
export function rankPosition(norm, range) {
  const { sorted } = range;
  if (sorted.length < 2) return 1;
  let lo = 0;
  let hi = sorted.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (sorted[mid] < norm) lo = mid + 1;
    else hi = mid;
  }
  return Math.min(1, lo / (sorted.length - 1));
}

/**
 * Gradient flow of the backward graph from its recorded steps: each tensor a step produced,
 * by the norm and NaN/Inf counts recorded for it (the same form as document.grad_flow).
 * `notGradients`: names to leave out (the saved forward values the backward unpacks).
 * @param {{has: (name: string) => boolean}} [notGradients] a Set of names or a Map by name
 */
export function backwardFlow(steps, notGradients = new Set()) {
  const flow = {};
  for (const step of steps || []) {
    for (const [name, stats] of Object.entries((step && step.outputs) || {})) {
      if (notGradients.has(name) || !stats || typeof stats !== "object" || stats.norm === null || stats.norm === undefined) continue;
      const norm = toNumber(stats.norm);
      const status = Number(stats.nan) > 0 ? "nan" : Number(stats.inf) > 0 ? "inf" : norm === 0 ? "zero" : "ok";
      flow[name] = { norm: stats.norm, status };
    }
  }
  return flow;
}

/** Position of `norm` in `range` on a log scale, in [0, 1]. */
export function logPosition(norm, range) {
  if (!range || !(norm > 0)) return 0;
  const lo = Math.log10(range.min);
  const hi = Math.log10(range.max);
  if (hi - lo < 1e-12) return 1;
  return Math.min(1, Math.max(0, (Math.log10(norm) - lo) / (hi - lo)));
}

/** Interpolated palette colour at t in [0, 1], as "#rrggbb". */
export function paletteColor(t) {
  const x = Math.min(1, Math.max(0, t)) * (PALETTE.length - 1);
  const i = Math.min(PALETTE.length - 2, Math.floor(x));
  const f = x - i;
  const a = hexToRgb(PALETTE[i]);
  const b = hexToRgb(PALETTE[i + 1]);
  const mix = a.map((v, k) => Math.round(v + (b[k] - v) * f));
  return "#" + mix.map((v) => v.toString(16).padStart(2, "0")).join("");
}

function hexToRgb(hex) {
  return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
}

/**
 * Overlay look of one tensor's grad flow, or null when it has no entry. `name`: the
 * tensor's, for the module scale.
 * @returns {{status: string, color: string, dash: string, norm: number} | null}
 */
export function gradFlowStyle(entry, range, name = "") {
  if (!entry || typeof entry !== "object") return null;
  const status = typeof entry.status === "string" ? entry.status : "ok";
  const norm = toNumber(entry.norm);
  if (status !== "ok") {
    const look = GRAD_STATUS_STYLE[status] || GRAD_STATUS_STYLE.no_grad;
    return { status, color: look.color, dash: look.dash, norm };
  }
  if (Number.isNaN(norm)) return { status: "nan", ...GRAD_STATUS_STYLE.nan, norm };
  if (!Number.isFinite(norm)) return { status: "inf", ...GRAD_STATUS_STYLE.inf, norm };
  if (norm === 0) return { status: "zero", ...GRAD_STATUS_STYLE.zero, norm };
  const position = !range ? 0 : range.scale === "rank" ? rankPosition(norm, range) : range.moduleMax ? modulePosition(name, norm, range) : logPosition(norm, range);
  return { status: "ok", color: paletteColor(position), dash: "", norm };
}

/** Stops for the legend's colour bar. */
export const paletteStops = () => PALETTE.map((color, i) => ({ offset: i / (PALETTE.length - 1), color }));
