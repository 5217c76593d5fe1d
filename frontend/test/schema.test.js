// The viewer's checker against the shared fixture cases (frontend/test/fixtures/schema/,
// which pytest's tests/safety/test_schema.py runs through Python's checker too), big and
// deep documents, and a seeded fuzz: one field of a real document replaced by a random
// JSON value; the checker never throws, and what it accepts the viewer's indexes, links,
// steps and graph building read without a TypeError.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { validateDocument, indexDocument, parseDocument } from "../src/document.js";
import { VIEW_SCHEMA } from "../src/viewschema.js";
import { linkedHighlights } from "../src/links.js";
import { summarizeSaved } from "../src/saved.js";
import { stepStats, stepHasNanInf, stepMaxNorm } from "../src/stepper.js";
import { buildVisibleGraph, defaultExpanded, moduleId } from "../src/visible.js";
import { DetailsPanel } from "../src/details.js";
import { comparisonOf, sidesOf, MatchIndex, overlayCss } from "../src/sidebyside.js";
import { parseHTML } from "linkedom";
import { loadFixture } from "./helpers.js";

// The details panel builds DOM nodes: linkedom's document stands in for the browser's.
const { window } = parseHTML("<!doctype html><html><body></body></html>");
for (const name of ["document", "Node", "HTMLElement", "Element", "Event"]) {
  if (globalThis[name] === undefined) globalThis[name] = window[name];
}

const read = (rel) => JSON.parse(readFileSync(fileURLToPath(new URL(rel, import.meta.url)), "utf8"));
const CASES = read("./fixtures/schema/cases.json").cases;

/** Set `path` in `doc` as an own property (so a key such as "__proto__" is data, as JSON.parse makes it). */
function setPath(doc, path, value) {
  let target = doc;
  for (const key of path.slice(0, -1)) target = target[key];
  const last = path[path.length - 1];
  if (Array.isArray(target)) assert.ok(last < target.length, `fixture path ${path} not in the base document`);
  Object.defineProperty(target, last, { value, enumerable: true, writable: true, configurable: true });
  return doc;
}

function caseDocument(c) {
  if (c.text !== undefined) return parseDocument(c.text).doc;
  return setPath(loadFixture(), c.set[0], structuredClone(c.set[1]));
}

for (const c of CASES) {
  test(`shared schema case: ${c.name.slice(0, 70)}`, () => {
    const result = validateDocument(caseDocument(c));
    assert.equal(result.ok, c.valid, result.error ?? "accepted");
    if (!c.valid && c.error_path !== undefined) assert.equal(result.path, c.error_path);
  });
}

/** Everything the viewer computes from a document before drawing, and on selecting:
 * linked highlights and the details panel for every op, tensor and module. */
function readEverything(doc) {
  const index = indexDocument(doc);
  for (const [, ti] of index.traces) buildVisibleGraph(ti, defaultExpanded(ti));
  const details = new DetailsPanel({ index, select() {}, toggle() {}, isExpanded: () => false, breakOn: () => {} });
  const selectable = [...index.opById.keys()];
  for (const [, ti] of index.traces) {
    selectable.push(...Object.keys(ti.tensors ?? {}), ...[...ti.modules.keys()].map(moduleId));
  }
  for (const selected of selectable) {
    linkedHighlights(index, selected);
    for (const step of [null, index.steps[0] ?? null]) details.render({ selected, step, preferKind: null });
  }
  summarizeSaved(index.saved);
  for (const step of index.steps) {
    stepStats(step);
    stepHasNanInf(step);
    stepMaxNorm(step);
  }
  const comparison = comparisonOf(doc);
  if (comparison) {
    // the side-by-side view: its matches, the overlay, and every id's counterpart
    const sides = sidesOf(doc);
    const matches = new MatchIndex(comparison, sides);
    overlayCss(matches, comparison);
    for (const selected of selectable) sides.forEach((_, side) => matches.counterpart(0, selected, side));
    sides.forEach((side) => readEverything(side));
  }
}

