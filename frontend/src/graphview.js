// One graph pane: toolbar, the laid-out SVG, clicks, zoom/pan, and the classes that show
// selection, highlights, the current step and the gradient-flow overlay.
// The pane owns no state of its own beyond zoom: its owner tells it what is expanded and
// what to mark, and hears back through onSelect / onToggle.

import { h, replace, scrollWithin } from "./dom.js";
import { graphToolbar, bindPaneEvents, READABLE_ZOOM } from "./graphcontrols.js";
import { nodeTooltip, splitToggle, viewBoxSize } from "./graphlabels.js";
import { fitVisibleGraph, nodesFor, moduleId, DEFAULT_LIMITS } from "./visible.js";
import { graphToDot, tensorLabel } from "./dot.js";
import { layoutDot, timings } from "./layout.js";
import { buildSvg, insertInSlices, nextFrameTurn } from "./svgtree.js";
import { svgText, svgToPng, download } from "./picture.js";
import { Minimap } from "./minimap.js";
import { GradOverlay } from "./gradoverlay.js";
import { LEDGER_CLASSES } from "./debugtools.js";

/** Graphs bigger than this are laid out without edge labels and with cheaper settings. */
const FAST_LAYOUT_NODES = 500;
/** What rendering one slice of a new SVG may take (insertInSlices adapts the slices to it). */
const SLICE_FRAME_MS = 40;
const MARK_CLASSES = ["tv-selected", "tv-highlight", "tv-current-step", ...LEDGER_CLASSES];
let paneCount = 0;

export class GraphView {
  /**
   * @param {object} options
   * @param {any} options.ti trace index
   * @param {string} options.title
   * @param {(id: string) => void} options.onSelect
   * @param {() => string} [options.currentSelection] the selection before a click changes it
   * @param {(id: string) => void} options.onToggle
   * @param {(expanded: Set<string>) => void} [options.onSetExpanded] toolbar "default" / "collapse all"
   * @param {() => Set<string>} [options.defaultExpansion]
   * @param {() => Set<string>} [options.currentExpansion]
   * @param {Record<string, any>} [options.gradFlow] grad_flow of the document, for the overlay toggle
   * @param {(id: string, event: MouseEvent) => boolean} [options.onContextMenu] right-click on a node: true when handled
   * @param {(on: boolean) => void} [options.onGradFlowToggle]
   * @param {Partial<typeof DEFAULT_LIMITS>} [options.limits]
   */
  constructor(options) {
    this.options = options;
    this.ti = options.ti;
    this.graph = null;
    this.dot = null;
    // Zoom 1 draws Graphviz's 10 pt labels 10 px high: the smallest that reads comfortably.
    // The default view keeps it and centres on what matters; "Fit" shows everything.
    this.zoom = READABLE_ZOOM;
    this.firstLayout = true;
    this.token = 0;
    this.lane = `pane-${++paneCount}`; // its own layout worker (src/layout.js)
    this.nodeEls = new Map(); // visible node id -> <g>
    this.clusterEls = new Map(); // cluster id -> <g>
    this.edgeEls = []; // [{el, edge}]
    this.marked = [];
    this.lastMarks = null;
    this.gradFlowOn = false;
    /** @type {HTMLInputElement | null} the toolbar's grad-flow box, where graphcontrols.js makes one */
    this.gradFlowBox = null;

    this.message = h("div", { class: "tv-message" });
    this.busy = h("div", { class: "tv-busy" });
    this.canvas = h("div", { class: "tv-graph-canvas" });
    this.legend = h("div", { class: "tv-legend", attrs: { hidden: true } });
    this.overlay = new GradOverlay(this.legend);
    this.minimap = new Minimap(this.canvas);
    this.el = h(
      "div",
      { class: "tv-graph-pane", data: { graph: this.ti.kind, ready: "false" } },
      graphToolbar(this),
      this.message,
      this.canvas,
      this.minimap.el,
      this.busy,
      this.legend,
    );
    bindPaneEvents(this);
  }


