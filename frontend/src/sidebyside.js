// The side-by-side view: the sides of a comparison document (two runs, or the ranks of one
// distributed run; docs/view-format.md "Comparison") each in its own viewer, next to each
// other. Selecting an op in one side selects its match in the others (the document's
// matched op ids); matched ops are coloured by how much they differ (runs: the relative
// difference of their values or gradients; ranks: the spread of the ranks' norms), the
// first divergences are listed on top, and for ranks a table gives each backward op's norm
// on every rank with the collectives marked.
//
// Each side is a plain viewer (mountViewer's single-document mount, handed in as `mountOne`
// so this module does not import mount.js back); the overlay is one <style> element of
// rules keyed by op id, so it survives every re-render of the graphs without hooks in them.

import { h, clear } from "./dom.js";
import { formatNumber } from "./format.js";
import { toNumber, validateDocument } from "./document.js";
import { errorBox } from "./viewer.js";
import { isModuleId, moduleId, traceKindOfId } from "./protocol.js";

/** The document's comparison (an object), or null for a plain view document. */
export function comparisonOf(doc) {
  const c = doc && typeof doc === "object" ? doc.comparison : null;
  return c && typeof c === "object" && !Array.isArray(c) ? c : null;
}

/** The sides' documents: side 0 without its comparison, then the compared documents. */
export function sidesOf(doc) {
  const { comparison, ...first } = doc;
  return [first, ...comparison.documents];
}

/** "forward:12" -> "forward" (the trace an op id belongs to). */
const traceOf = (id) => traceKindOfId(id) ?? "";

/**
 * What one side's id stands for in another side: matched ops, a matched op's outputs by
 * position, a subsymbol through its nearest matched parent, modules by their path.
 */
export class MatchIndex {
  constructor(comparison, sides) {
    this.sides = sides;
    this.bySide = sides.map(() => new Map());
    for (const match of comparison.matches) {
      match.ops.forEach((id, side) => {
        if (typeof id === "string" && side < sides.length && !this.bySide[side].has(id)) this.bySide[side].set(id, match);
      });
    }
    // per side: op id -> op, tensor name -> its producer (top-level views only)
    this.ops = sides.map((doc) => new Map(Object.values(doc.traces).flatMap((t) => t.ops.map((op) => [op.id, op]))));
    this.producers = sides.map((doc) => {
      const produced = new Map();
      for (const trace of Object.values(doc.traces)) {
        for (const op of trace.ops) for (const name of op.outputs || []) if (!produced.has(name)) produced.set(name, op);
      }
      return produced;
    });
  }

  /** The match of `side`'s op `id` (or of its nearest matched parent), or undefined. */
  matchOf(side, id) {
    let op = this.ops[side].get(id);
    for (let hops = 0; op && hops < 64; hops += 1) {
      const match = this.bySide[side].get(op.id);
      if (match) return match;
      op = typeof op.parent === "string" ? this.ops[side].get(op.parent) : undefined;
    }
    return undefined;
  }

  /** `id` of side `from` as side `to` names it; "" where `to` has nothing to match it. */
  counterpart(from, id, to) {
    if (!id || from === to) return id || "";
    if (isModuleId(id)) return id; // the same module path
    const match = this.matchOf(from, id);
    if (match) return typeof match.ops[to] === "string" ? match.ops[to] : "";
    const producer = this.producers[from].get(id); // a tensor: the same output of the match
    const producerMatch = producer && this.bySide[from].get(producer.id);
    const other = producerMatch && this.ops[to].get(producerMatch.ops[to]);
    if (!other) return "";
    const position = producer.outputs.indexOf(id);
    return (other.outputs || [])[position] || "";
  }
}

/** How much a match differs on its side's trace: runs' relative difference, ranks' spread. */
export function differenceOf(match, kind) {
  if (Array.isArray(match.norms)) {
    const norms = match.norms.filter((n) => n !== null).map(toNumber);
    if (norms.some((x) => !Number.isFinite(x))) return NaN;
    if (norms.length < 2) return null;
    const top = Math.max(...norms.map(Math.abs));
    const spread = Math.max(...norms) - Math.min(...norms);
    return spread === 0 ? 0 : spread / top;
  }
  const value = kind === "forward" ? match.forward : match.grad;
  return value === null || value === undefined ? null : toNumber(value);
}

