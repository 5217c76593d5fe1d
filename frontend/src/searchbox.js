// The search box in the viewer's header: type, see results, choose one (click or Enter).
// Choosing calls `choose(id)`; the viewer selects it, opens what hides it and scrolls
// every pane to it.

import { h, replace } from "./dom.js";
import { buildSearchIndex, search } from "./search.js";

const KIND_LABEL = { tensor: "tensor", module: "module", line: "line", op: "op" };

export class SearchBox {
  /**
   * @param {any} index the document index
   * @param {(id: string) => void} choose
   */
  constructor(index, choose) {
    this.index = index;
    this.choose = choose;
    this.entries = null; // built on first use: a big document should not pay for it up front
    this.results = [];
    this.active = -1;
    this.input = h("input", {
      attrs: {
        type: "search",
        placeholder: "Search ops, tensors, modules, file:line  ( / )",
        "aria-label": "Search ops, tensors, modules and source lines",
        autocomplete: "off",
        spellcheck: "false",
      },
      data: { search: "" },
    });
    this.list = h("ul", { class: "tv-search-results", attrs: { role: "listbox", hidden: true } });
    this.el = h("div", { class: "tv-search" }, this.input, this.list);
    this.input.addEventListener("input", () => this.update());
    this.input.addEventListener("focus", () => this.update());
    this.input.addEventListener("keydown", (event) => this.onKey(event));
    this.input.addEventListener("blur", () => setTimeout(() => (this.list.hidden = true), 150));
  }

  focus() {
    this.input.focus();
    this.input.select();
  }

  clear() {
    this.input.value = "";
    this.update();
  }

  update() {
    if (!this.entries) this.entries = buildSearchIndex(this.index);
    this.results = search(this.entries, this.input.value);
    this.active = this.results.length ? 0 : -1;
    replace(
      this.list,
      this.results.map((entry, i) =>
        h(
          "li",
          {
            attrs: { role: "option" },
            data: { result: entry.id, "result-kind": entry.kind },
            on: { mousedown: (event) => { event.preventDefault(); this.pick(i); } },
          },
          h("span", { class: "tv-search-kind" }, KIND_LABEL[entry.kind]),
          h("span", { class: "tv-search-title" }, entry.title),
          entry.detail ? h("span", { class: "tv-search-detail" }, entry.detail) : null,
        ),
      ),
    );
    if (this.input.value.trim() && !this.results.length) this.list.appendChild(h("li", { class: "tv-muted" }, "no match"));
    this.list.hidden = !this.input.value.trim();
    this.highlightActive();
  }

  highlightActive() {
    [...this.list.children].forEach((li, i) => {
      li.classList.toggle("tv-active", i === this.active);
      li.setAttribute("aria-selected", String(i === this.active));
      if (i === this.active && li.scrollIntoView) li.scrollIntoView({ block: "nearest" });
    });
  }

  pick(i) {
    const entry = this.results[i];
    if (!entry) return;
    this.list.hidden = true;
    this.choose(entry.id);
  }

  onKey(event) {
    event.stopPropagation(); // typing here is not a viewer (or notebook) shortcut
    if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      const n = this.results.length;
      if (n) this.active = (this.active + (event.key === "ArrowDown" ? 1 : n - 1)) % n;
      this.highlightActive();
    } else if (event.key === "Enter") {
      event.preventDefault();
      this.pick(Math.max(0, this.active));
    } else if (event.key === "Escape") {
      event.preventDefault();
      this.clear();
      this.input.blur();
    }
  }
}
