// Step navigation over recorded backward steps, and breakpoints. Pure functions: when no
// kernel drives stepping (HTML export, the JupyterLab extension) the step panel uses these
// to move through `steps`; with a kernel the same actions go to Python instead.

import { toNumber } from "./document.js";
import { isModuleId, modulePathOf } from "./visible.js";
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
 * Why a step stops a `continue`, or null.
 * @param {Breakpoints} breakpoints
 */
export function breakReason(index, step, breakpoints) {
  if (breakpoints.nan_inf && stepHasNanInf(step)) return "NaN/Inf";
  for (const op of breakpoints.ops) if (stepMatches(index, step, op)) return `breakpoint on ${op}`;
  for (const path of breakpoints.modules) {
    if (moduleWithin(stepModule(index, step), path)) return `breakpoint on module ${path || "(root)"}`;
  }
  const limit = breakpoints.grad_norm_above;
  if (typeof limit === "number" && Number.isFinite(limit) && stepMaxNorm(step) > limit) return `norm > ${limit}`;
  return null;
}

/**
 * Move through recorded steps.
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

  // Scan forward from the step after `from` for the first one `stop` accepts; breakpoints
  // stop every kind of run, as in any debugger.
  const runUntil = (stop, endReason) => {
    for (let i = from + 1; i <= last; i++) {
      const hit = breakReason(index, steps[i], breakpoints);
      if (hit) return { current: i, reason: hit };
      const reason = stop(steps[i], i);
      if (reason) return { current: i, reason };
    }
    return { current: last, reason: endReason };
  };

  switch (action) {
    case "step":
      return { current: Math.min(last, from + 1), reason: from + 1 > last ? "end of backward" : "" };
    case "back":
      return { current: Math.max(-1, from - 1), reason: "" };
    case "reset":
      return { current: -1, reason: "" };
    case "continue":
      return runUntil(() => null, "end of backward");
    case "run_to": {
      if (!options.target) return { current: from, reason: "nothing selected to run to" };
      return runUntil((step) => (stepMatches(index, step, options.target) ? "reached target" : null), "target not reached");
    }
    case "step_over": {
      if (from < 0) return { current: 0, reason: "" };
      const module = stepModule(index, steps[from]);
      if (module === "") return { current: Math.min(last, from + 1), reason: "" };
      const left = `stepped over ${module}`;
      return runUntil((step) => (moduleWithin(stepModule(index, step), module) ? null : left), "end of backward");
    }
    default:
      return { current: from, reason: `unknown action ${action}` };
  }
}
