// Per-trace index: ops by id, the subsymbol tree, the module tree, tensor producers and
// which op owns each printed line. Built once per document; everything else reads it.

import { pushAll } from "./arrays.js";

/**
 * @typedef {object} ModuleNode
 * @property {string} path        dotted module path, "" for the root module
 * @property {string | null} parent
 * @property {string[]} children  child module paths, in order of first use
 * @property {string[]} ops       top-level op ids whose module is exactly this one
 * @property {number} first       position of the first top-level op in the subtree
 * @property {number} total       number of top-level ops in the subtree
 */

/** "a.b.c" -> ["a", "a.b", "a.b.c"]; "" -> []. */
export function modulePrefixes(path) {
  if (!path) return [];
  const parts = path.split(".");
  return parts.map((_, i) => parts.slice(0, i + 1).join("."));
}

/** The parent module path: "a.b.c" -> "a.b", "a" -> "". */
export function parentModule(path) {
  const dot = path.lastIndexOf(".");
  return dot === -1 ? "" : path.slice(0, dot);
}

/** True when `path` is `ancestor` or lies inside it ("" contains everything). */
export function moduleWithin(path, ancestor) {
  return ancestor === "" || path === ancestor || path.startsWith(ancestor + ".");
}

/**
 * @param {any} trace a TraceView
 * @param {string} kind the trace key in document.traces
 * @param {(op: any) => string} moduleOf effective module path of an op
 */
export function buildTraceIndex(trace, kind, moduleOf = (op) => op.module_path || "") {
  const ops = new Map();
  const children = new Map();
  const depth = new Map();
  const position = new Map();
  const topOps = [];

  for (const op of trace.ops) {
    ops.set(op.id, op);
    position.set(op.id, position.size);
    const parent = op.parent && ops.has(op.parent) ? op.parent : null;
    if (parent === null) {
      topOps.push(op.id);
      depth.set(op.id, 0);
    } else {
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(op.id);
      depth.set(op.id, depth.get(parent) + 1);
    }
  }

  // A tensor produced by an op is also "produced" by its subsymbol that computes it;
  // keep the deepest producer so edges can attach to whichever of them is visible.
  const producers = new Map();
  for (const op of trace.ops) {
    for (const name of asList(op.outputs)) {
      const known = producers.get(name);
      if (known === undefined || depth.get(op.id) > depth.get(known)) producers.set(name, op.id);
    }
  }

  const modules = new Map();
  const ensureModule = (path) => {
    let node = modules.get(path);
    if (node) return node;
    node = { path, parent: path === "" ? null : parentModule(path), children: [], ops: [], first: Infinity, total: 0 };
    modules.set(path, node);
    if (node.parent !== null) ensureModule(node.parent).children.push(path);
    return node;
  };
  ensureModule("");
  const moduleOfOp = new Map();
  for (const id of topOps) {
    const path = moduleOf(ops.get(id));
    moduleOfOp.set(id, path);
    ensureModule(path).ops.push(id);
    for (const p of ["", ...modulePrefixes(path)]) {
      const node = modules.get(p);
      node.total += 1;
      node.first = Math.min(node.first, position.get(id));
    }
  }
  for (const node of modules.values()) node.children.sort((a, b) => modules.get(a).first - modules.get(b).first);

  const python = typeof trace.python === "string" ? trace.python : "";
  const lines = python.split("\n");
  // lineOwner[n] = id of the deepest op whose range covers line n (1-based)
  const lineOwner = new Array(lines.length + 1).fill(null);
  const lineDepth = new Array(lines.length + 1).fill(-1);
  for (const op of trace.ops) {
    const [from, to] = lineRange(op);
    if (from === null) continue;
    const d = depth.get(op.id);
    for (let n = Math.max(1, from); n <= Math.min(lines.length, to); n++) {
      if (d > lineDepth[n]) {
        lineOwner[n] = op.id;
        lineDepth[n] = d;
      }
    }
  }

  const tensors = trace.tensors && typeof trace.tensors === "object" ? trace.tensors : {};

  return {
    kind,
    trace,
    ops,
    children,
    depth,
    position,
    topOps,
    producers,
    modules,
    moduleOfOp,
    tensors,
    lines,
    lineOwner,
    inputs: asList(trace.inputs),
    outputs: asList(trace.outputs),

    /** Top-level op id that contains `id` (itself when top level). */
    topOf(id) {
      let current = id;
      while (ops.has(current)) {
        const parent = ops.get(current).parent;
        if (!parent || !ops.has(parent)) return current;
        current = parent;
      }
      return null;
    },
    /** Effective module path of any op (subsymbols take their top-level op's module). */
    moduleOfAny(id) {
      const top = this.topOf(id);
      return top === null ? "" : moduleOfOp.get(top);
    },
    /** `id` and all its subsymbols at every level. */
    descendants(id) {
      const out = [];
      const stack = [id];
      while (stack.length) {
        const current = stack.pop();
        out.push(current);
        for (const child of children.get(current) || []) stack.push(child);
      }
      return out;
    },
    /** Top-level op ids in the module subtree at `path`. */
    moduleTopOps(path) {
      const out = [];
      const stack = [path];
      while (stack.length) {
        const node = modules.get(stack.pop());
        if (!node) continue;
        pushAll(out, node.ops);
        pushAll(stack, node.children);
      }
      return out;
    },
    /** "param" / "buffer" tensors are drawn as a count on their consumer, not as nodes. */
    isParam(name) {
      const kindOf = tensors[name] && tensors[name].kind;
      return kindOf === "param" || kindOf === "buffer";
    },
  };
}

/** [line, line_end] of an op, or [null, null] when it has none. */
export function lineRange(op) {
  if (!Number.isInteger(op.line)) return [null, null];
  const end = Number.isInteger(op.line_end) && op.line_end >= op.line ? op.line_end : op.line;
  return [op.line, end];
}

function asList(value) {
  return Array.isArray(value) ? value.filter((v) => typeof v === "string") : [];
}