  /**
   * Show the graph for this expansion; lays out only when the visible graph changed.
   * @param {Set<string>} expanded
   * @returns {Promise<void>}
   */
  async setExpanded(expanded) {
    // Each pane works out its graph in a task of its own, after the click that asked for it
    // has been answered: no single task does the work of every pane.
    const token = ++this.token;
    const wasReady = this.el.getAttribute("data-tv-ready");
    this.el.setAttribute("data-tv-ready", "false");
    await nextTask();
    if (token !== this.token) return;
    const limits = { ...DEFAULT_LIMITS, ...(this.options.limits || {}) };
    const fitted = fitVisibleGraph(this.ti, expanded, limits);
    if (!fitted.graph) {
      this.graph = null;
      this.dot = null;
      this.message.textContent =
        `This trace has ${fitted.count.toLocaleString("en")} nodes even with everything collapsed, more than the ` +
        `${limits.maxNodes.toLocaleString("en")} the layout is given. Use the trace text panel.`;
      replace(this.canvas);
      this.el.setAttribute("data-tv-ready", "true");
      return;
    }
    this.message.textContent = fitted.dropped.length
      ? `Kept ${fitted.dropped.length} expansion(s) collapsed: expanding them would show ` +
        `${fitted.count.toLocaleString("en")} nodes, more than the ${limits.maxNodes.toLocaleString("en")} ` +
        `the layout is given.`
      : "";
    const fast = fitted.graph.nodes.length > FAST_LAYOUT_NODES;
    const { dot, items } = graphToDot(fitted.graph, this.ti, { labels: !fast, fast });
    if (dot === this.dot) {
      this.anchor = null; // nothing moves
      // drawn already; a request this one superseded may not have settled the view yet
      if (wasReady === "true") this.el.setAttribute("data-tv-ready", "true");
      else await this.settle(() => token !== this.token);
      return;
    }
    this.busy.textContent = `laying out ${fitted.graph.nodes.length} nodes…`;
    let result;
    try {
      result = await layoutDot(dot, { lane: this.lane });
    } catch (err) {
      if (token !== this.token) return;
      this.busy.textContent = "";
      this.message.textContent = `Layout failed: ${err && err.message ? err.message : err}`;
      this.el.setAttribute("data-tv-ready", "true");
      return;
    }
    if (token !== this.token || result === null) return; // a newer request superseded this one
    const superseded = () => token !== this.token;
    const svg = await buildSvg(result.tree, this.el.ownerDocument, { cancelled: superseded });
    if (svg === null || superseded()) return;
    await nextTask(); // building took the last slice; tagging and marking get their own task
    if (superseded()) return;
    this.graph = fitted.graph;
    this.dot = null; // what is on the page is no longer a whole drawing of any DOT
    this.install(svg, items);
    this.el.setAttribute("data-tv-nodes", String(fitted.graph.nodes.length));
    this.el.setAttribute("data-tv-layout-ms", String(Math.round(result.ms)));
    if (timings.init !== null) this.el.setAttribute("data-tv-wasm-init-ms", String(Math.round(timings.init)));
    if (timings.where) this.el.setAttribute("data-tv-layout-where", timings.where); // "worker" | "main"
    if (this.lastMarks) this.mark({ ...this.lastMarks, scrollTo: undefined });
    if (this.gradFlowOn) this.applyGradFlow();
    // marked while off the page; then in, a slice per frame (svgtree.js: insertInSlices)
    const afterSlice = () => this.keepAnchor();
    if (!(await insertInSlices(this.canvas, svg, { cancelled: superseded, afterSlice, targetFrameMs: SLICE_FRAME_MS }))) return;
    // Only now is `dot` drawn: a request superseding this one while its slices went in (a
    // click selecting an op) lays the same DOT out again (a cache hit) and puts it on the
    // page, rather than taking it for drawn and leaving the pane empty.
    this.dot = dot;
    this.busy.textContent = "";
    await this.settle(superseded);
  }

  /** The drawing is on the page: scroll it into place, then say the pane is ready. */
  async settle(superseded) {
    // Scrolling reads geometry. Read it now and the browser lays the new SVG out inside this
    // task (50-100 ms for a few hundred nodes); read it once the next frame has been drawn
    // and the layout is already done, in a turn of its own (no other pane's slice put in
    // after that frame).
    await nextFrameTurn();
    if (superseded()) return;
    this.keepAnchor();
    this.centreOnFocus(this.firstLayout);
    this.firstLayout = false;
    this.updateMinimap();
    this.el.setAttribute("data-tv-ready", "true");
  }

  /** Tag a laid-out SVG's elements with our ids; setExpanded then puts it on the page. */
  install(svg, items) {
    this.nodeEls.clear();
    this.clusterEls.clear();
    this.edgeEls = [];
    this.marked = [];
    for (const g of svg.querySelectorAll("g.node, g.cluster, g.edge")) {
      const title = g.querySelector(":scope > title");
      const item = title ? items.get(title.textContent) : undefined;
      g.removeAttribute("id"); // Graphviz's ids ("node1") would repeat across panes
      if (!item) continue;
      if (item.type === "edge") {
        this.edgeEls.push({ el: g, edge: item.edge });
        if (title) title.textContent = item.edge.tensors.map((t) => `${t}: ${tensorLabel(this.ti.tensors[t])}`).join("\n");
        continue;
      }
      g.setAttribute("data-tv-id", item.id);
      if (item.type === "node") {
        const node = this.graph.nodeById.get(item.id);
        g.setAttribute("data-tv-type", node.type);
        // reachable with Tab, read by screen readers; Enter selects (viewer.js onKey)
        g.setAttribute("tabindex", "0");
        g.setAttribute("role", "button");
        g.setAttribute("aria-label", [...g.querySelectorAll(":scope > text")].map((t) => t.textContent).join(", "));
        this.nodeEls.set(item.id, g);
        if (title) title.textContent = nodeTooltip(this.ti, node);
        if (node.expandable) splitToggle(g.querySelector(":scope > text"));
      } else {
        this.clusterEls.set(item.id, g);
        if (title) title.textContent = `${item.id} (click ▾ to collapse)`;
        splitToggle(g.querySelector(":scope > text"));
      }
    }
    this.svg = svg;
    this.natural = viewBoxSize(svg);
    this.setZoom(this.zoom, null);
  }

