// The details panel: everything known about the selected op, module or tensor.

import { describeOp } from "./opnames.js";
import { h, replace } from "./dom.js";
import { findTensor, TRACE_TITLES } from "./document.js";
import { lineRange } from "./traceindex.js";
import { isModuleId, modulePathOf, moduleId } from "./visible.js";
import { formatBytes, formatNumber, shapeText } from "./format.js";
import { statsBlock } from "./statsview.js";
import { OPEN_SOURCE_EVENT, OPENS_SOURCE_ATTRIBUTE } from "./opensource.js";

/**
 * @typedef {object} DetailsContext
 * @property {ReturnType<import("./document.js").indexDocument>} index
 * @property {(id: string) => void} select
 * @property {(id: string) => void} toggle
 * @property {(id: string) => boolean} isExpanded
 * @property {((id: string) => void) | null} breakOn  null when there are no steps
 */

export class DetailsPanel {
  /** @param {DetailsContext} ctx */
  constructor(ctx) {
    this.ctx = ctx;
    this.el = h("div", { class: "tv-details" });
  }

  /** @param {{selected: string, step: any, preferKind: string | null}} state */
  render(state) {
    const { selected } = state;
    if (!selected) {
      replace(this.el, h("div", { class: "tv-muted" }, "Click a node, a trace line or a table row to see its details."));
      return;
    }
    const { index } = this.ctx;
    let body;
    if (isModuleId(selected)) body = this.module(modulePathOf(selected));
    else if (index.opById.has(selected)) body = this.op(selected, state);
    else body = this.tensor(selected, state);
    replace(this.el, body);
  }

  link(id, text = describeOp(this.ctx.index, id)) {
    return h("button", { class: "tv-link", title: `select ${id}`, on: { click: () => this.ctx.select(id) } }, text);
  }

  links(ids) {
    if (!ids || !ids.length) return h("span", { class: "tv-muted" }, "—");
    return h("span", {}, ids.flatMap((id, i) => (i ? [", ", this.link(id)] : [this.link(id)])));
  }

  op(id, state) {
    const { index } = this.ctx;
    const { op, kind } = index.opById.get(id);
    const ti = index.traces.get(kind);
    const hasChildren = (ti.children.get(id) || []).length > 0;
    const module = ti.moduleOfAny(id);
    const out = [
      h("h3", {}, String(op.label || op.name || id)),
      h("div", {}, h("span", { class: "tv-badge" }, TRACE_TITLES[kind] || kind), h("code", { class: "tv-muted" }, id)),
      h(
        "div",
        { class: "tv-kv" },
        h("span", {}, "symbol"), h("code", {}, String(op.name ?? "")),
        h("span", {}, "module"), module ? this.link(moduleId(module), module) : h("span", { class: "tv-muted" }, "(root)"),
        h("span", {}, "level"), h("span", {}, `${ti.depth.get(id)}${op.is_prim ? " · prim" : ""}`),
        op.parent ? [h("span", {}, "parent"), this.link(op.parent)] : null,
        op.fwd_op ? [h("span", {}, "forward op"), this.link(op.fwd_op)] : null,
      ),
    ];
    if (Array.isArray(op.tags) && op.tags.length) {
      out.push(h("div", {}, op.tags.map((t) => h("span", { class: "tv-badge" }, String(t)))));
    }
    const actions = [];
    if (hasChildren) {
      const open = this.ctx.isExpanded(id);
      actions.push(h("button", { data: { action: "toggle-expand" }, on: { click: () => this.ctx.toggle(id) } }, open ? "▾ Collapse" : `▸ Expand (${ti.children.get(id).length} subsymbols)`));
    }
    if (this.ctx.breakOn) actions.push(h("button", { data: { action: "break-on-op" }, on: { click: () => this.ctx.breakOn(id) } }, "Break here"));
    if (actions.length) out.push(h("div", { class: "tv-step-buttons" }, actions));

    const [from, to] = lineRange(op);
    if (from !== null) {
      out.push(h("h4", {}, `python (lines ${from}–${to})`));
      const rows = [];
      for (let n = from; n <= Math.min(to, from + 40); n++) {
        rows.push(h("div", {}, h("span", { class: "tv-lineno tv-muted" }, String(n)), ti.lines[n - 1] ?? ""));
      }
      out.push(h("div", { class: "tv-code-block" }, rows));
    }
    if (op.args_repr) out.push(h("h4", {}, "arguments"), h("pre", {}, String(op.args_repr)));
    out.push(h("h4", {}, "inputs"), this.tensorTable(op.inputs, ti));
    out.push(h("h4", {}, "outputs"), this.tensorTable(op.outputs, ti));
    if (op.source && typeof op.source === "object") out.push(...this.source(op.source));

    if (kind === "forward") {
      const derived = index.derivedByForward.get(id) || [];
      if (derived.length) out.push(h("h4", {}, "derived ops (backward / augmented forward)"), this.links(derived));
      const saved = index.saved.filter((s) => s.fwd_op === id);
      if (saved.length) out.push(h("h4", {}, "saved for backward"), this.links(saved.map((s) => s.name)));
    }
    for (const name of Array.isArray(op.outputs) ? op.outputs : []) {
      const tensor = ti.tensors[name];
      const stepStats = state.step && state.step.outputs && state.step.outputs[name];
      if (tensor && tensor.stats) out.push(h("h4", {}, `stats: ${name}`), statsBlock(tensor.stats));
      if (stepStats) out.push(h("h4", {}, `stats at step ${state.step.index}: ${name}`), statsBlock(stepStats));
      const flow = index.gradFlow[name];
      if (flow) out.push(h("h4", {}, `grad flow: ${name}`), this.gradFlow(flow));
    }
    return out;
  }

