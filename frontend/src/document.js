// The view document (docs/view-format.md): constants, validation, and the indexes the
// viewer needs across traces (op lookup by id, forward -> derived ops, saved tensors).
// Everything here is pure: no DOM, so it is unit-tested in node.

import { buildTraceIndex } from "./traceindex.js";

export const MIME_TYPE = "application/vnd.thunderviz.view+json";
export const FORMAT_VERSION = 1;

/** Display order of the trace kinds we know; other keys follow in document order. */
export const TRACE_ORDER = ["forward", "augmented_forward", "backward"];

export const TRACE_TITLES = {
  forward: "Forward",
  augmented_forward: "Augmented forward",
  backward: "Backward",
};

const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * Check that `doc` is a thunderviz view document this viewer can read.
 * Only the structure the viewer relies on is checked; optional sections may be missing.
 * @param {unknown} doc
 * @returns {{ok: true, error: null} | {ok: false, error: string}}
 */
export function validateDocument(doc) {
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
  for (const [kind, trace] of Object.entries(doc.traces)) {
    if (!isObject(trace)) return fail(`Trace "${kind}" is not an object.`);
    if (!Array.isArray(trace.ops)) return fail(`Trace "${kind}" has no "ops" list.`);
    const seen = new Set();
    for (const [i, op] of trace.ops.entries()) {
      if (!isObject(op) || typeof op.id !== "string" || op.id === "") {
        return fail(`Trace "${kind}": op #${i} has no string "id".`);
      }
      if (seen.has(op.id)) return fail(`Trace "${kind}": op id "${op.id}" appears twice.`);
      seen.add(op.id);
    }
    if (trace.tensors !== undefined && !isObject(trace.tensors)) {
      return fail(`Trace "${kind}": "tensors" must be an object.`);
    }
  }
  for (const key of ["saved", "steps", "transforms"]) {
    if (doc[key] !== undefined && doc[key] !== null && !Array.isArray(doc[key])) {
      return fail(`"${key}" must be a list.`);
    }
  }
  if (doc.grad_flow !== undefined && doc.grad_flow !== null && !isObject(doc.grad_flow)) {
    return fail('"grad_flow" must be an object.');
  }
  return { ok: true, error: null };
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
  for (const kind of kinds) traces.set(kind, buildTraceIndex(doc.traces[kind], kind, moduleOf));

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

/** "forward:12.0" -> "forward" (the trace kind an op id belongs to). */
export function traceKindOfId(id) {
  const colon = id.indexOf(":");
  return colon > 0 ? id.slice(0, colon) : null;
}
