// Search over a document: op names, tensor names (t299), module paths (blocks.7.attn),
// source lines (models.py:97) and op ids. Pure: builds a flat list once, matches by
// exact / prefix / substring, case-insensitive.

import { describeOp, sourceLine } from "./opnames.js";
import { tensorLabel } from "./dot.js";
import { isModuleId, moduleId, modulePathOf } from "./protocol.js";

/** Result kinds, in the order they are listed when they match equally well. */
const KIND_ORDER = { tensor: 0, module: 1, line: 2, op: 3 };

/**
 * @typedef {{id: string, kind: "tensor"|"module"|"line"|"op", title: string, detail: string,
 *            keys: string[]}} SearchEntry  id: what choosing it selects
 * @returns {SearchEntry[]}
 */
export function buildSearchIndex(index) {
  /** @type {SearchEntry[]} */
  const entries = [];
  const seenTensors = new Set();
  const seenModules = new Set();
  const seenLines = new Set();
  for (const [kind, ti] of index.traces) {
    for (const path of ti.modules.keys()) {
      if (!path || seenModules.has(path)) continue;
      seenModules.add(path);
      entries.push({ id: moduleId(path), kind: "module", title: path, detail: "module", keys: [path] });
    }
    for (const [name, tensor] of Object.entries(ti.tensors)) {
      if (seenTensors.has(name) || !tensor || tensor.kind === "number" || tensor.shape == null) continue;
      seenTensors.add(name);
      entries.push({ id: name, kind: "tensor", title: name, detail: `${tensorLabel(tensor)} · ${tensor.kind} in ${kind}`, keys: [name] });
    }
    for (const op of ti.trace.ops) {
      const line = sourceLine(op);
      if (line && op.source && !seenLines.has(`${op.source.file}:${op.source.line}`)) {
        seenLines.add(`${op.source.file}:${op.source.line}`);
        const code = typeof op.source.code === "string" ? op.source.code.trim() : "";
        entries.push({ id: op.id, kind: "line", title: line, detail: code, keys: [line, `${op.source.file}:${op.source.line}`] });
      }
      entries.push({
        id: op.id,
        kind: "op",
        title: describeOp(index, op.id),
        detail: op.id,
        keys: [String(op.label || ""), String(op.name || ""), op.id].filter(Boolean),
      });
    }
  }
  return entries;
}

/**
 * The entries matching `query`, best first: an exact key, then a key starting with it,
 * then one containing it.
 * @param {SearchEntry[]} entries
 * @param {string} query
 * @param {number} [limit]
 * @returns {SearchEntry[]}
 */
export function search(entries, query, limit = 50) {
  const q = String(query).trim().toLowerCase();
  if (!q) return [];
  const scored = [];
  entries.forEach((entry, position) => {
    let best = Infinity;
    for (const key of entry.keys) {
      const k = key.toLowerCase();
      const score = k === q ? 0 : k.startsWith(q) ? 1 : k.includes(q) ? 2 : Infinity;
      if (score < best) best = score;
    }
    if (best < Infinity) scored.push({ entry, best, position });
  });
  scored.sort((a, b) => a.best - b.best || KIND_ORDER[a.entry.kind] - KIND_ORDER[b.entry.kind] || a.position - b.position);
  return scored.slice(0, limit).map((s) => s.entry);
}

/**
 * What to open so that `id` (an op, a tensor, a module) is drawn in every pane that has it:
 * the modules around it and, for a subsymbol, the ops it sits in. A tensor is revealed at
 * the ops that produce it.
 * @returns {string[]} module paths and op ids for the `expanded` trait
 */
export function expansionToReveal(index, id) {
  const open = new Set();
  const addModules = (path, includeSelf) => {
    const parts = path ? path.split(".") : [];
    const upto = includeSelf ? parts.length : parts.length - 1;
    for (let i = 1; i <= upto; i++) open.add(parts.slice(0, i).join("."));
  };
  const revealOp = (opId) => {
    const found = index.opById.get(opId);
    if (!found) return;
    const ti = index.traces.get(found.kind);
    addModules(ti.moduleOfAny(opId), true);
    for (let parent = found.op.parent; parent && ti.ops.has(parent); parent = ti.ops.get(parent).parent) open.add(parent);
  };
  if (isModuleId(id)) addModules(modulePathOf(id), false);
  else if (index.opById.has(id)) revealOp(id);
  else {
    // the op the document names as producer (the top-level call), not the deepest subsymbol
    for (const ti of index.traces.values()) {
      const tensor = ti.tensors[id];
      if (tensor && typeof tensor.producer === "string") revealOp(tensor.producer);
    }
  }
  return [...open];
}
