// A layout worker that starts but never answers (killed under memory pressure, a browser
// that never runs it) must not leave a pane "laying out" for ever: after the readiness limit
// the request is laid out on the main thread (src/layout.js). Node has no Worker: a fake one
// that swallows every message stands in, installed before the module reads the global.
import { test } from "node:test";
import assert from "node:assert/strict";

class SilentWorker {
  constructor() {
    this.posted = 0;
    this.terminated = false;
    SilentWorker.made.push(this);
  }
  postMessage() {
    this.posted += 1;
  }
  terminate() {
    this.terminated = true;
  }
}
SilentWorker.made = [];

test("a worker that never says ready is given up and the layout comes from the main thread", { timeout: 5000 }, async () => {
  globalThis.Worker = SilentWorker;
  const { layoutDot, timings, workerLimits } = await import("../src/layout.js");

  workerLimits.readyMs = 50;
  const started = Date.now();
  const result = await layoutDot("digraph G { a -> b; }", { lane: "watchdog-test" });
  assert.ok(result !== null && result.tree.t === "svg");
  assert.equal(timings.where, "main");
  assert.equal(SilentWorker.made.length, 1);
  assert.equal(SilentWorker.made[0].posted, 1);
  assert.ok(SilentWorker.made[0].terminated);
  assert.ok(Date.now() - started >= 50);
});
