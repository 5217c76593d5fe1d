// The saved-tensors table: what backward keeps alive, biggest first, with totals per
// module and overall. Clicking a row selects the tensor (which links its producer,
// consumers and forward op in the graphs).

import { h, replace } from "./dom.js";
import { toNumber } from "./document.js";
import { formatBytes } from "./format.js";
import { maxOf } from "./arrays.js";

/**
 * Sort and total the saved tensors.
 * @param {any[]} saved SavedTensor records
 * @returns {{rows: any[], modules: {module: string, count: number, bytes: number}[],
 *            total: {count: number, bytes: number, recomputed: number}}}
 *   rows by bytes, largest first (ties by name); modules by bytes; recomputed tensors
 *   are listed but not counted in the bytes kept alive.
 */
export function summarizeSaved(saved) {
  const bytesOf = (s) => {
    const n = toNumber(s.bytes);
    return Number.isFinite(n) && n > 0 ? n : 0;
  };
  const rows = [...saved].sort((a, b) => bytesOf(b) - bytesOf(a) || String(a.name).localeCompare(String(b.name)));
  const perModule = new Map();
  let bytes = 0;
  let recomputed = 0;
  for (const s of rows) {
    const module = typeof s.module_path === "string" ? s.module_path : "";
    if (!perModule.has(module)) perModule.set(module, { module, count: 0, bytes: 0 });
    const entry = perModule.get(module);
    entry.count += 1;
    if (s.recomputed) {
      recomputed += 1;
      continue;
    }
    entry.bytes += bytesOf(s);
    bytes += bytesOf(s);
  }
  const modules = [...perModule.values()].sort((a, b) => b.bytes - a.bytes || a.module.localeCompare(b.module));
  return { rows, modules, total: { count: rows.length, bytes, recomputed } };
}

export class SavedPanel {
  /**
   * @param {any[]} saved
   * @param {(id: string) => void} onSelect
   * @param {(id: string) => string} [describe] how an op id is shown (src/opnames.js)
   */
  constructor(saved, onSelect, describe = String) {
    this.summary = summarizeSaved(saved);
    this.onSelect = onSelect;
    this.describe = describe;
    this.rowEls = new Map();
    this.el = h("div", { class: "tv-saved" });
    this.build();
  }

  build() {
    const { rows, modules, total } = this.summary;
    if (!rows.length) {
      replace(this.el, h("div", { class: "tv-empty" }, "Nothing is saved for backward."));
      return;
    }
    const link = (id) => (id ? h("button", { class: "tv-link", title: `select ${id}`, on: { click: (e) => { e.stopPropagation(); this.onSelect(id); } } }, this.describe(id)) : h("span", { class: "tv-muted" }, "(input)"));
    const biggest = maxOf(modules.map((m) => m.bytes), 1);
    const moduleTable = h(
      "table",
      { class: "tv-table", data: { "saved-modules": "" } },
      h("thead", {}, h("tr", {}, ["module", "tensors", "bytes", ""].map((t) => h("th", {}, t)))),
      h("tbody", {}, modules.map((m) => {
        const bar = h("span", { class: "tv-bar" });
        bar.style.width = `${Math.round((m.bytes / biggest) * 120)}px`;
        return h("tr", {}, h("td", {}, h("code", {}, m.module || "(root)")), h("td", { class: "tv-num" }, String(m.count)), h("td", { class: "tv-num" }, formatBytes(m.bytes)), h("td", {}, bar));
      })),
    );
    const header = ["name", "shape", "dtype", "bytes", "producer", "consumers", "module", ""].map((t) => h("th", {}, t));
    const body = rows.map((s) => {
      const consumers = Array.isArray(s.consumers) ? s.consumers : [];
      const row = h(
        "tr",
        { class: "tv-row", data: { saved: String(s.name) }, on: { click: () => this.onSelect(String(s.name)) } },
        h("td", {}, h("code", {}, String(s.name))),
        h("td", {}, h("code", {}, Array.isArray(s.shape) ? `[${s.shape.map(String).join(", ")}]` : "")),
        h("td", {}, h("code", {}, String(s.dtype ?? ""))),
        h("td", { class: "tv-num" }, formatBytes(s.bytes)),
        h("td", {}, link(s.producer)),
        h("td", {}, consumers.flatMap((c, i) => (i ? [" ", link(c)] : [link(c)]))),
        h("td", {}, h("code", {}, String(s.module_path || "(root)"))),
        h("td", { class: "tv-muted" }, s.recomputed ? "recomputed" : ""),
      );
      this.rowEls.set(String(s.name), row);
      return row;
    });
    replace(
      this.el,
      h("div", { class: "tv-status-line" }, h("strong", {}, `${total.count} saved tensors, ${formatBytes(total.bytes)} kept for backward`), total.recomputed ? h("span", { class: "tv-muted" }, ` (${total.recomputed} recomputed)`) : null),
      h("h4", {}, "per module"),
      moduleTable,
      h("h4", {}, "tensors (largest first)"),
      h("table", { class: "tv-table", data: { "saved-table": "" } }, h("thead", {}, h("tr", {}, header)), h("tbody", {}, body)),
    );
  }

  /** @param {{selected: string, highlights: import("./links.js").Highlights}} marks */
  mark(marks) {
    for (const [name, row] of this.rowEls) {
      row.classList.toggle("tv-selected", name === marks.selected);
      row.classList.toggle("tv-highlight", name !== marks.selected && marks.highlights.saved.has(name));
    }
  }
}
