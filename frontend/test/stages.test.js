// A big document is checked and indexed in slices (src/stages.js): the sliced check must give
// exactly what the one-task check gives, valid or not, and a cancelled job must stop.
import { test } from "node:test";
import assert from "node:assert/strict";
import { validateDocument, validation, indexing, indexDocument } from "../src/document.js";
import { runInSlices, drain } from "../src/stages.js";
import { makeGptDocument } from "./synthetic.js";
import { loadFixture } from "./helpers.js";

/** Run `steps` with slices of 0 ms (a pause at every yield); resolves with the result. */
function sliced(steps) {
  return new Promise((resolve) => {
    let synchronous = true;
    runInSlices(steps, (value) => resolve({ value, synchronous }), 0);
    synchronous = false;
  });
}

test("a big document checked in slices: the same verdict as in one task, over several tasks", async () => {
  const doc = makeGptDocument({ layers: 12 });
  const { value, synchronous } = await sliced(validation(doc));
  assert.equal(synchronous, false);
  assert.deepEqual(value, { ok: true, error: null });
  assert.deepEqual(value, validateDocument(doc));
});

test("an error deep in a big document: the same first violation, sliced or not", async () => {
  const doc = makeGptDocument({ layers: 12 });
  const ops = doc.traces.backward.ops;
  ops[ops.length - 1].line = "seven"; // the last op of the last trace
  ops[ops.length - 2].inputs = [3]; // and one just before it: the earlier one is reported
  const expected = validateDocument(doc);
  assert.equal(expected.ok, false);
  assert.match(expected.error, new RegExp(`traces\\.backward\\.ops\\[${ops.length - 2}\\]\\.inputs\\[0\\]`));
  const { value } = await sliced(validation(doc));
  assert.deepEqual(value, expected);
});

test("errors of the fixture's variants agree between the sliced and the one-task check", async () => {
  const variants = [
    (d) => (d.traces.forward.ops[0].id = 5),
    (d) => (d.traces.forward.tensors.x = null),
    (d) => (d.steps = "no"),
    (d) => (d.traces.forward.ops[1].parent = "forward:99"),
    (d) => (d.traces.backward.ops[0].id = d.traces.forward.ops[0].id),
  ];
  for (const change of variants) {
    const doc = loadFixture();
    change(doc);
    const { value } = await sliced(validation(doc));
    assert.deepEqual(value, validateDocument(doc));
    assert.equal(value.ok, false);
  }
});

test("indexing in slices builds the same indexes", async () => {
  const doc = makeGptDocument({ layers: 2 });
  const { value } = await sliced(indexing(doc));
  const whole = indexDocument(doc);
  assert.deepEqual([...value.traces.keys()], [...whole.traces.keys()]);
  assert.deepEqual([...value.opById.keys()], [...whole.opById.keys()]);
  assert.deepEqual([...value.derivedByForward.entries()], [...whole.derivedByForward.entries()]);
});

test("a small job finishes synchronously; a cancelled one never reports", async () => {
  let got = null;
  runInSlices(validation(loadFixture()), (value) => (got = value), 1000);
  assert.deepEqual(got, { ok: true, error: null });

  let called = false;
  const cancel = runInSlices(validation(makeGptDocument({ layers: 12 })), () => (called = true), 0);
  cancel();
  await new Promise((r) => setTimeout(r, 50));
  assert.equal(called, false);
  assert.deepEqual(drain(validation(loadFixture())), { ok: true, error: null });
});
