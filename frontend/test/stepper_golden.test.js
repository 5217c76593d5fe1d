// The stepper golden (fixtures/stepper_golden.json), shared with tests/viz/test_stepper_golden.py:
// the viewer's offline stepper stops where debug/stepper.py stops on the same program.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { indexDocument, validateDocument } from "../src/document.js";
import { navigateSteps } from "../src/stepper.js";

const golden = JSON.parse(readFileSync(fileURLToPath(new URL("./fixtures/stepper_golden.json", import.meta.url)), "utf8"));

test("the golden's document is a valid view document with one step per backward op", () => {
  assert.ok(validateDocument(golden.document).ok);
  assert.deepEqual(golden.document.steps.map((s) => s.op), golden._steps.map((s) => s[0]));
});

const index = indexDocument(golden.document);
for (const c of golden.scenarios) {
  test(c.name, () => {
    const got = navigateSteps(index, golden.document.steps, c.from, c.action, { breakpoints: c.breakpoints, target: c.target });
    assert.equal(got.current, c.expected);
    if (c.reason !== undefined) assert.ok(got.reason.startsWith(c.reason), got.reason);
  });
}
