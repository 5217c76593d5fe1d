// The backward step panel: step / step over / continue / run to / back / reset, breakpoints,
// the current step's statistics. Actions go to the kernel when `live`, otherwise they move
// through the recorded steps locally (stepper.js).

import { describeOp } from "./opnames.js";
import { h, replace } from "./dom.js";
import { isModuleId, modulePathOf } from "./visible.js";
import { statsTable } from "./statsview.js";
import { stepHasNanInf } from "./stepper.js";

const BUTTONS = [
  ["reset", "⟲ Reset", "Back to before the first step"],
  ["back", "◀ Back", "One step back"],
  ["step", "▶ Step", "Execute the next backward op"],
  ["step_over", "⤼ Step over", "Run to the first op outside the current op's module"],
  ["continue", "» Continue", "Run to the next NaN/Inf or breakpoint (else the end)"],
  ["run_to", "⇥ Run to", "Run to the selected op"],
];

/** Most step rows listed; the list is a navigation aid, not a log. */
const MAX_LISTED_STEPS = 2000;

/**
 * @typedef {object} StepContext
 * @property {ReturnType<import("./document.js").indexDocument>} index
 * @property {(action: string) => void} action
 * @property {(breakpoints: import("./stepper.js").Breakpoints) => void} setBreakpoints
 * @property {(id: string) => void} select
 * @property {(index: number) => void} jump   local only: make step `index` current
 */

export class StepPanel {
  /** @param {StepContext} ctx */
  constructor(ctx) {
    this.ctx = ctx;
    this.buttons = new Map();
    for (const [action, label, title] of BUTTONS) {
      this.buttons.set(action, h("button", { title, data: { action }, on: { click: () => ctx.action(action) } }, label));
    }
    this.liveBadge = h("span", { class: "tv-badge", title: "A kernel drives stepping" }, "kernel");
    this.status = h("div", { class: "tv-status" });
    this.current = h("div", { class: "tv-step-current" });
    this.bpButtons = {
      op: h("button", { data: { action: "bp-op" }, on: { click: () => this.addBreakpoint("op") } }, "+ selected op"),
      module: h("button", { data: { action: "bp-module" }, on: { click: () => this.addBreakpoint("module") } }, "+ its module"),
    };
    this.nanBox = h("input", { attrs: { type: "checkbox" }, data: { action: "bp-nan" } });
    this.nanBox.addEventListener("change", () => this.update({ nan_inf: this.nanBox.checked }));
    this.normInput = h("input", { attrs: { type: "number", step: "any", min: "0", placeholder: "off", size: 6 }, data: { action: "bp-norm" } });
    this.normInput.style.width = "6em";
    this.normInput.addEventListener("change", () => {
      const value = this.normInput.value === "" ? null : Number(this.normInput.value);
      this.update({ grad_norm_above: Number.isFinite(value) ? value : null });
    });
    this.bpList = h("ul", { class: "tv-bp-list" });
    this.list = h("div", { class: "tv-step-list" });
    this.listShown = false;
    this.listToggle = h("button", { data: { action: "step-list" }, on: { click: () => { this.listShown = !this.listShown; this.render(this.state); } } }, "all steps");
    this.el = h(
      "div",
      { class: "tv-steps" },
      h("div", { class: "tv-step-buttons" }, [...this.buttons.values()], this.liveBadge),
      this.status,
      this.current,
      h("h4", {}, "breakpoints"),
      h("div", { class: "tv-bp" }, this.bpButtons.op, this.bpButtons.module, h("label", {}, this.nanBox, "NaN/Inf"), h("label", {}, "norm >", this.normInput), this.listToggle),
      this.bpList,
      this.list,
    );
    this.state = null;
  }

  update(patch) {
    this.ctx.setBreakpoints({ ...this.state.breakpoints, ...patch });
  }

  addBreakpoint(what) {
    const { selected, breakpoints } = this.state;
    if (!selected) return;
    if (what === "op") {
      if (!breakpoints.ops.includes(selected)) this.update({ ops: [...breakpoints.ops, selected] });
      return;
    }
    const path = isModuleId(selected) ? modulePathOf(selected) : this.moduleOfSelected(selected);
    if (path !== null && !breakpoints.modules.includes(path)) this.update({ modules: [...breakpoints.modules, path] });
  }

