// The view document (docs/view-format.md): constants, validation, and the indexes the
// viewer needs across traces (op lookup by id, forward -> derived ops, saved tensors).
// Everything here is pure: no DOM, so it is unit-tested in node.

import { buildTraceIndex } from "./traceindex.js";
import { MAX_DEPTH, VIEW_SCHEMA } from "./viewschema.js";
import { drain } from "./stages.js";

export { MIME_TYPE, traceKindOfId } from "./protocol.js";
export const FORMAT_VERSION = 1;

/** Display order of the trace kinds we know; other keys follow in document order. */
export const TRACE_ORDER = ["forward", "augmented_forward", "backward"];

export const TRACE_TITLES = {
  forward: "Forward",
  augmented_forward: "Augmented forward",
  backward: "Backward",
};

/** @type {(v: unknown) => v is Record<string, any>} */
const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * Check that `doc` is a thunderviz view document this viewer can read: the format marker
 * and version first (with their own messages), then the whole schema, so every reader
 * after this can trust each field's type. Optional fields may be missing.
 * @param {unknown} doc
 * @returns {{ok: true, error: null} | {ok: false, error: string, path?: string}}
 */
export function validateDocument(doc) {
  return drain(validation(doc));
}

/**
 * validateDocument's check as a generator that yields now and then (run it with
 * runInSlices): a big document is checked over several tasks, none of which freezes the page.
 * @param {unknown} doc
 * @returns {Generator<undefined, {ok: true, error: null} | {ok: false, error: string, path?: string}>}
 */
export function* validation(doc) {
  const fail = (error) => ({ ok: false, error });
  if (!isObject(doc) || doc.format !== "thunderviz") {
    return fail('Not a thunderviz file: expected a JSON object with "format": "thunderviz".');
  }
  const version = doc.version;
  if (!Number.isInteger(version) || version < 1) {
    return fail(`Not a valid thunderviz file: "version" must be a positive integer, got ${safeRepr(version)}.`);
  }
  if (version > FORMAT_VERSION) {
    return fail(
      `This file was written by a newer thunderviz (format version ${version}); ` +
        `this viewer reads version ${FORMAT_VERSION}. Upgrade thunderviz.`,
    );
  }
  if (!isObject(doc.traces) || Object.keys(doc.traces).length === 0) {
    return fail('Not a valid thunderviz file: "traces" is missing or empty (at least one trace is required).');
  }
  // The schema (thunderviz/viz/view_format.schema.json, as viewschema.js), then its
  // extra rules, in the order Python's thunderviz/viz/schema.py checks them.
  const violation = yield* checkWhole(doc);
  if (violation) {
    return {
      ok: false,
      error: `Not a valid thunderviz file: ${violation.path || "the document"}: ${violation.message}.`,
      path: violation.path,
    };
  }
  return { ok: true, error: null };
}

// --- the schema checker: the twin of thunderviz/viz/schema.py, rule for rule -------------
// A document that passes is safe for every reader: each field the viewer reads has its type.

const hasOwn = (obj, key) => Object.prototype.hasOwnProperty.call(obj, key);

/** The JSON type name of a value ("integer" for 2, as Python says for 2 and 2.0). */
export function jsonType(value) {
  if (value === null) return "null";
  if (typeof value === "boolean") return "boolean";
  if (typeof value === "number") {
    if (!Number.isFinite(value)) return "non-finite number";
    return Number.isInteger(value) ? "integer" : "number";
  }
  if (typeof value === "string") return "string";
  if (Array.isArray(value)) return "array";
  if (typeof value === "object") return "object";
  return typeof value;
}

function resolve(schema) {
  if (!hasOwn(schema, "$ref")) return schema;
  const target = VIEW_SCHEMA.$defs[schema.$ref.replace("#/$defs/", "")];
  const rest = Object.fromEntries(Object.entries(schema).filter(([k]) => k !== "$ref"));
  return Object.keys(rest).length ? { ...target, ...rest } : target;
}