const SAME = "#bbf7d0";
const NOT_FINITE = "#d8b4fe";
const LOW = [253, 230, 138]; // just above the tolerance: amber
const HIGH = [248, 113, 113]; // four decades above it and more: red

/** The fill for a difference: green within `rtol`, amber to red above, violet for NaN/Inf. */
export function differenceColor(value, rtol) {
  if (value === null || value === undefined) return null;
  if (!Number.isFinite(value)) return NOT_FINITE;
  if (value <= rtol) return SAME;
  const t = Math.min(1, Math.log10(value / Math.max(rtol, 1e-30)) / 4);
  const mix = LOW.map((c, i) => Math.round(c + (HIGH[i] - c) * t));
  return `rgb(${mix.join(", ")})`;
}

/** A value for a quoted CSS attribute selector: anything but [A-Za-z0-9_.:-] as a hex escape. */
export function cssString(text) {
  return `"${String(text).replace(/[^A-Za-z0-9_.:-]/g, (c) => `\\${c.codePointAt(0).toString(16)} `)}"`;
}

/**
 * Per side and graph pane, the fill of each op and module node: a module takes the largest
 * difference of the matched ops inside it (a collapsed block still shows where it differs).
 * @returns {Array<Map<string, Map<string, number>>>} side -> trace kind -> node id -> value
 */
export function nodeDifferences(index, comparison) {
  return index.sides.map((_, side) => {
    const byKind = new Map();
    const raise = (kind, id, value) => {
      if (!byKind.has(kind)) byKind.set(kind, new Map());
      const values = byKind.get(kind);
      const old = values.get(id);
      if (old === undefined || Number.isNaN(value) || (!Number.isNaN(old) && value > old)) values.set(id, value);
    };
    for (const match of comparison.matches) {
      const id = match.ops[side];
      if (typeof id !== "string") continue;
      const kind = traceOf(id);
      const value = differenceOf(match, kind);
      if (value === null) continue;
      raise(kind, id, value);
      const path = (index.ops[side].get(id) || {}).module_path || "";
      const parts = path ? path.split(".") : [];
      for (let n = 1; n <= parts.length; n += 1) raise(kind, moduleId(parts.slice(0, n).join(".")), value);
    }
    return byKind;
  });
}

/** The overlay's style sheet: node fills, the first divergences outlined, collectives marked. */
export function overlayCss(index, comparison) {
  const rtol = toNumber(comparison.rtol ?? (comparison.kind === "ranks" ? 1e-5 : 1e-3));
  const rules = [];
  const shape = "> :is(polygon, path, ellipse):first-of-type";
  nodeDifferences(index, comparison).forEach((byKind, side) => {
    for (const [kind, values] of byKind) {
      for (const [id, value] of values) {
        const fill = differenceColor(value, rtol);
        const node = `.tv-sbs-pane[data-tv-side="${side}"] .tv-graph-pane[data-tv-graph=${cssString(kind)}] g.node[data-tv-id=${cssString(id)}]`;
        rules.push(`${node}:not(.tv-selected):not(.tv-highlight) ${shape} { fill: ${fill}; }`, `${node} > text { fill: #111111; }`);
      }
    }
  });
  const outline = (side, id, look) =>
    rules.push(`.tv-sbs-pane[data-tv-side="${side}"] g.node[data-tv-id=${cssString(id)}] > :is(polygon, path, ellipse) { ${look} }`);
  for (const match of comparison.matches) {
    if (match.collective) match.ops.forEach((id, side) => typeof id === "string" && outline(side, id, "stroke: #7c3aed; stroke-width: 3px; stroke-dasharray: 5 2;"));
  }
  for (const divergence of comparison.divergences || []) {
    (divergence.ops || []).forEach((id, side) => typeof id === "string" && outline(side, id, "stroke: #dc2626; stroke-width: 3px;"));
  }
  return rules.join("\n");
}

