import { test } from "node:test";
import assert from "node:assert/strict";
import { navigateSteps, emptyBreakpoints, stepHasNanInf, stepMatches, breakReason } from "../src/stepper.js";
import { fixtureIndex } from "./helpers.js";

const index = fixtureIndex();
const steps = index.steps;
const go = (current, action, options) => navigateSteps(index, steps, current, action, options);

test("step, back and reset move one step / to before the start", () => {
  assert.equal(go(-1, "step").current, 0);
  assert.equal(go(3, "step").current, 4);
  assert.equal(go(9, "step").current, 9);
  assert.equal(go(3, "back").current, 2);
  assert.equal(go(0, "back").current, -1);
  assert.equal(go(5, "reset").current, -1);
});

test("continue stops at the first NaN/Inf step", () => {
  assert.ok(stepHasNanInf(steps[8]) && !stepHasNanInf(steps[7]));
  assert.deepEqual(go(-1, "continue"), { current: 8, reason: "NaN/Inf" });
});

test("continue runs to the end when NaN/Inf breaking is off and nothing else hits", () => {
  const breakpoints = { ...emptyBreakpoints(), nan_inf: false };
  assert.deepEqual(go(-1, "continue", { breakpoints }), { current: 9, reason: "end of backward" });
  assert.equal(go(8, "continue").current, 9);
});

test("an op breakpoint on a forward op stops at the first backward op derived from it", () => {
  const breakpoints = { ...emptyBreakpoints(), ops: ["forward:2"] };
  assert.deepEqual(go(-1, "continue", { breakpoints }), { current: 2, reason: "breakpoint on forward:2" });
  assert.equal(go(2, "continue", { breakpoints }).current, 3);
});

test("a module breakpoint stops at the first step inside the module", () => {
  const breakpoints = { ...emptyBreakpoints(), modules: ["encoder"] };
  assert.equal(go(-1, "continue", { breakpoints }).current, 6); // backward:6 (relu, encoder.act)
});

test("a grad-norm threshold stops at the first step above it", () => {
  const breakpoints = { ...emptyBreakpoints(), nan_inf: false, grad_norm_above: 1.5 };
  assert.deepEqual(go(-1, "continue", { breakpoints }), { current: 0, reason: "norm > 1.5" });
  assert.equal(go(0, "continue", { breakpoints }).current, 4);
});

test("run to cursor stops at the target, a forward target through fwd_op", () => {
  assert.deepEqual(go(-1, "run_to", { target: "backward:5" }), { current: 5, reason: "reached target" });
  assert.equal(go(-1, "run_to", { target: "forward:1" }).current, 6);
  assert.equal(go(-1, "run_to", { target: "backward:6.1" }).current, 6, "a subsymbol target stops at its enclosing step");
  assert.equal(go(-1, "run_to", { target: "forward:0" }).current, 7);
  assert.deepEqual(go(6, "run_to", { target: "backward:2" }), { current: 2, reason: "reached target" }, "a step already run is gone back to");
  assert.deepEqual(go(6, "run_to", { target: "backward:9" }), { current: 8, reason: "NaN/Inf" }, "a breakpoint on the way stops it");
});

test("step over runs the next step's module and stops at its last step", () => {
  // steps 2..5 are in "head" (backward:5 has no module_path of its own but its fwd_op,
  // forward:2, is in head); step 6 is in encoder.act, 7..9 in encoder.fc1 (by fwd_op)
  assert.deepEqual(go(2, "step_over"), { current: 5, reason: "stepped over head" });
  assert.equal(go(1, "step_over").current, 5, "from before the module: all of it");
  assert.deepEqual(go(6, "step_over"), { current: 8, reason: "NaN/Inf" }, "a breakpoint inside stops it");
  assert.equal(go(6, "step_over", { breakpoints: { ...emptyBreakpoints(), nan_inf: false } }).current, 9);
  assert.equal(go(-1, "step_over").current, 0);
  assert.equal(go(0, "step_over").current, 1, "at the root it is a plain step");
});

test("a module breakpoint fires on entering the module, not again inside it", () => {
  const breakpoints = { ...emptyBreakpoints(), nan_inf: false, modules: ["encoder"] };
  assert.equal(go(6, "continue", { breakpoints }).current, 9); // 7..9 are in encoder.fc1, inside encoder
  assert.equal(breakReason(index, steps[6], breakpoints), "breakpoint on module encoder", "no step before: entering");
  assert.equal(breakReason(index, steps[7], breakpoints, steps[6]), null);
});

test("matching is by op, subsymbol tree, fwd_op and module", () => {
  assert.ok(stepMatches(index, steps[6], "module:encoder.act"));
  assert.ok(!stepMatches(index, steps[6], "module:head"));
  assert.ok(stepMatches(index, steps[0], "forward:3.0"));
  assert.equal(breakReason(index, steps[7], emptyBreakpoints()), null);
});

test("no steps: every action stays put", () => {
  assert.deepEqual(navigateSteps(index, [], -1, "continue"), { current: -1, reason: "no recorded steps" });
});
