// Wiring: render({model, el}) builds the tabs and panels for model.get("document") and keeps
// them in step with the model's traits. All state that Python can see lives in the model;
// a click sets a trait and save_changes(), and the change event updates the view, so the
// same path serves clicks, Python and the in-memory model of static pages.

import { h, replace, clear } from "./dom.js";
import { installStyle } from "./style.js";
import { validation, parseDocument, indexing } from "./document.js";
import { runInSlices } from "./stages.js";
import { DEFAULT_LIMITS, defaultExpanded, isModuleId, modulePathOf } from "./visible.js";
import { linkedHighlights, addExplicitHighlights } from "./links.js";
import { describeOp, gradLabel } from "./opnames.js";
import { navigateSteps, emptyBreakpoints } from "./stepper.js";
import { GraphView } from "./graphview.js";
import { DetailsPanel } from "./details.js";
import { StepPanel } from "./steps.js";
import { SearchBox } from "./searchbox.js";
import { expansionToReveal } from "./search.js";
import { PaneExpansions, regionToFollow } from "./expansion.js";
import { backwardFlow } from "./gradflow.js";
import { ledgerMarks } from "./debugtools.js";
import { defineTabs } from "./tabs.js";
import { InterveneMenu } from "./intervenemenu.js";

/** Traits render() listens to (the Python widget defines the same names). */
const TRAITS = ["document", "selected", "highlight", "current_step", "steps", "tab", "expanded", "live"];

/**
 * anywidget entry point. Returns a cleanup function.
 * @param {{model: any, el: HTMLElement, options?: {height?: string|number, theme?: string, limits?: object, onReady?: () => void}}} args
 */
export function render({ model, el, options = {} }) {
  const root = h("div", { class: "tv-root" });
  if (options.theme === "light" || options.theme === "dark") root.classList.add(`tv-theme-${options.theme}`);
  const height = options.height ?? model.get("height");
  if (height !== undefined && height !== null && height !== "") {
    root.style.setProperty("--tv-height", typeof height === "number" ? `${height}px` : String(height));
  }
  installStyle(root);
  const content = h("div", { class: "tv-content" });
  content.style.display = "contents";
  root.appendChild(content);
  el.appendChild(root);

  let app = null;
  let cancel = () => {};
  // options.onReady: called once the document is drawn (or its error shown); see mountViewer
  const ready = () => options.onReady && options.onReady();
  const keep = { gradFlow: false }; // what outlives a new document (an intervention's redraw)
  const build = () => {
    cancel();
    if (app) app.destroy();
    app = null;
    clear(content);
    const { doc, error } = parseDocument(model.get("document"));
    if (error) {
      content.appendChild(errorBox(error));
      ready();
      return;
    }
    // A big document (a 12-layer GPT's is 4 MB) is checked and indexed in slices, so the page
    // never freezes on it; a small one is drawn before render() returns.
    const loading = h("div", { class: "tv-loading", attrs: { role: "status" } }, "Reading the document…");
    content.appendChild(loading);
    cancel = runInSlices(readDocument(doc), (read) => {
      loading.remove();
      if (read.error) {
        content.appendChild(errorBox(read.error));
        ready();
        return;
      }
      try {
        app = new App(model, content, read.index, options, keep);
      } catch (err) {
        clear(content);
        content.appendChild(errorBox(`The viewer failed on this document: ${err && err.message ? err.message : err}`));
        console.error(err); // eslint-disable-line no-console
      }
      ready();
    });
  };

  const handlers = new Map();
  for (const trait of TRAITS) {
    const handler = trait === "document" ? build : () => app && app.changed(trait);
    handlers.set(trait, handler);
    model.on(`change:${trait}`, handler);
  }
  const onMessage = (message) => app && app.message(message);
  model.on("msg:custom", onMessage);
  build();

  return () => {
    for (const [trait, handler] of handlers) if (model.off) model.off(`change:${trait}`, handler);
    if (model.off) model.off("msg:custom", onMessage);
    cancel();
    if (app) app.destroy();
    root.remove();
  };
}

/** Check the document (the whole schema), then index it: {index} or {error}. */
function* readDocument(doc) {
  const check = yield* validation(doc);
  return check.ok ? { index: yield* indexing(doc) } : { error: check.error };
}

export function errorBox(text) {
  const [first, ...rest] = String(text).split(/(?<=\.) /);
  return h("div", { class: "tv-error", attrs: { role: "alert" } }, h("strong", {}, first), rest.length ? " " + rest.join(" ") : "");
}