  /** Download the drawn graph (src/picture.js). */
  async exportPicture(format) {
    if (!this.svg || !this.natural) return;
    const css = getComputedStyle(this.el);
    const colour = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
    const text = svgText(this.svg, this.natural, {
      highlight: colour("--tv-highlight", "#0ea5e9"),
      selected: colour("--tv-select", "#f59e0b"),
      current: colour("--tv-current", "#e11d48"),
      ...Object.fromEntries(["born", "healed", "propagated"].map((status) => [status, colour(`--tv-ledger-${status}`, "#c026d3")])),
    });
    const name = `thunderviz-${this.ti.kind}.${format}`;
    const doc = this.el.ownerDocument;
    if (format === "svg") download(doc, new Blob([text], { type: "image/svg+xml" }), name);
    else download(doc, await svgToPng(text, this.natural), name);
  }

  /** What a click on a visible node selects: a saved-tensor stub selects its tensor. */
  selectionOf(id) {
    const node = this.graph && this.graph.nodeById.get(id);
    if (node && node.type === "saved") return node.tensors.length === 1 ? node.tensors[0] : node.reader;
    return id;
  }


  /** Zoom to fit the pane's width (never above 100%, never below 30%). */
  fit() {
    const width = this.canvas.clientWidth;
    const height = this.canvas.clientHeight;
    if (!this.natural || !width || !height) return this.setZoom(READABLE_ZOOM);
    this.setZoom(Math.min(READABLE_ZOOM, (width - 8) / this.natural.width, (height - 8) / this.natural.height));
  }

  /** Redraw the overview (after a layout, a zoom; reads geometry, so not mid-layout). */
  updateMinimap() {
    if (this.svg) this.minimap.update(this.svg, this.nodeEls, new Set(this.marked.filter((el) => el.classList.contains("tv-selected"))));
  }

  /**
   * The next layout keeps `id` (a module or op just opened or closed) where it is on the
   * screen: the same point of the pane shows the top middle of its box before and after,
   * so an expansion grows the module in place instead of moving what the user was
   * looking at. Where it was not drawn (or cannot stay, at the graph's edge), the layout
   * brings it into view instead.
   */
  focusNext(id) {
    this.toggled = id;
    this.anchor = id ? this.screenPosition(id) : null;
    this.anchored = false;
  }

  /** The top middle of what draws `id` (its open box, else its node), relative to the pane. */
  screenPosition(id) {
    const cluster = this.clusterEls.get(id);
    const node = cluster || !this.graph ? undefined : nodesFor(this.graph, this.ti, id)[0];
    const el = cluster || (node !== undefined ? this.nodeEls.get(node) : undefined);
    if (!el || !el.isConnected || typeof el.getBoundingClientRect !== "function") return null;
    const pane = this.canvas.getBoundingClientRect();
    const box = el.getBoundingClientRect();
    return { id, x: box.left + box.width / 2 - pane.left, y: box.top - pane.top };
  }

  /** Once the anchored id is drawn again, scroll so it is where it was (focusNext). */
  keepAnchor() {
    if (!this.anchor) return;
    const now = this.screenPosition(this.anchor.id);
    if (!now) return;
    const left = this.canvas.scrollLeft + now.x - this.anchor.x;
    const top = this.canvas.scrollTop + now.y - this.anchor.y;
    this.canvas.scrollLeft = left;
    this.canvas.scrollTop = top;
    // Kept when the pane could scroll that far down the graph (the direction it grows in;
    // sideways the graph may be narrower than the pane); else centreOnFocus shows it.
    this.anchored = Math.abs(this.canvas.scrollTop - top) < 1;
    this.anchor = null;
  }

