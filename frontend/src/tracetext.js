// The printed trace beside its graph. Lines carry data-tv-line; marking an op marks its
// line range, and clicking a line selects the deepest op whose range covers it.

import { h, scrollWithin } from "./dom.js";
import { lineRange } from "./traceindex.js";
import { isModuleId, modulePathOf } from "./visible.js";

const MARK_CLASSES = ["tv-selected", "tv-highlight", "tv-current-step"];

export class TraceText {
  /**
   * @param {any} ti trace index
   * @param {(id: string) => void} onSelect
   */
  constructor(ti, onSelect) {
    this.ti = ti;
    this.lineEls = [null];
    this.marked = [];
    const rows = ti.lines.map((text, i) => {
      const row = h(
        "div",
        { class: text.trimStart().startsWith("#") ? "tv-line tv-comment" : "tv-line", data: { line: i + 1 } },
        h("span", { class: "tv-lineno" }, String(i + 1)),
        h("span", { class: "tv-code" }, text),
      );
      this.lineEls.push(row);
      return row;
    });
    this.el = h("div", { class: "tv-trace-text", data: { trace: ti.kind } }, rows);
    this.el.addEventListener("click", (event) => {
      const row = event.target.closest && event.target.closest("[data-tv-line]");
      if (!row) return;
      const owner = ti.lineOwner[Number(row.getAttribute("data-tv-line"))];
      if (owner) onSelect(owner);
    });
  }

  /** Line numbers printed for an op id, a module id (all its ops) or nothing. */
  linesOf(id) {
    const ops = isModuleId(id) ? this.ti.moduleTopOps(modulePathOf(id)) : this.ti.ops.has(id) ? [id] : [];
    const lines = [];
    for (const op of ops) {
      const [from, to] = lineRange(this.ti.ops.get(op));
      if (from === null) continue;
      for (let n = from; n <= to; n++) lines.push(n);
    }
    return lines;
  }

  /**
   * @param {{selected: string, highlights: import("./links.js").Highlights, current: string[], scrollTo?: string | string[]}} marks
   */
  mark(marks) {
    for (const el of this.marked) el.classList.remove(...MARK_CLASSES);
    this.marked = [];
    const add = (lines, cls) => {
      for (const n of lines) {
        const el = this.lineEls[n];
        if (!el) continue;
        el.classList.add(cls);
        this.marked.push(el);
      }
    };
    for (const op of marks.highlights.ops) add(this.linesOf(op), "tv-highlight");
    for (const op of marks.current) add(this.linesOf(op), "tv-current-step");
    if (marks.selected) add(this.linesOf(marks.selected), "tv-selected");
    for (const id of [].concat(marks.scrollTo || [])) {
      const first = this.linesOf(id)[0];
      if (first !== undefined) {
        scrollWithin(this.el, this.lineEls[first], { center: true, horizontal: false });
        break;
      }
    }
  }
}