class App {
  constructor(model, container, index, options, keep = { gradFlow: false }) {
    const doc = index.doc;
    this.model = model;
    this.keep = keep;
    this.options = options;
    this.limits = { ...DEFAULT_LIMITS, ...(options.limits || {}) };
    this.index = index;
    this.local = { breakpoints: emptyBreakpoints(), gradFlow: keep.gradFlow, reason: "", follow: false };
    this.expansions = new PaneExpansions({
      read: () => this.expanded(),
      views: () => this.views,
      write: (list) => this.setTrait("expanded", list),
      maxNodes: this.limits.maxNodes,
      say: (text) => this.say(text),
    });
    this.views = []; // every GraphView of the document's traces, in any tab
    this.tabObjects = new Map();
    this.active = null;

    const select = (id) => this.select(id);
    this.details = new DetailsPanel({
      index: this.index,
      select,
      toggle: (id) => this.toggle(id),
      isExpanded: (id) => this.expanded().has(id),
      breakOn: (id) => this.breakOn(id),
    });
    this.stepPanel = new StepPanel({
      index: this.index,
      action: (action) => this.stepAction(action),
      setBreakpoints: (bp) => this.setBreakpoints(bp),
      select,
      jump: (i) => this.jump(i),
    });

    this.tabs = defineTabs(this);
    this.tabButtons = new Map(
      this.tabs.map((tab) => [tab.id, h("button", { data: { tab: tab.id }, on: { click: () => this.setTrait("tab", tab.id) } }, tab.label)]),
    );
    this.flash = h("div", { class: "tv-message", attrs: { "aria-live": "polite" }, data: { flash: "" } });
    this.body = h("div", { class: "tv-body" });
    this.searchBox = new SearchBox(this.index, (id) => this.reveal(id));
    container.appendChild(
      h("div", { class: "tv-header" }, h("span", { class: "tv-title", title: String(doc.title ?? "") }, String(doc.title ?? "thunderviz")), h("div", { class: "tv-tabs", attrs: { role: "tablist" } }, [...this.tabButtons.values()]), this.searchBox.el),
    );
    container.addEventListener("keydown", (event) => this.onKey(event));
    container.appendChild(this.flash);
    if (this.index.kinds.includes("forward") && !this.index.kinds.includes("backward")) {
      // Nothing in a forward-only document says why; these are the two ways to get one.
      container.appendChild(h("div", { class: "tv-note", data: { note: "no-backward" } },
        "No backward in this view: it was traced with fake=True (FakeTensors carry no values, so nothing is " +
        "differentiated or stepped) or made with backward=False. Trace with real inputs to see the backward, " +
        "the saved tensors and the steps."));
    }
    container.appendChild(this.body);
    this.menu = new InterveneMenu({ live: () => this.model.get("live"), select, describe: (id) => describeOp(this.index, id), intervene: (target, edit) => this.intervene(target, edit) });
    container.appendChild(this.menu.el);

    const current = model.get("expanded");
    if (!Array.isArray(current) || current.length === 0) {
      const defaults = [...this.defaultExpansion()];
      if (defaults.length) this.setTrait("expanded", defaults);
    }
    this.showTab();
  }

  destroy() {
    this.destroyed = true;
  }

  // ---- traits -------------------------------------------------------------------------

  setTrait(name, value) {
    this.model.set(name, value);
    this.model.save_changes();
  }

  expanded() {
    const list = this.model.get("expanded");
    return new Set(Array.isArray(list) ? list.filter((x) => typeof x === "string") : []);
  }

  steps() {
    const fromModel = this.model.get("steps");
    return Array.isArray(fromModel) && fromModel.length ? fromModel : this.index.steps;
  }

  currentStep() {
    const n = Number(this.model.get("current_step"));
    return Number.isInteger(n) ? n : -1;
  }

  changed(trait) {
    if (this.destroyed) return;
    if (trait === "tab") this.showTab();
    else {
      if (trait === "expanded") this.expansions.traitChanged();
      this.refresh(new Set([trait]));
    }
  }

  message(message) {
    if (message && typeof message === "object" && (message.type === "message" || message.type === "error")) {
      this.say(String(message.text ?? message.message ?? ""));
    }
  }

  say(text) {
    this.flash.textContent = text;
    clearTimeout(this.flashTimer);
    if (text) this.flashTimer = setTimeout(() => (this.flash.textContent = ""), 8000);
  }

  // ---- actions --------------------------------------------------------------------------

