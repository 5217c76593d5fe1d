// Right-click on a backward op or a module in a graph: a menu of gradient edits at that
// node (zero, scale, clip, clamp: debugtools.js EDIT_BUTTONS). With a live kernel a choice
// sends the same "intervene" message as the debugging tab's buttons; the widget re-runs the
// backward and sends back the document, whose gradient flow then shows the edit. Without a
// kernel (an exported page, a reopened notebook) the menu says why its items are disabled.

import { h, replace } from "./dom.js";
import { EDIT_BUTTONS } from "./debugtools.js";
import { traceKindOfId } from "./document.js";
import { isModuleId } from "./visible.js";

/** Whether a graph id can take an intervention: a backward op or a module. */
export function canIntervene(id) {
  return typeof id === "string" && (isModuleId(id) || traceKindOfId(id) === "backward");
}

export class InterveneMenu {
  /**
   * @param {{live: () => boolean, intervene: (target: string, edit: any) => void,
   *          describe: (id: string) => string, select: (id: string) => void}} options
   */
  constructor(options) {
    this.options = options;
    this.target = null;
    this.el = h("div", { class: "tv-menu", attrs: { role: "menu", hidden: true, tabindex: "-1" }, data: { "intervene-menu": "" } });
    this.el.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.stopPropagation();
        this.close();
      }
    });
    this.onOutside = (event) => {
      if (!this.el.contains(event.target)) this.close();
    };
  }

  /**
   * Open at the pointer for `id`, if it can take an edit (it is selected too).
   * @returns {boolean} whether the menu opened (the caller then cancels the browser's menu)
   */
  open(id, event) {
    if (!canIntervene(id)) return false;
    this.options.select(id);
    this.target = id;
    const live = Boolean(this.options.live());
    replace(
      this.el,
      h("div", { class: "tv-menu-title" }, `Edit the gradient at ${this.options.describe(id)}`),
      EDIT_BUTTONS.map(([label, edit]) =>
        h("button", { attrs: { role: "menuitem", disabled: !live }, data: { "menu-edit": label }, on: { click: () => this.choose(edit) } }, label)),
      live ? null : h("div", { class: "tv-menu-note", data: { "menu-note": "" } },
        "Interventions need a live kernel: show the Session in a running notebook (this view is a saved document)."),
    );
    this.el.style.left = `${Math.round(event.clientX)}px`;
    this.el.style.top = `${Math.round(event.clientY)}px`;
    this.el.hidden = false;
    const doc = this.el.ownerDocument;
    doc.addEventListener("pointerdown", this.onOutside, true);
    (this.el.querySelector("button:not([disabled])") || this.el).focus(); // Esc closes it from here
    return true;
  }

  choose(edit) {
    const target = this.target;
    this.close();
    if (target !== null && this.options.live()) this.options.intervene(target, edit);
  }

  close() {
    this.el.hidden = true;
    this.target = null;
    this.el.ownerDocument.removeEventListener("pointerdown", this.onOutside, true);
  }
}