  tensorTable(names, ti) {
    const list = Array.isArray(names) ? names.filter((n) => typeof n === "string") : [];
    if (!list.length) return h("div", { class: "tv-muted" }, "none");
    return h(
      "table",
      { class: "tv-table" },
      h("tbody", {}, list.map((name) => {
        const t = ti.tensors[name];
        return h("tr", {}, h("td", {}, this.link(name)), h("td", {}, t ? shapeText(t) : ""), h("td", { class: "tv-muted" }, t ? String(t.kind ?? "") : ""));
      })),
    );
  }

  source(source) {
    // The path as a link. Where the page has someone to open files (the JupyterLab
    // extension listens for OPEN_SOURCE_EVENT and cancels it) it opens the file at the line;
    // elsewhere it copies "file:line" (paste it into an editor's "go to file").
    const where = `${source.file ?? "?"}:${source.line ?? "?"}`;
    const doc = this.el.ownerDocument;
    const opens = Boolean(doc.body && doc.body.hasAttribute(OPENS_SOURCE_ATTRIBUTE));
    const link = h("button", { class: "tv-link", title: opens ? `Open ${where} (copied instead when the file is outside the server's folder)` : "Copy file:line", data: { action: "source-link" } }, where);
    link.addEventListener("click", async () => {
      const request = new CustomEvent(OPEN_SOURCE_EVENT, { bubbles: true, cancelable: true, detail: { file: source.file, line: source.line } });
      if (typeof source.file === "string" && !link.dispatchEvent(request)) {
        link.setAttribute("data-tv-opened", "true");
        return;
      }
      try {
        await navigator.clipboard.writeText(where);
        link.setAttribute("data-tv-copied", "true");
        link.title = "Copied";
      } catch {
        link.title = "Copying is not allowed here; select the text instead";
      }
    });
    const out = [h("h4", {}, "source"), h("div", { class: "tv-source-path" }, link)];
    const context = Array.isArray(source.context) && source.context.length ? source.context : [[source.line, source.code ?? ""]];
    out.push(
      h("div", { class: "tv-code-block", data: { source: "" } }, context.map((entry) => {
        const [n, text] = Array.isArray(entry) ? entry : [null, String(entry)];
        return h("div", { class: n === source.line ? "tv-current-line" : "" }, h("span", { class: "tv-lineno tv-muted" }, n === null ? "" : String(n)), String(text ?? ""));
      })),
    );
    return out;
  }

  gradFlow(flow) {
    const bad = flow.status && flow.status !== "ok";
    return h("div", {}, h("span", { class: bad ? "tv-badge tv-bad" : "tv-badge" }, String(flow.status ?? "ok")), ` norm ${formatNumber(flow.norm)}`);
  }