function expected(schema) {
  schema = resolve(schema);
  if (schema.not) return `anything but ${expected(schema.not)}`;
  if (hasOwn(schema, "const")) return JSON.stringify(schema.const);
  if (schema.enum) return schema.enum.map((v) => JSON.stringify(v)).join(", ");
  if (schema.anyOf) return schema.anyOf.map(expected).join(" or ");
  const kinds = schema.type ?? "anything";
  return Array.isArray(kinds) ? kinds.join(" or ") : kinds;
}

// Each schema node is compiled once. A path is built only for an error: checking passes
// [parentPath, key] pairs down instead of formatting "traces.forward.ops[3]" for every value,
// and a value's JSON type is computed once and handed to every test of it.
const nodes = new Map();
const node = (schema) => {
  let compiled = nodes.get(schema);
  if (!compiled) {
    compiled = new SchemaNode(schema);
    nodes.set(schema, compiled);
  }
  return compiled;
};

function pathText(path) {
  const keys = [];
  for (let p = path; p !== null; p = p[0]) keys.push(p[1]);
  let text = "";
  for (const key of keys.reverse()) text += typeof key === "number" ? `[${key}]` : text ? `.${key}` : String(key);
  return text;
}

class Violation {
  constructor(path, message) {
    this.path = pathText(path);
    this.message = message;
  }
}

class SchemaNode {
  constructor(raw) {
    const schema = (this.schema = resolve(raw));
    const kinds = typeof schema.type === "string" ? [schema.type] : schema.type;
    this.types = kinds ? new Set(kinds.includes("number") ? [...kinds, "integer"] : kinds) : null;
    this.hasConst = hasOwn(schema, "const");
    this.alternatives = schema.anyOf ? schema.anyOf.map(node) : null;
    this.negated = schema.not ? node(schema.not) : null;
    this.regex = schema.pattern !== undefined ? new RegExp(schema.pattern, "u") : null;
    this.items = schema.items ? node(schema.items) : null;
    this.names = schema.propertyNames ? node(schema.propertyNames) : null;
    this.props = Object.entries(schema.properties ?? {}).map(([k, v]) => [k, node(v)]);
    this.propKeys = new Set(Object.keys(schema.properties ?? {}));
    const extra = schema.additionalProperties;
    this.extra = extra !== null && typeof extra === "object" ? node(extra) : null;
    this.fast = this.fastAccept();
  }

  /** A quick test that passes most valid scalars; false means "check fully" (which also
   * finds the error). The twin of _Node._fast_accept in Python. */
  fastAccept() {
    const s = this.schema;
    if (this.alternatives) {
      const fast = this.alternatives.map((a) => a.fast);
      return fast.every(Boolean) ? (v) => fast.some((f) => f(v)) : null;
    }
    if (s.enum && !this.negated && s.enum.every((v) => typeof v === "string")) {
      const values = new Set(s.enum);
      return (v) => typeof v === "string" && values.has(v);
    }
    if (this.negated || this.hasConst || s.enum || s.minLength || this.regex || !this.types) return null;
    const low = s.minimum ?? -Number.MAX_VALUE;
    const high = s.maximum ?? Number.MAX_VALUE;
    const tests = [];
    for (const kind of this.types) {
      if (kind === "string") tests.push((v) => typeof v === "string");
      else if (kind === "boolean") tests.push((v) => typeof v === "boolean");
      else if (kind === "null") tests.push((v) => v === null);
      else if (kind === "integer") tests.push((v) => Number.isInteger(v) && v >= low && v <= high);
      else if (kind === "number") tests.push((v) => Number.isFinite(v) && v >= low && v <= high);
      else return null;
    }
    return tests.length === 1 ? tests[0] : (v) => tests.some((t) => t(v));
  }