  /** @param {any} [from] the graph pane the selection was made in ("follow selection") */
  select(id, from = null) {
    this.selectedFrom = from;
    this.setTrait("selected", typeof id === "string" ? id : "");
  }

  /**
   * Expand or collapse a module ("module:<path>" or a path) or an op with subsymbols, in
   * `view` only (its ▸ / ▾, double-click, Enter on its node) or in every pane (the details
   * panel's button).
   */
  toggle(id, view = null) {
    const views = view ? [view] : this.views;
    for (const v of views) v.focusNext(id);
    this.expansions.toggle(id, views);
  }

  /** Select `id` after opening what hides it in every pane, so each can show it (search). */
  reveal(id) {
    if (this.expansions.add(this.views, expansionToReveal(this.index, id))) {
      for (const view of this.views) view.focusNext(null);
    }
    this.select(id);
  }

  /** "follow selection": the other panes open the region linked to the selection. */
  follow(selected, highlights) {
    const home = this.index.opById.get(selected);
    for (const view of this.active ? this.active.views : []) {
      if (view === this.selectedFrom || (home && home.kind === view.ti.kind)) continue;
      this.expansions.add([view], regionToFollow(view.ti, selected, highlights.ops));
    }
  }

  /**
   * Keys, while focus is in the viewer: / search, Esc clear the selection, n / p next /
   * previous step, Enter select the focused node or open / close the selection.
   */
  onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest && event.target.closest("input, select, textarea")) return;
    const focusedNode = event.target.closest && event.target.closest("g.node");
    const actions = {
      "/": () => this.searchBox.focus(),
      Escape: () => this.select(""),
      n: () => this.hasStepping() && this.stepAction("step"),
      p: () => this.hasStepping() && this.stepAction("back"),
      Enter: () => {
        const selected = String(this.model.get("selected") || "");
        const view = focusedNode && this.views.find((v) => v.el.contains(focusedNode));
        const id = view ? view.selectionOf(focusedNode.getAttribute("data-tv-id")) : selected;
        if (id !== selected) this.select(id);
        else if (id && (isModuleId(id) || this.index.opById.has(id))) this.toggle(id, view);
      },
    };
    const action = actions[event.key];
    if (!action) return;
    event.preventDefault();
    event.stopPropagation(); // not a notebook shortcut as well
    action();
  }

  stepAction(action) {
    const target = this.model.get("selected") || "";
    if (this.model.get("live")) {
      const message = { type: "step", action };
      if (action === "run_to") message.target = target;
      this.model.send(message);
      return;
    }
    const result = navigateSteps(this.index, this.steps(), this.currentStep(), action, { breakpoints: this.local.breakpoints, target });
    this.local.reason = result.reason;
    if (result.current !== this.currentStep()) this.setTrait("current_step", result.current);
    else this.refresh(new Set(["current_step"]));
  }

  jump(i) {
    this.local.reason = "";
    this.setTrait("current_step", i);
  }

  setBreakpoints(breakpoints) {
    this.local.breakpoints = breakpoints;
    if (this.model.get("live")) this.model.send({ type: "breakpoints", breakpoints });
    this.refresh(new Set(["breakpoints"]));
  }

  breakOn(id) {
    const bp = this.local.breakpoints;
    if (isModuleId(id)) {
      const path = modulePathOf(id);
      if (!bp.modules.includes(path)) this.setBreakpoints({ ...bp, modules: [...bp.modules, path] });
    } else if (!bp.ops.includes(id)) {
      this.setBreakpoints({ ...bp, ops: [...bp.ops, id] });
    }
  }

  /** Send an edit to the kernel, grad flow on to show its effect in the document it sends back. */
  intervene(target, edit) {
    this.setGradFlow(true);
    this.model.send({ type: "intervene", target, edit });
  }

  setGradFlow(on) {
    this.local.gradFlow = on;
    this.keep.gradFlow = on;
    for (const view of this.views) if (view.options.gradFlow) view.setGradFlow(on);
  }

  // ---- tabs -----------------------------------------------------------------------------

  showTab() {
    const wanted = this.model.get("tab");
    const tab = this.tabs.find((t) => t.id === wanted) || this.tabs[0];
    for (const [id, button] of this.tabButtons) {
      button.classList.toggle("tv-active", id === tab.id);
      button.setAttribute("aria-selected", String(id === tab.id));
    }
    if (!this.tabObjects.has(tab.id)) this.tabObjects.set(tab.id, tab.create());
    this.active = this.tabObjects.get(tab.id);
    // Only the active tab is in the DOM: hidden tabs cannot be measured (zoom-to-fit), and
    // test selectors then match one pane.
    replace(this.body, this.active.el);
    if (this.active.detailsSlot) replace(this.active.detailsSlot, this.details.el);
    this.refresh(null);
  }

  graphView(kind, title) {
    const ti = this.index.traces.get(kind);
    const view = new GraphView({
      ti,
      title,
      limits: this.limitsFor(kind),
      onSelect: (id) => this.select(id, view),
      currentSelection: () => String(this.model.get("selected") || ""),
      onToggle: (id) => this.toggle(id, view),
      onSetExpanded: (set) => this.expansions.set(view, set),
      defaultExpansion: () => this.defaultExpansion(),
      currentExpansion: () => this.expansions.of(view),
      // forward: the document's grad_flow; backward: the norms its recorded steps produced
      gradFlow: kind === "forward" ? this.index.gradFlow : kind === "backward" ? backwardFlow(this.index.steps, this.index.savedByName) : null,
      onGradFlowToggle: (on) => this.setGradFlow(on),
      onContextMenu: (id, event) => this.menu.open(id, event),
    });
    if (this.local.gradFlow && view.options.gradFlow) view.setGradFlow(true);
    this.views.push(view);
    return view;
  }

  /** Graph limits for one trace; in the backward, saved tensors enter as stubs at their readers. */
  limitsFor(kind) {
    if (kind !== "backward") return this.limits;
    const forwardOf = (op) => {
      const found = op.fwd_op ? this.index.opById.get(op.fwd_op) : undefined;
      return found ? found.op : undefined;
    };
    return {
      ...this.limits,
      savedInfo: (name) => this.index.savedByName.get(name),
      labelOf: (op) => gradLabel(op, forwardOf(op)),
    };
  }

  /**
   * The default expansion: the union of each trace's own breadth-first default. Module paths
   * are shared, so forward and backward open the same modules and read side by side.
   */
  defaultExpansion() {
    const union = new Set();
    for (const ti of this.index.traces.values()) for (const id of defaultExpanded(ti, this.limits)) union.add(id);
    return union;
  }


  hasStepping() {
    return this.steps().length > 0 || Boolean(this.model.get("live"));
  }

  // ---- refresh --------------------------------------------------------------------------

  /**
   * Bring the active tab up to date.
   * @param {Set<string> | null} changed trait names that changed; null = everything
   */
  refresh(changed) {
    const tab = this.active;
    if (!tab || this.destroyed) return;
    const all = changed === null;
    const has = (name) => all || changed.has(name);

    const selected = String(this.model.get("selected") || "");
    const highlights = addExplicitHighlights(linkedHighlights(this.index, selected), this.index, this.model.get("highlight"));
    if (has("selected") && selected && this.local.follow) this.follow(selected, highlights); // may change "expanded"

    if (has("expanded")) {
      for (const view of tab.views) view.setExpanded(this.expansions.of(view));
    }

    const steps = this.steps();
    const current = this.currentStep();
    const step = current >= 0 && current < steps.length ? steps[current] : null;
    const currentOps = [];
    if (step && typeof step.op === "string") {
      currentOps.push(step.op);
      const found = this.index.opById.get(step.op);
      if (found && found.op.fwd_op) currentOps.push(found.op.fwd_op);
    }
    let scrollTo;
    if (has("selected") && selected) scrollTo = [selected, ...highlights.ops];
    else if (has("current_step") && currentOps.length) scrollTo = currentOps;
    if (!this.ledger) this.ledger = ledgerMarks(this.index);
    const marks = { selected, highlights, current: currentOps, scrollTo, ledger: this.ledger };
    for (const view of tab.views) view.mark(marks);
    for (const text of tab.texts) text.mark(marks);
    if (tab.saved) tab.saved.mark(marks);
    if (tab.debug) tab.debug.mark(marks);

    if (tab.detailsSlot) {
      this.details.render({ selected, step, preferKind: tab.kind || null });
    }
    if (tab.stepsSlot) {
      if (this.hasStepping()) {
        if (this.stepPanel.el.parentNode !== tab.stepsSlot) replace(tab.stepsSlot, this.stepPanel.el);
        this.stepPanel.render({ steps, current, live: Boolean(this.model.get("live")), selected, reason: this.local.reason, breakpoints: this.local.breakpoints });
      } else {
        clear(tab.stepsSlot);
      }
    }
  }
}