  module(path) {
    const { index } = this.ctx;
    const id = moduleId(path);
    const out = [h("h3", {}, path || "(root module)"), h("div", {}, h("span", { class: "tv-badge" }, "module"))];
    const counts = [];
    for (const [kind, ti] of index.traces) {
      const node = ti.modules.get(path);
      if (node) counts.push(h("span", {}, TRACE_TITLES[kind] || kind), h("span", {}, `${node.total} ops`));
    }
    out.push(h("div", { class: "tv-kv" }, counts));
    const actions = [h("button", { data: { action: "toggle-expand" }, on: { click: () => this.ctx.toggle(id) } }, this.ctx.isExpanded(path) ? "▾ Collapse" : "▸ Expand")];
    if (this.ctx.breakOn) actions.push(h("button", { data: { action: "break-on-module" }, on: { click: () => this.ctx.breakOn(id) } }, "Break in module"));
    out.push(h("div", { class: "tv-step-buttons" }, actions));
    const within = (p) => typeof p === "string" && (path === "" || p === path || p.startsWith(path + "."));
    const saved = index.saved.filter((s) => within(s.module_path));
    if (saved.length) {
      const bytes = saved.reduce((sum, s) => sum + (Number(s.bytes) || 0), 0);
      out.push(h("h4", {}, `saved for backward: ${saved.length} tensors, ${formatBytes(bytes)}`), this.links(saved.map((s) => s.name)));
    }
    const forward = index.traces.get("forward");
    if (forward && forward.modules.has(path)) {
      out.push(h("h4", {}, "forward ops"), this.links(forward.moduleTopOps(path).slice(0, 60)));
    }
    return out;
  }

  tensor(name, state) {
    const { index } = this.ctx;
    const found = findTensor(index, name, state.preferKind);
    const saved = index.savedByName.get(name);
    const stepStats = state.step && ((state.step.outputs && state.step.outputs[name]) || (state.step.grads && state.step.grads[name]));
    const flow = index.gradFlow[name];
    if (!found && !saved && !stepStats && !flow) {
      return [h("h3", {}, name), h("div", { class: "tv-muted" }, "This id is not in the document.")];
    }
    const out = [h("h3", {}, name), h("div", {}, h("span", { class: "tv-badge" }, "tensor"))];
    if (found) {
      const t = found.tensor;
      out.push(
        h(
          "div",
          { class: "tv-kv" },
          h("span", {}, "shape"), h("code", {}, shapeText(t)),
          h("span", {}, "device"), h("span", {}, String(t.device ?? "")),
          h("span", {}, "kind"), h("span", {}, String(t.kind ?? "")),
          h("span", {}, "requires grad"), h("span", {}, String(Boolean(t.requires_grad))),
          h("span", {}, "producer"), t.producer ? this.link(t.producer) : h("span", { class: "tv-muted" }, "(input)"),
          h("span", {}, "consumers"), this.links(Array.isArray(t.consumers) ? t.consumers : []),
        ),
      );
      const others = index.kinds.filter((k) => k !== found.kind && Object.prototype.hasOwnProperty.call(index.traces.get(k).tensors, name));
      if (others.length) out.push(h("div", { class: "tv-muted" }, `also in: ${others.map((k) => TRACE_TITLES[k] || k).join(", ")}`));
      if (t.stats) out.push(h("h4", {}, "stats"), statsBlock(t.stats));
    }
    if (stepStats) out.push(h("h4", {}, `at step ${state.step.index}`), statsBlock(stepStats));
    if (flow) out.push(h("h4", {}, "grad flow"), this.gradFlow(flow));
    if (saved) {
      out.push(
        h("h4", {}, saved.recomputed ? "recomputed in backward" : "saved for backward"),
        h(
          "div",
          { class: "tv-kv" },
          h("span", {}, "bytes"), h("span", {}, formatBytes(saved.bytes)),
          h("span", {}, "forward op"), saved.fwd_op ? this.link(saved.fwd_op) : h("span", {}, "—"),
          h("span", {}, "producer"), saved.producer ? this.link(saved.producer) : h("span", { class: "tv-muted" }, "(input)"),
          h("span", {}, "consumers"), this.links(Array.isArray(saved.consumers) ? saved.consumers : []),
          h("span", {}, "module"), h("span", {}, String(saved.module_path || "(root)")),
        ),
      );
    }
    return out;
  }
}