  accepts(value, kind) {
    if (this.negated && this.negated.accepts(value, kind)) return false;
    if (this.hasConst) return same(value, this.schema.const);
    if (this.schema.enum) return this.schema.enum.some((v) => same(value, v));
    if (this.alternatives) return this.alternatives.some((a) => a.accepts(value, kind));
    return this.types === null || this.types.has(kind);
  }

  /**
   * What `value` breaks of this node's own rules (type, sizes, required keys, key names,
   * pattern, bounds), as a Violation; else the node whose `items` / `props` / `extra` hold
   * for its children (the first alternative whose type fits decides: its error is the
   * precise one). The children are checked by `walk`.
   * @returns {Violation | SchemaNode}
   */
  enter(value, kind, path) {
    const s = this.schema;
    if (!this.accepts(value, kind)) {
      let got = kind;
      if (kind === "non-finite number") got = `${value}, which is not strict JSON (write "nan", "inf" or "-inf")`;
      return new Violation(path, `expected ${expected(s)}, got ${got}`);
    }
    if (this.alternatives) return this.alternatives.find((a) => a.accepts(value, kind)).enter(value, kind, path);
    if (kind === "object") {
      for (const key of s.required ?? []) {
        if (!hasOwn(value, key)) return new Violation(path, `missing key ${JSON.stringify(key)}`);
      }
      const keys = Object.keys(value);
      if (keys.length < (s.minProperties ?? 0)) return new Violation(path, `must have at least ${s.minProperties} entries`);
      if (this.names) {
        for (const key of keys) {
          if (!this.names.accepts(key, "string")) {
            return new Violation(path, `key ${JSON.stringify(key)}: expected ${expected(this.names.schema)}`);
          }
        }
      }
    } else if (kind === "array") {
      if (value.length < (s.minItems ?? 0)) return new Violation(path, `must have at least ${s.minItems} items`);
      if (s.maxItems !== undefined && value.length > s.maxItems) return new Violation(path, `must have at most ${s.maxItems} items`);
    } else if (kind === "string") {
      if (value.length < (s.minLength ?? 0)) return new Violation(path, `must have at least ${s.minLength} characters`);
      if (this.regex && !this.regex.test(value)) return new Violation(path, `does not match ${s.pattern}`);
    } else if (kind === "integer" || kind === "number") {
      if (s.minimum !== undefined && value < s.minimum) return new Violation(path, `must be at least ${s.minimum}, got ${value}`);
      if (s.maximum !== undefined && value > s.maximum) return new Violation(path, `must be at most ${s.maximum}, got ${value}`);
    }
    return this;
  }
}

/** How many containers the walk enters between two chances to pause. */
const WALK_STRIDE = 512;

/**
 * The first place `value` breaks `root`, as a Violation, or null: depth first, children in
 * order (an array's items; an object's known properties in schema order, then its other keys
 * in key order), as the recursive checker of thunderviz/viz/schema.py reports it. Iterative,
 * with an explicit stack, so it can pause: it yields every WALK_STRIDE containers and a big
 * document is checked over several tasks (runInSlices) without a page-freezing one.
 */
function* walk(root, value) {
  const first = root.enter(value, jsonType(value), null);
  if (first instanceof Violation) return first;
  // a frame: [node, value, path, position, keys]; position runs over an array's items, or
  // over the node's props and then (keys !== null) over the object's own keys
  const stack = [];
  const push = (node, item, kind, path) => {
    if (kind === "array" ? node.items : node.props.length || node.extra) {
      stack.push([node, item, path, 0, kind === "object" && node.extra ? Object.keys(item) : null]);
    }
  };
  push(first, value, jsonType(value), null);
  let entered = 0;
  while (stack.length) {
    const frame = stack[stack.length - 1];
    const [node, container, path] = frame;
    let sub;
    let key;
    if (Array.isArray(container)) {
      if (frame[3] >= container.length) {
        stack.pop();
        continue;
      }
      sub = node.items;
      key = frame[3]++;
    } else if (frame[3] < node.props.length) {
      [key, sub] = node.props[frame[3]++];
      if (!hasOwn(container, key)) continue;
    } else {
      const keys = frame[4];
      const at = frame[3]++ - node.props.length;
      if (keys === null || at >= keys.length) {
        stack.pop();
        continue;
      }
      key = keys[at];
      if (node.propKeys.has(key)) continue;
      sub = node.extra;
    }
    const item = container[key];
    if (sub.fast && sub.fast(item)) continue;
    const kind = jsonType(item);
    const childPath = [path, key];
    const found = sub.enter(item, kind, childPath);
    if (found instanceof Violation) return found;
    if (kind === "object" || kind === "array") {
      push(found, item, kind, childPath);
      if (++entered % WALK_STRIDE === 0) yield;
    }
  }
  return null;
}

