// The debugging tab: the NaN/Inf ledger (where non-finite values are born in the backward,
// and where they are healed or carried on) and the interventions recorded with the session
// (docs/view-format.md: "nan_ledger", "interventions"). Clicking a row selects its op, which
// links it in the graphs like any other selection. With a live kernel, buttons edit the
// gradient at the selection (a backward op, a forward op, a module or a tensor): the widget
// runs Session.intervene and sends back the document with the re-run backward.

import { h, replace } from "./dom.js";

/** Ledger statuses, in the order the panel lists a step's importance. */
export const LEDGER_ORDER = ["born", "healed", "propagated", "clean"];

const list = (x) => (Array.isArray(x) ? x.filter((e) => e && typeof e === "object") : []);

/** Whether the document carries anything this tab shows (or a live kernel can edit). */
export function hasDebugTools(index, live = false) {
  return Boolean(live) || list(index.doc.nan_ledger).length > 0 || list(index.doc.interventions).length > 0;
}

/** Classes a graph node gets for the ledger's non-clean statuses (style.js, legend.js). */
export const LEDGER_CLASSES = LEDGER_ORDER.filter((s) => s !== "clean").map((s) => `tv-ledger-${s}`);

/** The edits the buttons offer: label and the message's `edit` (GradEdit's spelling). */
/** @type {Array<[string, string | Array<string | number>]>} */
export const EDIT_BUTTONS = [
  ["zero", "zero"],
  ["× 0.5", ["scale", 0.5]],
  ["× 2", ["scale", 2]],
  ["clip norm 1", ["clip", 1]],
  ["clamp ±1e-3", ["clamp", -1e-3, 1e-3]],
];

/**
 * Status per op id: the ledger's backward ops, and the forward op each came from (marked
 * with the most important status among its backward ops: born, then healed, then
 * propagated), so both graphs can show where a NaN/Inf starts and ends.
 * @returns {Map<string, string>}
 */
export function ledgerMarks(index) {
  const marks = new Map();
  const rank = (s) => {
    const i = LEDGER_ORDER.indexOf(s);
    return i === -1 ? LEDGER_ORDER.length : i;
  };
  const put = (id, status) => {
    if (typeof id !== "string" || !id) return;
    if (!marks.has(id) || rank(status) < rank(marks.get(id))) marks.set(id, status);
  };
  for (const entry of list(index.doc.nan_ledger)) {
    const status = String(entry.status ?? "");
    if (!status || status === "clean") continue;
    put(entry.op, status);
    const found = typeof entry.op === "string" ? index.opById.get(entry.op) : undefined;
    if (found && found.op.fwd_op) put(found.op.fwd_op, status);
  }
  return marks;
}

/** "zero", "scale(0.5)", "clamp(-1, 1)", "noise(0.1, seed 3)", "custom my_fn". */
export function describeEdit(edit) {
  if (!edit || typeof edit !== "object") return "?";
  const kind = String(edit.kind ?? "?");
  if (kind === "custom") return `custom ${String(edit.name ?? "")}`.trim();
  const params = Array.isArray(edit.params) ? edit.params.map(String) : [];
  if (kind === "noise" && edit.seed !== undefined) params.push(`seed ${String(edit.seed)}`);
  return params.length ? `${kind}(${params.join(", ")})` : kind;
}

export class DebugToolsPanel {
  /**
   * @param {any} index indexDocument(doc)
   * @param {(id: string) => void} onSelect
   * @param {(id: string) => string} [describe] how an op id is shown (src/opnames.js)
   * @param {{intervene: (edit: any) => void, clear: () => void} | null} [actions] with a
   *   live kernel: edit the gradient at the selection, clear every edit
   */
  constructor(index, onSelect, describe = String, actions = null) {
    this.index = index;
    this.onSelect = onSelect;
    this.describe = describe;
    this.actions = actions;
    this.rowEls = new Map();
    this.editButtons = [];
    this.selectionLabel = h("span", { class: "tv-muted" }, "select an op, a module or a tensor");
    this.el = h("div", { class: "tv-saved tv-debugtools" });
    this.build();
  }

  row(id, cells, data) {
    const selectable = typeof id === "string" && this.index.opById.has(id);
    const row = h("tr", { class: "tv-row", data, on: selectable ? { click: () => this.onSelect(id) } : {} }, cells.map((c) => h("td", {}, c)));
    if (selectable) {
      if (!this.rowEls.has(id)) this.rowEls.set(id, []);
      this.rowEls.get(id).push(row);
    }
    return row;
  }

  build() {
    const entries = list(this.index.doc.nan_ledger).filter((e) => e.status !== "clean");
    const interventions = list(this.index.doc.interventions);
    const names = (xs) => h("code", {}, (Array.isArray(xs) ? xs : []).map(String).join(", "));
    const counts = LEDGER_ORDER.slice(0, 3).map((s) => `${entries.filter((e) => e.status === s).length} ${s}`).join(", ");
    const ledger = entries.length
      ? h("table", { class: "tv-table", data: { ledger: "" } },
        h("thead", {}, h("tr", {}, ["status", "backward op", "non-finite in", "non-finite out"].map((t) => h("th", {}, t)))),
        h("tbody", {}, entries.map((e) => this.row(String(e.op), [h("strong", { data: { status: String(e.status) } }, String(e.status)), this.describe(String(e.op)), names(e.bad_inputs), names(e.bad_outputs)], { "ledger-op": String(e.op) }))))
      : h("div", { class: "tv-empty" }, "No NaN or Inf in the recorded backward.");
    const edits = interventions.length
      ? h("table", { class: "tv-table", data: { interventions: "" } },
        h("thead", {}, h("tr", {}, ["edit", "target", "gradients of", "from step"].map((t) => h("th", {}, t)))),
        h("tbody", {}, interventions.map((iv, i) => this.row(typeof iv.op === "string" ? iv.op : undefined, [h("code", {}, describeEdit(iv.edit)), String(iv.target ?? ""), names(iv.names), String(iv.first_step ?? "")], { intervention: i }))))
      : h("div", { class: "tv-empty" }, "No interventions: the gradients are the program's own.");
    const controls = this.actions
      ? h("div", { class: "tv-status-line", data: { "intervene-controls": "" } },
        "Edit the gradient at the selection: ",
        EDIT_BUTTONS.map(([label, edit]) => {
          const button = h("button", { data: { edit: label }, attrs: { disabled: true }, on: { click: () => this.actions.intervene(edit) } }, label);
          this.editButtons.push(button);
          return button;
        }),
        interventions.length ? h("button", { data: { edit: "clear" }, on: { click: () => this.actions.clear() } }, "clear all") : null,
        " ",
        this.selectionLabel)
      : null;
    replace(
      this.el,
      controls,
      h("h4", {}, "NaN/Inf ledger"),
      h("div", { class: "tv-status-line" }, entries.length ? counts : ""),
      ledger,
      h("h4", {}, "Interventions"),
      interventions.length ? h("div", { class: "tv-status-line" }, "Steps, gradients and gradient flow in this document include these edits.") : null,
      edits,
    );
  }

  /** @param {{selected: string}} marks */
  mark(marks) {
    for (const [id, rows] of this.rowEls) for (const row of rows) row.classList.toggle("tv-selected", id === marks.selected);
    const selected = typeof marks.selected === "string" ? marks.selected : "";
    for (const button of this.editButtons) button.disabled = !selected;
    this.selectionLabel.textContent = selected ? `at ${this.describe(selected)}` : "select an op, a module or a tensor";
  }
}
