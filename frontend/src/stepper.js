// Step navigation over recorded backward steps, and breakpoints. Pure functions: when no
// kernel drives stepping (HTML export, the JupyterLab extension) the step panel uses these
// to move through `steps`; with a kernel the same actions go to Python instead.

import { toNumber } from "./document.js";
import { isModuleId, modulePathOf, opId, parseOpId } from "./protocol.js";
import { unpackOps } from "./visible.js";
import { moduleWithin } from "./traceindex.js";

export const STEP_ACTIONS = ["step", "step_over", "continue", "run_to", "back", "reset"];

/**
 * Breakpoints as the UI edits them and as they are sent to Python
 * (`{type: "breakpoints", breakpoints}`).
 * @typedef {{ops: string[], modules: string[], nan_inf: boolean, grad_norm_above: number | null}} Breakpoints
 */
/** @returns {Breakpoints} */
export const emptyBreakpoints = () => ({ ops: [], modules: [], nan_inf: true, grad_norm_above: null });

/** All Stats records of a step (outputs, then finished grads). */
export function stepStats(step) {
  const values = [];
  for (const group of [step.outputs, step.grads]) {
    if (group && typeof group === "object") {
      for (const stats of Object.values(group)) if (stats && typeof stats === "object") values.push(stats);
    }
  }
  return values;
}

export function stepHasNanInf(step) {
  return stepStats(step).some((s) => toNumber(s.nan) > 0 || toNumber(s.inf) > 0);
}

/** Largest norm among a step's stats (NaN norms count as infinitely large). */
export function stepMaxNorm(step) {
  let max = -Infinity;
  for (const s of stepStats(step)) {
    const norm = toNumber(s.norm);
    max = Math.max(max, Number.isNaN(norm) ? Infinity : norm);
  }
  return max;
}

/** Module path of the op executed at a step (derived ops take their forward op's module). */
function stepModule(index, step) {
  const found = index.opById.get(step.op);
  return found ? index.moduleOf(found.op) : "";
}

/** Is `step` the backward's step 0 that unpacks the saved tensors (not a gradient)? */
function isSavedUnpack(index, step) {
  const found = index.opById.get(step.op);
  return toNumber(step.index) === 0 && found !== undefined && unpackOps(index.traces.get(found.kind)).ops.has(step.op);
}

/**
 * Does the op executed at `step` belong to `target`? `target` is a backward op (or an
 * enclosing one), a forward op (matched through the step op's `fwd_op`, either way up or
 * down the subsymbol tree) or "module:<path>".
 */
export function stepMatches(index, step, target) {
  if (!target) return false;
  if (step.op === target) return true;
  if (isModuleId(target)) return moduleWithin(stepModule(index, step), modulePathOf(target));
  const targetFound = index.opById.get(target);
  const stepFound = index.opById.get(step.op);
  if (!targetFound || !stepFound) return false;
  const within = (kind, id, ancestorId) => {
    const ti = index.traces.get(kind);
    let current = ti && ti.ops.get(id);
    while (current) {
      if (current.id === ancestorId) return true;
      current = current.parent ? ti.ops.get(current.parent) : undefined;
    }
    return false;
  };
  // same trace: the step runs the target, or an op that encloses it (or lies inside it)
  if (targetFound.kind === stepFound.kind) return within(stepFound.kind, step.op, target) || within(stepFound.kind, target, step.op);
  const fwd = stepFound.op.fwd_op;
  if (!fwd || !index.opById.has(fwd)) return false;
  const fwdKind = index.opById.get(fwd).kind;
  return within(fwdKind, fwd, target) || within(fwdKind, target, fwd);
}

/**
 * Why the run stops after `step` has run, or null; debug/breakpoints.py's rules. A module
 * breakpoint fires on entering the module: not when `previous` (the step run before it;
 * none at the first step) was inside it already. The saved-tensor unpack is not a
 * gradient and never fires a norm breakpoint.
 * @param {Breakpoints} breakpoints
 * @param {any} [previous]
 */