  /**
   * After a layout (and on "1:1"): bring the selection, else the current step, into the
   * middle of the pane; with nothing to show, the first time, the top of the graph.
   */
  centreOnFocus(firstTime) {
    const marks = this.lastMarks;
    const toggled = this.toggled;
    this.toggled = null;
    this.anchor = null;
    if (this.anchored) {
      this.anchored = false; // what was toggled stayed put: move nothing else either
      return;
    }
    const linked = marks && marks.highlights ? [...marks.highlights.ops] : [];
    const focus = [toggled, ...(marks ? [marks.selected, ...(marks.current || []), ...linked] : [])].filter(Boolean);
    if (focus.length && this.scrollTo(focus)) return;
    if (firstTime) {
      this.canvas.scrollTop = 0;
      this.canvas.scrollLeft = Math.max(0, (this.canvas.scrollWidth - this.canvas.clientWidth) / 2);
    }
  }

  /**
   * @param {number} zoom
   * @param {{x: number, y: number} | null} [anchor] client point that stays put (the
   *   pointer for Ctrl+wheel); default the pane's centre; null: no scrolling
   */
  setZoom(zoom, anchor) {
    const old = this.zoom;
    this.zoom = Math.max(0.05, Math.min(4, zoom));
    if (!this.svg || !this.natural) return;
    const box = anchor === null ? null : this.canvas.getBoundingClientRect(); // null: no layout read
    const point = box && (anchor || { x: box.left + box.width / 2, y: box.top + box.height / 2 });
    const before = point && { x: this.canvas.scrollLeft + point.x - box.left, y: this.canvas.scrollTop + point.y - box.top };
    this.svg.setAttribute("width", `${Math.round(this.natural.width * this.zoom)}px`);
    this.svg.setAttribute("height", `${Math.round(this.natural.height * this.zoom)}px`);
    if (before && old) {
      const k = this.zoom / old;
      this.canvas.scrollLeft = before.x * k - (point.x - box.left);
      this.canvas.scrollTop = before.y * k - (point.y - box.top);
    }
    if (anchor !== null) this.updateMinimap();
  }

  /**
   * Apply selection / highlight / current-step classes.
   * @param {{selected: string, highlights: import("./links.js").Highlights, current: string[], scrollTo?: string | string[], ledger?: Map<string, string>}} marks
   *   scrollTo: ids to bring into view (the first one drawn here wins); applied once;
   *   ledger: NaN/Inf ledger status per op (debugtools.js: ledgerMarks)
   */
  mark(marks) {
    this.lastMarks = { ...marks, scrollTo: this.graph ? undefined : marks.scrollTo };
    for (const el of this.marked) el.classList.remove(...MARK_CLASSES);
    this.marked = [];
    if (!this.graph) return;
    const add = (el, cls) => {
      if (!el) return;
      el.classList.add(cls);
      this.marked.push(el);
    };
    const markId = (id, cls) => {
      if (this.clusterEls.has(id)) add(this.clusterEls.get(id), cls);
      for (const node of nodesFor(this.graph, this.ti, id)) add(this.nodeEls.get(node), cls);
    };
    const { highlights } = marks;
    for (const op of highlights.ops) if (this.ti.ops.has(op)) markId(op, "tv-highlight");
    for (const path of highlights.modules) markId(moduleId(path), "tv-highlight");
    for (const { el, edge } of this.edgeEls) {
      if (edge.tensors.some((t) => highlights.tensors.has(t))) add(el, "tv-highlight");
      if (marks.selected && edge.tensors.includes(marks.selected)) add(el, "tv-selected");
    }
    for (const [op, status] of marks.ledger || []) if (this.ti.ops.has(op)) markId(op, `tv-ledger-${status}`);
    for (const op of marks.current) if (this.ti.ops.has(op)) markId(op, "tv-current-step");
    if (marks.selected) markId(marks.selected, "tv-selected");
    if (marks.scrollTo) this.scrollTo(marks.scrollTo);
  }

  /**
   * Scroll the pane (only the pane) to the first of `ids` that is drawn here.
   * @param {string | string[]} ids
   */
  scrollTo(ids) {
    if (!this.graph) return;
    for (const id of Array.isArray(ids) ? ids : [ids]) {
      // an open module or op: its label (the top of its box), not its first node
      const cluster = this.clusterEls.get(id);
      const node = cluster ? undefined : nodesFor(this.graph, this.ti, id)[0];
      const el = cluster ? cluster.querySelector(":scope > text") || cluster : node !== undefined ? this.nodeEls.get(node) : undefined;
      if (el) {
        scrollWithin(this.canvas, el);
        return true;
      }
    }
    return false;
  }

  setGradFlow(on) {
    this.gradFlowOn = on;
    if (this.gradFlowBox) this.gradFlowBox.checked = on;
    this.applyGradFlow();
  }

  applyGradFlow() {
    this.overlay.apply(this.gradFlowOn && this.graph ? this : null, this.options.gradFlow || {});
  }
}

const nextTask = () => new Promise((resolve) => setTimeout(resolve, 0));
