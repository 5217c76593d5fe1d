// The collapse golden (fixtures/collapse_golden.json), shared with tests/viz/test_collapse_golden.py:
// the viewer's default view of the document shows exactly the expected op and module nodes.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { indexDocument, validateDocument } from "../src/document.js";
import { defaultExpanded, fitVisibleGraph } from "../src/visible.js";

const golden = JSON.parse(readFileSync(fileURLToPath(new URL("./fixtures/collapse_golden.json", import.meta.url)), "utf8"));

test("the default view of the golden document opens and shows what the golden says", () => {
  assert.ok(validateDocument(golden.document).ok);
  const ti = indexDocument(golden.document).traces.get("forward");
  const expanded = defaultExpanded(ti);
  const { graph } = fitVisibleGraph(ti, expanded);
  const shown = graph.nodes.filter((n) => n.type === "op" || n.type === "module").map((n) => n.id);
  assert.deepEqual([...expanded].sort(), [...golden.expected.expanded].sort());
  assert.deepEqual(shown.sort(), [...golden.expected.nodes].sort());
});