test("the fixture's valid cases are read by the whole viewer pipeline", () => {
  for (const c of CASES.filter((x) => x.valid && x.set)) readEverything(caseDocument(c));
});

test("100,000-deep nesting is refused with a message, not a stack overflow", () => {
  const depth = 100_000;
  const text = `{"format":"thunderviz","version":1,"traces":{"f":{"ops":[]}},"x":${"[".repeat(depth)}${"]".repeat(depth)}}`;
  const result = validateDocument(parseDocument(text).doc);
  assert.equal(result.ok, false);
  assert.match(result.error, /nested deeper than 64 levels/);
});

test("a document with 300,000 ops validates and indexes without exhausting the stack", () => {
  const ops = [];
  const tensors = {};
  for (let i = 0; i < 300_000; i++) {
    ops.push({ id: `forward:${i}`, parent: null, level: 0, name: "aten.add", label: "add",
      module_path: `m${i % 7}`, inputs: [`t${i}`], outputs: [`t${i + 1}`], tags: [] });
    tensors[`t${i}`] = { shape: [2], dtype: "float32", kind: "intermediate", consumers: [`forward:${i}`] };
  }
  const doc = { format: "thunderviz", version: 1, traces: { forward: { ops, tensors, inputs: ["t0"], outputs: ["t300000"] } } };
  assert.deepEqual(validateDocument(doc), { ok: true, error: null });
  const index = indexDocument(doc);
  assert.equal(index.opById.size, 300_000);
});

