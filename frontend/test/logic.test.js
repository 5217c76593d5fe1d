// Pure helpers behind the panels: saved-tensor totals, trace diff, grad-flow colours,
// number formatting, the in-memory model.
import { test } from "node:test";
import assert from "node:assert/strict";
import { summarizeSaved } from "../src/saved.js";
import { diffLines } from "../src/diff.js";
import { gradFlowStyle, normRange, logPosition, rankPosition, backwardFlow, paletteColor, worstStatus } from "../src/gradflow.js";
import { formatNumber, formatBytes } from "../src/format.js";
import { createModel } from "../src/model.js";
import { loadFixture } from "./helpers.js";

test("saved tensors sort by bytes with totals per module and overall", () => {
  const { rows, modules, total } = summarizeSaved(loadFixture().saved);
  assert.deepEqual(rows.map((r) => r.name), ["fc2_weight", "t1", "x", "t7"]);
  assert.deepEqual(total, { count: 4, bytes: 704, recomputed: 0 });
  assert.deepEqual(modules.map((m) => [m.module, m.bytes]), [["encoder.act", 256], ["head", 256], ["encoder.fc1", 128], ["", 64]]);
});

test("recomputed tensors are listed but not counted as kept", () => {
  const saved = loadFixture().saved;
  saved[0].recomputed = true;
  const { rows, total } = summarizeSaved(saved);
  assert.equal(rows.length, 4);
  assert.deepEqual(total, { count: 4, bytes: 576, recomputed: 1 });
});

test("diffLines marks removed and inserted lines and keeps the rest", () => {
  const lines = diffLines("a\nb\nc\nd", "a\nc\nX\nd");
  assert.deepEqual(lines.map((l) => `${l.type[0]}${l.text}`), ["sa", "rb", "sc", "iX", "sd"]);
  assert.deepEqual(lines[3], { type: "inserted", text: "X", oldLine: null, newLine: 3 });
  assert.deepEqual(diffLines("same", "same").map((l) => l.type), ["same"]);
});

test("diff of the fixture's DCE step shows exactly the removed tanh line", () => {
  const run = loadFixture().transforms[0];
  const changed = diffLines(run.steps[0].text, run.steps[1].text).filter((l) => l.type !== "same");
  assert.deepEqual(changed, [{ type: "removed", text: "  t1 = torch.tanh(t0)", oldLine: 3, newLine: null }]);
});

test("grad norms map onto a log scale between the smallest and largest ok norms", () => {
  const flow = loadFixture().grad_flow;
  const range = normRange(flow);
  assert.equal(range.min, 0.05);
  assert.equal(range.max, 2.0);
  assert.equal(logPosition(0.05, range), 0);
  assert.equal(logPosition(2.0, range), 1);
  assert.ok(Math.abs(logPosition(Math.sqrt(0.05 * 2.0), range) - 0.5) < 1e-9);
  assert.equal(paletteColor(0), "#440154");
  assert.equal(paletteColor(1), "#fde725");
});

test("non-ok grad statuses get their own look; NaN norms count as nan", () => {
  const range = { min: 0.1, max: 10 };
  assert.equal(gradFlowStyle({ norm: 0, status: "zero" }, range).status, "zero");
  assert.equal(gradFlowStyle({ norm: "nan", status: "ok" }, range).status, "nan");
  assert.equal(gradFlowStyle({ norm: "inf", status: "ok" }, range).status, "inf");
  const looks = ["zero", "nan", "inf", "no_grad", "unused", "detached", "integer"].map((status) => gradFlowStyle({ norm: 1, status }, range));
  assert.equal(new Set(looks.map((l) => `${l.color}/${l.dash}`)).size, 7, "every status looks different");
  assert.equal(worstStatus(["ok", "zero", "nan"]), "nan");
  assert.equal(gradFlowStyle(undefined, range), null);
});

test("numbers and sizes format compactly", () => {
  assert.equal(formatNumber("nan"), "nan");
  assert.equal(formatNumber(0.000012345), "1.234e-5");
  assert.equal(formatNumber(3.14159), "3.142");
  assert.equal(formatNumber(128), "128");
  assert.equal(formatBytes(704), "704 B");
  assert.equal(formatBytes(1536), "1.5 KiB");
  assert.equal(formatBytes(3 * 1024 ** 3), "3.0 GiB");
});

test("the in-memory model behaves like anywidget's: set fires change:name, off removes", () => {
  const sent = [];
  const model = createModel({ selected: "" }, { onSend: (m) => sent.push(m) });
  const seen = [];
  const listener = () => seen.push(model.get("selected"));
  model.on("change:selected", listener);
  model.set("selected", "forward:1");
  model.set("selected", "forward:1"); // unchanged: no event
  model.off("change:selected", listener);
  model.set("selected", "t3");
  assert.deepEqual(seen, ["forward:1"]);
  assert.equal(model.get("live"), false);
  assert.equal(model.get("current_step"), -1);
  model.send({ type: "step", action: "step" });
  assert.deepEqual(sent, [{ type: "step", action: "step" }]);
});

test("the rank scale spreads norms evenly; the backward's flow comes from its recorded steps", () => {
  const flow = { a: { norm: 1, status: "ok" }, b: { norm: 1.01, status: "ok" }, c: { norm: 1.02, status: "ok" }, d: { norm: 0, status: "zero" } };
  const range = normRange(flow, "rank");
  assert.deepEqual([1, 1.01, 1.02].map((n) => rankPosition(n, range)), [0, 0.5, 1]);
  assert.ok(logPosition(1.01, normRange(flow)) > 0.4 && gradFlowStyle(flow.b, range).color !== gradFlowStyle(flow.a, range).color);
  const steps = [
    { op: "backward:0", outputs: { g1: { norm: 2, nan: 0, inf: 0 }, i: { norm: null, nan: 0, inf: 0 } } },
    { op: "backward:1", outputs: { g2: { norm: "nan", nan: 3, inf: 0 }, g3: { norm: 0, nan: 0, inf: 0 } } },
  ];
  assert.deepEqual(backwardFlow(steps), { g1: { norm: 2, status: "ok" }, g2: { norm: "nan", status: "nan" }, g3: { norm: 0, status: "zero" } });
});