export function breakReason(index, step, breakpoints, previous) {
  if (breakpoints.nan_inf && stepHasNanInf(step)) return "NaN/Inf";
  for (const op of breakpoints.ops) if (stepMatches(index, step, op)) return `breakpoint on ${op}`;
  const module = stepModule(index, step);
  const before = previous ? stepModule(index, previous) : null;
  for (const path of breakpoints.modules) {
    if (moduleWithin(module, path) && !(before !== null && moduleWithin(before, path))) return `breakpoint on module ${path || "(root)"}`;
  }
  const limit = breakpoints.grad_norm_above;
  if (typeof limit === "number" && Number.isFinite(limit) && !isSavedUnpack(index, step) && stepMaxNorm(step) > limit) return `norm > ${limit}`;
  return null;
}

/** The position of the step that runs backward op `target` (or encloses it); -1 if none. */
function backwardStepOf(steps, target) {
  const parsed = parseOpId(target);
  if (!parsed || parsed.kind !== "backward") return -1;
  const top = opId("backward", parsed.path[0]);
  return steps.findIndex((step) => step.op === top);
}

/**
 * Move through recorded steps by debug/stepper.py's rules. `current` and the result are
 * the last step run (-1: none); Python's `current` is the step after it.
 * @param {ReturnType<import("./document.js").indexDocument>} index
 * @param {any[]} steps
 * @param {number} current -1 = before the first step
 * @param {string} action one of STEP_ACTIONS
 * @param {{breakpoints?: Breakpoints, target?: string}} [options]
 * @returns {{current: number, reason: string}}
 */
export function navigateSteps(index, steps, current, action, options = {}) {
  const breakpoints = options.breakpoints || emptyBreakpoints();
  const last = steps.length - 1;
  const from = Math.max(-1, Math.min(current, last));
  if (steps.length === 0) return { current: -1, reason: "no recorded steps" };
  const hitAt = (i) => breakReason(index, steps[i], breakpoints, i > 0 ? steps[i - 1] : undefined);

  // Run the steps after `from`: stop after a step a breakpoint or `stopAfter` stops on, or
  // before one (not the first) that `stopBefore` refuses; breakpoints stop every kind of
  // run, as in any debugger.
  /** @type {(stopAfter: (s: any) => string | null, endReason: string, stopBefore?: (s: any) => string | null) => {current: number, reason: string}} */
  const run = (stopAfter, endReason, stopBefore = () => null) => {
    for (let i = from + 1; i <= last; i++) {
      const refused = i > from + 1 ? stopBefore(steps[i]) : null;
      if (refused) return { current: i - 1, reason: refused };
      const reason = hitAt(i) || stopAfter(steps[i]);
      if (reason) return { current: i, reason };
    }
    return { current: last, reason: endReason };
  };
  const step = () => {
    if (from >= last) return { current: last, reason: "end of backward" };
    return { current: from + 1, reason: hitAt(from + 1) || (from + 1 === last ? "end of backward" : "") };
  };

  switch (action) {
    case "step":
      return step();
    case "back":
      return { current: Math.max(-1, from - 1), reason: from < 0 ? "at the start" : "" };
    case "reset":
      return { current: -1, reason: "" };
    case "continue":
      return run(() => null, "end of backward");
    case "run_to": {
      const target = options.target;
      if (!target) return { current: from, reason: "nothing selected to run to" };
      // a backward step already run is gone back to
      const k = backwardStepOf(steps, target);
      if (k >= 0 && k <= from) return { current: k, reason: "reached target" };
      return run((s) => (stepMatches(index, s, target) ? "reached target" : null), "target not reached");
    }
    case "step_over": {
      // the next step and every one after it in its module (and submodules); at the root, one step
      if (from >= last) return step();
      const module = stepModule(index, steps[from + 1]);
      if (module === "") return step();
      const left = `stepped over ${module}`;
      return run(() => null, "end of backward", (s) => (moduleWithin(stepModule(index, s), module) ? null : left));
    }
    default:
      return { current: from, reason: `unknown action ${action}` };
  }
}