const same = (a, b) => jsonType(a) === jsonType(b) && a === b;

/** Every rule, in the order Python's thunderviz/viz/schema.py checks them: the first broken. */
function* checkWhole(doc) {
  return (
    (yield* checkDepth(doc)) ||
    (yield* walk(node(VIEW_SCHEMA), doc)) ||
    checkUniqueIds(doc) ||
    checkParents(doc) ||
    (yield* checkCompared(doc))
  );
}

/** Iteratively: a deeply nested document must not exhaust the stack of its checker. */
function* checkDepth(doc) {
  if (doc === null || typeof doc !== "object") return null;
  const values = [doc];
  const depths = [1]; // a parallel stack: no pair allocated per value of a large document
  for (let seen = 1; values.length; seen++) {
    if (seen % (8 * WALK_STRIDE) === 0) yield;
    const value = values.pop();
    const depth = depths.pop();
    if (depth > MAX_DEPTH) return { path: "", message: `nested deeper than ${MAX_DEPTH} levels` };
    const children = Array.isArray(value) ? value : Object.values(value);
    for (const child of children) {
      if (child !== null && typeof child === "object") {
        values.push(child);
        depths.push(depth + 1);
      }
    }
  }
  return null;
}

/** Op ids are unique across all traces (an id names one op of the whole document). */
function checkUniqueIds(doc) {
  const seen = new Set();
  for (const [kind, trace] of Object.entries(doc.traces)) {
    for (const [i, op] of trace.ops.entries()) {
      if (seen.has(op.id)) {
        return { path: `traces.${kind}.ops[${i}].id`, message: `op id ${JSON.stringify(op.id)} appears twice` };
      }
      seen.add(op.id);
    }
  }
  return null;
}

/**
 * A comparison's other sides (sidebyside.js) are view documents themselves, checked as one
 * with their errors placed under `comparison.documents[i]`; none compares again.
 */
function* checkCompared(doc) {
  const sides = doc.comparison ? doc.comparison.documents : [];
  for (const [i, side] of sides.entries()) {
    const where = `comparison.documents[${i}]`;
    if (hasOwn(side, "comparison")) return { path: where, message: "a compared document holds no comparison of its own" };
    const violation = yield* checkWhole(side);
    if (violation) return { path: violation.path ? `${where}.${violation.path}` : where, message: violation.message };
  }
  return null;
}

/** Parents come before their children: building the op tree never meets a cycle. */
function checkParents(doc) {
  const views = Object.entries(doc.traces).map(([kind, trace]) => [`traces.${kind}`, trace]);
  for (const [i, run] of (doc.transforms ?? []).entries()) {
    if (run.trace_before !== undefined && run.trace_before !== null) {
      views.push([`transforms[${i}].trace_before`, run.trace_before]);
    }
  }
  for (const [where, trace] of views) {
    const earlier = new Set();
    for (const [i, op] of trace.ops.entries()) {
      const parent = op.parent;
      if (parent !== undefined && parent !== null && !earlier.has(parent)) {
        return { path: `${where}.ops[${i}].parent`, message: `${JSON.stringify(parent)} is not an earlier op of this trace` };
      }
      earlier.add(op.id);
    }
  }
  return null;
}