  moduleOfSelected(id) {
    const found = this.ctx.index.opById.get(id);
    return found ? this.ctx.index.moduleOf(found.op) : null;
  }

  /**
   * @param {{steps: any[], current: number, live: boolean, selected: string, reason: string,
   *          breakpoints: import("./stepper.js").Breakpoints}} state
   */
  render(state) {
    this.state = state;
    const { steps, current, live, selected, breakpoints } = state;
    const n = steps.length;
    const canRunTo = Boolean(selected) && (this.ctx.index.opById.has(selected) || isModuleId(selected));
    for (const [action, button] of this.buttons) {
      let enabled = live || n > 0;
      if (!live && (action === "step" || action === "continue" || action === "step_over" || action === "run_to")) enabled = n > 0 && current < n - 1;
      if (!live && (action === "back" || action === "reset")) enabled = current >= 0;
      if (action === "run_to") enabled = enabled && canRunTo;
      button.disabled = !enabled;
    }
    this.liveBadge.hidden = !live;

    const step = current >= 0 && current < n ? steps[current] : null;
    const note = step && step.note ? String(step.note) : "";
    const reason = [state.reason, note].filter(Boolean).join(" · ");
    replace(
      this.status,
      n === 0 && !live ? "no recorded steps" : `step ${step ? current + 1 : 0} / ${n}`,
      reason ? h("span", { class: "tv-reason" }, reason) : null,
    );
    if (step) {
      const found = this.ctx.index.opById.get(step.op);
      replace(
        this.current,
        h("div", { class: "tv-step-op" },
          h("button", { class: "tv-link", title: `select ${step.op}`, on: { click: () => this.ctx.select(step.op) } }, describeOp(this.ctx.index, step.op)),
          found && found.op.fwd_op ? [" ← ", h("button", { class: "tv-link", title: `select ${found.op.fwd_op}`, on: { click: () => this.ctx.select(found.op.fwd_op) } }, describeOp(this.ctx.index, found.op.fwd_op))] : null,
          stepHasNanInf(step) ? h("span", { class: "tv-badge tv-bad" }, "NaN/Inf") : null),
        h("h4", {}, "outputs"),
        statsTable(step.outputs, this.ctx.select),
        h("h4", {}, "gradients finished"),
        statsTable(step.grads, this.ctx.select),
      );
    } else {
      replace(this.current, h("div", { class: "tv-muted" }, n ? "Before the first step. Press Step or Continue." : live ? "Waiting for the kernel." : ""));
    }

    this.bpButtons.op.disabled = !canRunTo;
    this.bpButtons.module.disabled = !canRunTo;
    this.nanBox.checked = breakpoints.nan_inf;
    if (document.activeElement !== this.normInput) this.normInput.value = breakpoints.grad_norm_above === null ? "" : String(breakpoints.grad_norm_above);
    const remove = (patch) => h("button", { class: "tv-link", title: "remove", on: { click: () => this.update(patch) } }, "×");
    replace(
      this.bpList,
      breakpoints.ops.map((op) => h("li", {}, remove({ ops: breakpoints.ops.filter((o) => o !== op) }), "op ", h("code", {}, op))),
      breakpoints.modules.map((m) => h("li", {}, remove({ modules: breakpoints.modules.filter((x) => x !== m) }), "module ", h("code", {}, m || "(root)"))),
    );

    this.list.hidden = !this.listShown || n === 0;
    this.listToggle.disabled = n === 0;
    if (this.listShown && n) this.renderList(steps, current, live);
  }

  renderList(steps, current, live) {
    const rows = steps.slice(0, MAX_LISTED_STEPS).map((step, i) => {
      const found = this.ctx.index.opById.get(step.op);
      const cls = ["tv-row", i === current ? "tv-current-step" : "", stepHasNanInf(step) ? "tv-highlight" : ""].join(" ");
      return h(
        "tr",
        { class: cls, data: { step: i }, on: { click: () => (live ? this.ctx.select(step.op) : this.ctx.jump(i)) } },
        h("td", { class: "tv-num" }, String(i + 1)),
        h("td", {}, h("code", {}, String(step.op))),
        h("td", {}, found ? String(found.op.label || found.op.name) : ""),
        h("td", { class: "tv-muted" }, step.note ? String(step.note) : ""),
      );
    });
    replace(this.list, h("table", { class: "tv-table" }, h("tbody", {}, rows)));
  }
}