const LAYOUT_CSS = `
.tv-sbs { display: flex; flex-direction: column; gap: 6px; font-family: system-ui, sans-serif; font-size: 13px; }
.tv-sbs-head { display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 12px; }
.tv-sbs-divergences { margin: 0; padding: 0; list-style: none; flex-basis: 100%; }
.tv-sbs-divergences li { padding: 3px 6px; border-left: 3px solid #dc2626; margin: 2px 0; background: rgba(220, 38, 38, 0.08); }
.tv-sbs-divergences button, .tv-sbs-ranks tr { cursor: pointer; }
.tv-sbs-key { display: inline-flex; gap: 8px; align-items: center; }
.tv-sbs-swatch { display: inline-block; width: 12px; height: 12px; border: 1px solid #888; vertical-align: middle; margin-right: 3px; }
.tv-sbs-panes { display: grid; gap: 6px; }
.tv-sbs-pane { min-width: 0; border: 1px solid #d0d7de; }
.tv-sbs-label { font-weight: 600; padding: 2px 6px; }
.tv-sbs-selection { flex-basis: 100%; font-family: ui-monospace, monospace; font-size: 12px; }
.tv-sbs-ranks { max-height: 260px; overflow: auto; }
.tv-sbs-ranks table { border-collapse: collapse; font-family: ui-monospace, monospace; font-size: 12px; }
.tv-sbs-ranks td, .tv-sbs-ranks th { padding: 1px 8px; text-align: right; border-bottom: 1px solid rgba(128, 128, 128, 0.25); }
.tv-sbs-ranks td:first-child, .tv-sbs-ranks th:first-child { text-align: left; }
.tv-sbs-ranks tr.tv-sbs-collective td:first-child::before { content: "\\21c4  "; color: #7c3aed; }
.tv-sbs-ranks tr.tv-selected { background: rgba(245, 158, 11, 0.22); }
`;

function describeDivergence(d, labels) {
  const src = d.source && typeof d.source === "object" ? d.source : null;
  const where = src ? ` at ${String(src.file || "").split(/[\\/]/).pop()}:${src.line}${src.code ? `: ${src.code}` : ""}` : "";
  const ranks = Array.isArray(d.ranks) ? ` (${d.ranks.map((r) => labels[r] || `rank ${r}`).join(" vs ")})` : "";
  const value = d.value === null || d.value === undefined ? "" : ` — ${formatNumber(d.value)}`;
  return `${d.what || "difference"}: ${d.op || ""} in ${d.module || "(root)"}${where}${ranks}${value}${d.detail ? ` (${d.detail})` : ""}`;
}

/** One line on what is selected: its id on every side, and how much the match differs. */
export function describeSelection(index, comparison, labels, selectedIds) {
  const id = selectedIds[0];
  if (!id) return "Select an op on any side: its match is selected on the others.";
  const sides = selectedIds.map((other, side) => `${labels[side]}: ${other || "no match"}`).join(" ↔ ");
  const match = isModuleId(id) ? undefined : index.matchOf(0, id);
  if (!match) return sides;
  const parts = Array.isArray(match.norms)
    ? [`norms ${match.norms.map((n) => (n === null ? "-" : formatNumber(n))).join(" / ")}`]
    : [["forward", match.forward], ["gradient", match.grad]]
      .filter(([, v]) => v !== null && v !== undefined).map(([what, v]) => `${what} ${formatNumber(v)}`);
  return [sides, ...parts, ...(match.note ? [match.note] : [])].join(" · ");
}

/** The ranks' table: every match that has norms (forward, then backward), a column per rank. */
function ranksTable(index, comparison, labels, select) {
  const rows = comparison.matches.filter((m) => Array.isArray(m.norms));
  const body = rows.map((match) => {
    const id = match.ops[0];
    const op = index.ops[0].get(id) || {};
    const cells = match.norms.map((n) => h("td", {}, n === null ? "-" : formatNumber(n)));
    const row = h("tr", { class: match.collective ? "tv-sbs-collective" : "", data: { id: String(id) }, on: { click: () => select(0, id) } },
      h("td", {}, `${traceOf(String(id))} · ${op.label || op.name || id}${op.module_path ? ` [${op.module_path}]` : ""}`), ...cells);
    return row;
  });
  const head = h("tr", {}, h("th", {}, "op (norm of its first output)"), ...labels.map((l) => h("th", {}, l)));
  return h("div", { class: "tv-sbs-ranks" }, h("table", {}, h("thead", {}, head), h("tbody", {}, ...body)));
}

/**
 * Mount the side-by-side view of comparison document `doc` in `el`.
 * @param {(el: HTMLElement, doc: any, options: object) => {model: any, destroy: () => void}} mountOne
 * @returns {{model: any, models: any[], index: MatchIndex, select: (side: number, id: string) => void, destroy: () => void}}
 */