function safeRepr(value) {
  try {
    const text = JSON.stringify(value);
    return text === undefined ? String(value) : text.slice(0, 40);
  } catch {
    return typeof value;
  }
}

/**
 * Parse `text` (a .tvz file's content) if a string was given; objects pass through.
 * @returns {{doc: any, error: string | null}}
 */
export function parseDocument(input) {
  if (typeof input !== "string") return { doc: input, error: null };
  try {
    return { doc: JSON.parse(input), error: null };
  } catch (err) {
    return { doc: null, error: `Not a thunderviz file: not valid JSON (${err.message}).` };
  }
}

/**
 * JSON has no NaN/Infinity, so the document writes them as strings. Decode one value.
 * @param {unknown} value
 * @returns {number}
 */
export function toNumber(value) {
  if (typeof value === "number") return value;
  if (value === "nan" || value === "NaN") return NaN;
  if (value === "inf" || value === "+inf" || value === "Infinity") return Infinity;
  if (value === "-inf" || value === "-Infinity") return -Infinity;
  return NaN;
}

/** A list field of the document, or [] when missing. */
const list = (value) => (Array.isArray(value) ? value : []);

/**
 * Build every index the viewer uses. Call only on a document that validated.
 * @param {any} doc
 */
export function indexDocument(doc) {
  return drain(indexing(doc));
}

/** indexDocument as a generator that yields after each trace's index (see runInSlices). */
export function* indexing(doc) {
  const kinds = Object.keys(doc.traces).sort((a, b) => orderOf(a) - orderOf(b));

  /** op id -> {op, kind}, over all traces */
  const opById = new Map();
  for (const kind of kinds) {
    for (const op of doc.traces[kind].ops) opById.set(op.id, { op, kind });
  }

  // Derived (backward / augmented forward) ops may leave module_path empty; their forward
  // op knows it, and grouping them by the same module keeps the two graphs comparable.
  const moduleOf = (op) => {
    if (op.module_path) return op.module_path;
    const forward = op.fwd_op ? opById.get(op.fwd_op) : undefined;
    return forward && forward.op.module_path ? forward.op.module_path : "";
  };

  const traces = new Map();
  for (const kind of kinds) {
    yield;
    traces.set(kind, buildTraceIndex(doc.traces[kind], kind, moduleOf));
  }
  yield;

  /** forward op id -> ids of ops in other traces whose fwd_op is it */
  const derivedByForward = new Map();
  for (const { op } of opById.values()) {
    if (!op.fwd_op) continue;
    if (!derivedByForward.has(op.fwd_op)) derivedByForward.set(op.fwd_op, []);
    derivedByForward.get(op.fwd_op).push(op.id);
  }

  const saved = list(doc.saved).filter(isObject);
  const savedByName = new Map(saved.map((s) => [s.name, s]));

  return {
    doc,
    kinds,
    traces,
    opById,
    moduleOf,
    derivedByForward,
    saved,
    savedByName,
    steps: list(doc.steps).filter(isObject),
    gradFlow: isObject(doc.grad_flow) ? doc.grad_flow : {},
    transforms: list(doc.transforms).filter(isObject),
  };
}

function orderOf(kind) {
  const i = TRACE_ORDER.indexOf(kind);
  return i === -1 ? TRACE_ORDER.length : i;
}

/**
 * Look a tensor up by name, preferring the trace `preferKind`. Tensor names are shared by
 * the traces derived from one another, so the first trace that knows the name is good.
 * @returns {{kind: string, tensor: any} | null}
 */
export function findTensor(index, name, preferKind) {
  const order = preferKind ? [preferKind, ...index.kinds.filter((k) => k !== preferKind)] : index.kinds;
  for (const kind of order) {
    const ti = index.traces.get(kind);
    if (ti && Object.prototype.hasOwnProperty.call(ti.tensors, name)) {
      return { kind, tensor: ti.tensors[name] };
    }
  }
  return null;
}

