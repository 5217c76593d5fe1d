// The transform stepper: pick a recorded transform run, move through its visit steps, see
// the visited op (in the graph of the trace before the transform) and the text diff.

import { h, replace, scrollWithin } from "./dom.js";
import { diffLines } from "./diff.js";
import { buildTraceIndex } from "./traceindex.js";
import { defaultExpanded } from "./visible.js";
import { GraphView } from "./graphview.js";
import { emptyHighlights } from "./links.js";

export class TransformsPanel {
  /**
   * @param {any[]} runs TransformRun records
   * @param {{limits?: object}} [options]
   */
  constructor(runs, options = {}) {
    this.runs = runs;
    this.options = options;
    this.runIndex = 0;
    this.stepIndex = 0;
    this.graphs = new Map(); // run index -> {view, expanded}

    this.select = h("select", { data: { "transform-run": "" } }, runs.map((run, i) => h("option", { attrs: { value: i } }, `${run.name ?? `run ${i + 1}`} (${(run.steps || []).length} steps)`)));
    this.select.addEventListener("change", () => this.showRun(Number(this.select.value)));
    this.prev = h("button", { data: { action: "transform-prev" }, on: { click: () => this.showStep(this.stepIndex - 1) } }, "◀");
    this.next = h("button", { data: { action: "transform-next" }, on: { click: () => this.showStep(this.stepIndex + 1) } }, "▶");
    this.slider = h("input", { attrs: { type: "range", min: 0, max: 0, value: 0 }, data: { "transform-step": "" } });
    this.slider.addEventListener("input", () => this.showStep(Number(this.slider.value)));
    this.status = h("span", { class: "tv-transform-status" });
    this.info = h("div", { class: "tv-transform-info" });
    this.diff = h("div", { class: "tv-diff" });
    this.graphSlot = h("div", { class: "tv-col" });
    this.el = [
      h("div", { class: "tv-transform-controls" }, h("label", {}, "transform ", this.select), this.prev, this.slider, this.next, this.status),
      h("div", { class: "tv-col" }, h("div", { class: "tv-toolbar" }, h("span", { class: "tv-pane-title" }, "trace text"), this.info), this.diff),
      this.graphSlot,
    ];
    this.showRun(0);
  }

  showRun(i) {
    this.runIndex = Math.max(0, Math.min(this.runs.length - 1, i));
    this.select.value = String(this.runIndex);
    const run = this.runs[this.runIndex];
    const steps = Array.isArray(run.steps) ? run.steps : [];
    this.slider.max = String(Math.max(0, steps.length - 1));
    this.slider.disabled = steps.length <= 1;
    replace(this.graphSlot, this.graphFor(this.runIndex) || h("div", { class: "tv-empty" }, "This run recorded no trace_before graph."));
    this.showStep(0);
  }

  graphFor(i) {
    const run = this.runs[i];
    const before = run.trace_before;
    if (!before || typeof before !== "object" || !Array.isArray(before.ops)) return null;
    if (!this.graphs.has(i)) {
      const ti = buildTraceIndex(before, "transform");
      const state = { expanded: defaultExpanded(ti, this.options.limits) };
      const view = new GraphView({
        ti,
        title: `before ${run.name ?? "transform"}`,
        limits: this.options.limits,
        onSelect: (id) => {
          // a click jumps to the step that visits the op
          const steps = this.runs[this.runIndex].steps || [];
          const target = steps.findIndex((s) => s.visited === id);
          if (target >= 0) this.showStep(target);
        },
        onToggle: (id) => {
          if (state.expanded.has(id)) state.expanded.delete(id);
          else state.expanded.add(id);
          view.setExpanded(state.expanded);
        },
      });
      this.graphs.set(i, { view, state });
      view.setExpanded(state.expanded);
    }
    return this.graphs.get(i).view.el;
  }

  showStep(j) {
    const run = this.runs[this.runIndex];
    const steps = Array.isArray(run.steps) ? run.steps : [];
    if (!steps.length) {
      this.status.textContent = "no steps";
      replace(this.info);
      replace(this.diff, ...diffView(diffLines(run.before, run.after)));
      return;
    }
    this.stepIndex = Math.max(0, Math.min(steps.length - 1, j));
    this.slider.value = String(this.stepIndex);
    this.prev.disabled = this.stepIndex === 0;
    this.next.disabled = this.stepIndex === steps.length - 1;
    const step = steps[this.stepIndex];
    this.status.textContent = `step ${this.stepIndex + 1} / ${steps.length}`;
    replace(
      this.info,
      h("span", { class: "tv-badge" }, String(step.visit_type ?? "?")),
      step.visited ? h("code", {}, String(step.visited)) : h("span", { class: "tv-muted" }, "no op"),
    );
    const previous = this.stepIndex === 0 ? run.before : steps[this.stepIndex - 1].text;
    const current = typeof step.text === "string" ? step.text : null;
    const lines = current !== null ? diffLines(previous, current) : fallbackDiff(step);
    replace(this.diff, ...diffView(lines));
    const firstChange = this.diff.querySelector(".tv-diff-removed, .tv-diff-inserted");
    if (firstChange) scrollWithin(this.diff, firstChange);

    const graph = this.graphs.get(this.runIndex);
    if (graph) {
      graph.view.mark({ selected: "", highlights: emptyHighlights(), current: step.visited ? [step.visited] : [], scrollTo: step.visited || undefined });
    }
  }
}

/** When a step has no full text, show what it recorded as inserted / removed. */
function fallbackDiff(step) {
  const removed = (step.removed || []).map((text) => ({ type: "removed", text: String(text) }));
  const inserted = (step.inserted || []).map((text) => ({ type: "inserted", text: String(text) }));
  return [...removed, ...inserted];
}

function diffView(lines) {
  return lines.map((line) =>
    h("div", { class: `tv-diff-line${line.type === "same" ? "" : ` tv-diff-${line.type}`}`, data: { diff: line.type } }, line.text),
  );
}
