// Work too big for one task, done in slices: a generator yields where it may pause, and
// runInSlices runs it for up to SLICE_MS per task, then lets the page answer clicks and draw
// before the next slice. A small job finishes in its first slice, synchronously.

/** Main-thread time per slice: well under the 50 ms of a "long task" on an idle machine. */
export const SLICE_MS = 25;

/** Run a generator to its end at once; its return value. */
export function drain(steps) {
  for (;;) {
    const { done, value } = steps.next();
    if (done) return value;
  }
}

/**
 * Run `steps` in slices of about `sliceMs`; `done(result)` gets its return value: at once when
 * the first slice finished it, else in a task of its own (what comes after a big job, such as
 * building the view, starts with a whole slice of time).
 * @param {Generator<any, any>} steps
 * @param {(result: any) => void} done
 * @returns {() => void} cancels what is left (done is then never called)
 */
export function runInSlices(steps, done, sliceMs = SLICE_MS) {
  let cancelled = false;
  let sliced = false;
  const slice = () => {
    if (cancelled) return;
    const end = performance.now() + sliceMs;
    for (;;) {
      const { done: finished, value } = steps.next();
      if (finished) {
        if (!sliced) done(value);
        else setTimeout(() => cancelled || done(value), 0);
        return;
      }
      if (performance.now() >= end) break;
    }
    sliced = true;
    setTimeout(slice, 0);
  };
  slice();
  return () => {
    cancelled = true;
  };
}