export function mountSideBySide(el, doc, options, mountOne) {
  const check = validateDocument(doc);
  if (!check.ok) {
    const box = errorBox(check.error);
    el.appendChild(box);
    return { model: null, models: [], index: null, select() {}, destroy: () => box.remove() };
  }
  const comparison = doc.comparison;
  const sides = sidesOf(doc);
  const labels = sides.map((_, i) => (comparison.labels || [])[i] || (comparison.kind === "ranks" ? `rank ${i}` : `side ${i}`));
  const index = new MatchIndex(comparison, sides);
  const root = h("div", { class: "tv-sbs", data: { kind: comparison.kind, sides: sides.length } });
  const style = document.createElement("style");
  style.textContent = `${LAYOUT_CSS}\n${overlayCss(index, comparison)}`;
  const panes = h("div", { class: "tv-sbs-panes" });
  panes.style.gridTemplateColumns = `repeat(${sides.length}, minmax(0, 1fr))`;
  const handles = [];
  let syncing = false;
  let ranksBody = null;

  // one selection for all sides: `id` of side `from`, and its counterpart everywhere else
  const select = (from, id) => {
    if (syncing) return;
    syncing = true;
    try {
      handles.forEach((handle, side) => {
        const target = index.counterpart(from, id, side);
        if (handle.model.get("selected") !== target) {
          handle.model.set("selected", target);
          handle.model.save_changes();
        }
      });
      status.textContent = describeSelection(index, comparison, labels, handles.map((hd) => String(hd.model.get("selected") || "")));
      if (ranksBody) {
        for (const row of ranksBody.querySelectorAll("tr[data-tv-id]")) row.classList.toggle("tv-selected", row.getAttribute("data-tv-id") === handles[0].model.get("selected"));
      }
    } finally {
      syncing = false;
    }
    if (options.onChange) options.onChange("selected", id);
  };

  const divergences = h("ol", { class: "tv-sbs-divergences" }, ...(comparison.divergences || []).map((d) =>
    h("li", { data: { op: String((d.ops || [])[0] || "") } },
      h("button", { attrs: { type: "button" }, on: { click: () => select(0, (d.ops || [])[0] || "") } }, "show"), " ", describeDivergence(d, labels))));
  const none = comparison.divergences && comparison.divergences.length ? null
    : h("span", { class: "tv-sbs-none" }, comparison.kind === "ranks" ? "The ranks agree where they should." : "No difference above the tolerance.");
  const key = h("span", { class: "tv-sbs-key" },
    ...[[SAME, "within tolerance"], [`rgb(${LOW.join(", ")})`, "differs"], [`rgb(${HIGH.join(", ")})`, "differs ×10⁴"], [NOT_FINITE, "NaN/Inf"]].map(([colour, text]) => {
      const swatch = h("span", { class: "tv-sbs-swatch" });
      swatch.style.background = colour;
      return h("span", {}, swatch, text);
    }));
  const title = comparison.kind === "ranks" ? `${sides.length} ranks side by side` : `${labels.join(" vs ")}`;
  const status = h("div", { class: "tv-sbs-selection" }, describeSelection(index, comparison, labels, [""]));
  root.append(style, h("div", { class: "tv-sbs-head" }, h("strong", {}, title), key, none, divergences, status), panes);

  sides.forEach((side, i) => {
    const pane = h("div", { class: "tv-sbs-pane", data: { side: i } }, h("div", { class: "tv-sbs-label" }, labels[i]));
    const host = h("div", {});
    pane.appendChild(host);
    panes.appendChild(pane);
    const { onChange: _ignored, ...rest } = options;
    handles.push(mountOne(host, side, { ...rest, onChange: (name, value) => name === "selected" && select(i, value) }));
  });
  if (comparison.kind === "ranks") {
    const table = ranksTable(index, comparison, labels, select);
    ranksBody = table.querySelector("tbody");
    root.appendChild(table);
  }
  el.appendChild(root);
  return {
    model: handles[0].model,
    models: handles.map((hd) => hd.model),
    index,
    select,
    destroy() {
      for (const handle of handles) handle.destroy();
      clear(root);
      root.remove();
    },
  };
}