// --- seeded fuzz ------------------------------------------------------------------------
function mulberry32(seed) {
  return () => {
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomJson(rand, depth = 0) {
  const pick = Math.floor(rand() * (depth > 2 ? 7 : 9));
  const strings = ["", "x", "nan", "inf", "forward:0", "backward:0", "__proto__", "constructor", "a\ud800b"];
  switch (pick) {
    case 0: return null;
    case 1: return rand() < 0.5;
    case 2: return Math.floor(rand() * 2000) - 1000;
    case 3: return (rand() - 0.5) * 1e6;
    case 4: return [1e308 * 10, -1e308 * 10, 2 ** 60, -0][Math.floor(rand() * 4)];
    case 5:
    case 6: return strings[Math.floor(rand() * strings.length)];
    case 7: return Array.from({ length: Math.floor(rand() * 4) }, () => randomJson(rand, depth + 1));
    default: {
      const out = {};
      for (let i = Math.floor(rand() * 4); i > 0; i--) {
        Object.defineProperty(out, strings[Math.floor(rand() * strings.length)],
          { value: randomJson(rand, depth + 1), enumerable: true, writable: true, configurable: true });
      }
      return out;
    }
  }
}

function allPaths(value, prefix = [], out = []) {
  if (prefix.length) out.push(prefix);
  if (value !== null && typeof value === "object") {
    for (const key of Object.keys(value)) allPaths(value[key], [...prefix, Array.isArray(value) ? Number(key) : key], out);
  }
  return out;
}

test("fuzz: one field replaced by random JSON: the checker never throws, accepted documents are read", () => {
  const base = loadFixture();
  const paths = allPaths(base).filter((p) => !(p[0] === "transforms" && p.length > 4));
  const rand = mulberry32(20260);
  let accepted = 0;
  const runs = 3000;
  for (let i = 0; i < runs; i++) {
    const path = paths[Math.floor(rand() * paths.length)];
    const value = randomJson(rand);
    const doc = setPath(loadFixture(), path, value);
    const result = validateDocument(doc);
    assert.equal(typeof result.ok, "boolean");
    if (!result.ok) continue;
    accepted += 1;
    try {
      readEverything(doc);
    } catch (err) {
      assert.fail(`accepted ${JSON.stringify(path)} = ${JSON.stringify(value)} and then: ${err.stack}`);
    }
  }
  assert.ok(accepted > runs / 20, `only ${accepted} of ${runs} mutated documents were valid: the fuzz tests little`);
});

// --- seeded documents generated from the schema itself ----------------------------------
const POOL = {
  string: ["", "x", "t0", "t1", "forward:0", "forward:1", "backward:0", "a", "a.b", ".", "a..b",
    "__proto__", "constructor", "nan", "inf", "<b>x</b>", "a\ud800b"],
};

function resolveRef(schema) {
  return schema.$ref ? { ...VIEW_SCHEMA.$defs[schema.$ref.replace("#/$defs/", "")], ...schema, $ref: undefined } : schema;
}

/** A random value that `schema` accepts (numbers kept small, containers short). */
function generate(schema, rand, depth = 0) {
  schema = resolveRef(schema);
  const pick = (list) => list[Math.floor(rand() * list.length)];
  if (schema.const !== undefined) return schema.const;
  if (schema.enum) return pick(schema.enum);
  if (schema.anyOf) return generate(pick(schema.anyOf), rand, depth);
  const type = Array.isArray(schema.type) ? pick(schema.type) : schema.type;
  switch (type) {
    case "null": return null;
    case "boolean": return rand() < 0.5;
    case "integer": {
      const lo = Math.max(schema.minimum ?? -50, -50);
      return lo + Math.floor(rand() * 100);
    }
    case "number": return pick([0, -1.5, 3.25, 1e300, -1e-300, 7]);
    case "string": {
      const s = pick(POOL.string);
      return schema.minLength && s.length < schema.minLength ? "x" : s;
    }
    case "array": {
      const n = Math.min(Math.floor(rand() * 4), schema.maxItems ?? 4);
      const length = Math.max(n, schema.minItems ?? 0);
      return Array.from({ length }, () => (schema.items ? generate(schema.items, rand, depth + 1) : null));
    }
    case "object": {
      const out = {};
      const define = (key, value) => Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
      for (const [key, sub] of Object.entries(schema.properties ?? {})) {
        if ((schema.required ?? []).includes(key) || rand() < 0.6) define(key, generate(sub, rand, depth + 1));
      }
      if (schema.additionalProperties && typeof schema.additionalProperties === "object") {
        const n = Math.max(Math.floor(rand() * 3), schema.minProperties ?? 0);
        // (the one name propertyNames forbids: "__proto__")
        const keys = POOL.string.concat(["forward", "backward"]).filter((k) => !schema.propertyNames || k !== "__proto__");
        for (let i = 0; i < n; i++) define(pick(keys), generate(schema.additionalProperties, rand, depth + 1));
      }
      return out;
    }
    default: return null;
  }
}

/**
 * Satisfy the rules beyond the schema: unique ids ("<kind>:<i>"), parents earlier, and a
 * comparison's other sides whole view documents that compare nothing further.
 */
function followRules(doc, rand, compared = true) {
  doc.version = 1; // the one version this viewer reads (the schema allows any positive integer)
  if (doc.comparison && compared) doc.comparison.documents = [followRules(generate(VIEW_SCHEMA, rand), rand, false)];
  else delete doc.comparison;
  const views = Object.entries(doc.traces);
  for (const run of Array.isArray(doc.transforms) ? doc.transforms : []) {
    if (run.trace_before) views.push(["before", run.trace_before]);
  }
  for (const [kind, trace] of views) {
    trace.ops.forEach((op, i) => {
      op.id = `${kind}:${i}`;
      if (op.parent !== undefined && op.parent !== null) op.parent = i > 0 && rand() < 0.7 ? `${kind}:${Math.floor(rand() * i)}` : null;
    });
  }
  return doc;
}

test("documents generated from the schema validate and are read by the whole viewer pipeline", () => {
  const rand = mulberry32(7);
  let valid = 0;
  for (let i = 0; i < 1500; i++) {
    const doc = followRules(generate(VIEW_SCHEMA, rand), rand);
    const result = validateDocument(doc);
    assert.ok(result.ok, result.error);
    valid += 1;
    try {
      readEverything(doc);
    } catch (err) {
      assert.fail(`a valid generated document crashed the viewer: ${err.stack}\n${JSON.stringify(doc).slice(0, 2000)}`);
    }
  }
  assert.equal(valid, 1500);
});
