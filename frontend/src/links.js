// Linked highlighting: from what is selected to what the other views should highlight.
// Forward and derived traces are linked through `fwd_op` (each backward / augmented op names
// the forward op whose grad rule produced it) and saved tensors through their `fwd_op`,
// `producer` and `consumers`.

import { isModuleId, modulePathOf } from "./visible.js";
import { moduleWithin } from "./traceindex.js";

/**
 * @typedef {{ops: Set<string>, modules: Set<string>, tensors: Set<string>, saved: Set<string>}} Highlights
 */

export const emptyHighlights = () => ({ ops: new Set(), modules: new Set(), tensors: new Set(), saved: new Set() });

/** `id` plus its enclosing ops: a rule attached to a parent covers its subsymbols. */
function ancestors(ti, id) {
  const out = [];
  let current = ti.ops.get(id);
  while (current && current.parent && ti.ops.has(current.parent)) {
    out.push(current.parent);
    current = ti.ops.get(current.parent);
  }
  return out;
}

/** Forward op ids linked to forward op `id`: itself, its subsymbols and its enclosing ops. */
function forwardFamily(index, id) {
  const found = index.opById.get(id);
  if (!found) return [id];
  const ti = index.traces.get(found.kind);
  return [...ti.descendants(id), ...ancestors(ti, id)];
}

/**
 * @param {ReturnType<import("./document.js").indexDocument>} index
 * @param {string} selected op id, "module:<path>" or tensor name
 * @returns {Highlights}
 */
export function linkedHighlights(index, selected) {
  const out = emptyHighlights();
  if (!selected) return out;

  const linkAnchors = (anchors, skipKind) => {
    for (const anchor of anchors) {
      for (const derived of index.derivedByForward.get(anchor) || []) {
        if (index.opById.get(derived).kind !== skipKind) out.ops.add(derived);
      }
    }
    for (const saved of index.saved) if (anchors.has(saved.fwd_op)) out.saved.add(saved.name);
  };

  if (isModuleId(selected)) {
    const path = modulePathOf(selected);
    out.modules.add(path);
    const anchors = new Set();
    for (const ti of index.traces.values()) {
      for (const top of ti.moduleTopOps(path)) {
        out.ops.add(top);
        if (ti.kind === "forward") for (const op of ti.descendants(top)) anchors.add(op);
      }
    }
    linkAnchors(anchors, null);
    for (const saved of index.saved) {
      if (typeof saved.module_path === "string" && moduleWithin(saved.module_path, path)) out.saved.add(saved.name);
    }
    return out;
  }

  const found = index.opById.get(selected);
  if (found) {
    const { op, kind } = found;
    let anchors;
    if (kind === "forward") {
      anchors = new Set(forwardFamily(index, selected));
    } else if (op.fwd_op) {
      anchors = new Set(forwardFamily(index, op.fwd_op));
      out.ops.add(op.fwd_op);
    } else {
      anchors = new Set();
    }
    linkAnchors(anchors, kind);
    for (const saved of index.saved) {
      if (saved.producer === selected || (Array.isArray(saved.consumers) && saved.consumers.includes(selected))) {
        out.saved.add(saved.name);
      }
    }
    return out;
  }

  // a tensor name: its producers and consumers wherever it appears
  out.tensors.add(selected);
  for (const ti of index.traces.values()) {
    const producer = ti.producers.get(selected);
    if (producer !== undefined) out.ops.add(producer);
    for (const op of ti.trace.ops) {
      if (Array.isArray(op.inputs) && op.inputs.includes(selected)) out.ops.add(op.id);
    }
  }
  const saved = index.savedByName.get(selected);
  if (saved) {
    out.saved.add(saved.name);
    if (saved.producer) out.ops.add(saved.producer);
    if (saved.fwd_op) out.ops.add(saved.fwd_op);
    for (const consumer of Array.isArray(saved.consumers) ? saved.consumers : []) out.ops.add(consumer);
  }
  return out;
}

/** Merge Python's `highlight` list (ids of any kind) into highlights. */
export function addExplicitHighlights(highlights, index, ids) {
  for (const id of Array.isArray(ids) ? ids : []) {
    if (typeof id !== "string") continue;
    if (isModuleId(id)) highlights.modules.add(modulePathOf(id));
    else if (index.opById.has(id)) highlights.ops.add(id);
    else highlights.tensors.add(id);
  }
  return highlights;
}
