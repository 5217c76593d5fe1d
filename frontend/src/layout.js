// Graph layout off the page's main thread.
//
// The engine (src/layout-worker.js: Graphviz in WebAssembly) is bundled by build.mjs into
// one classic-script string (generated/layout-worker-source.js) and started as a Web
// Worker from a blob: URL (a classic worker: Chromium refuses module workers on file://). That works the same in the three places the viewer runs, none of
// which can serve a second file: the anywidget (the bundle arrives as a string), the
// standalone HTML export (file://, everything inlined) and the JupyterLab extension.
//
// Content-Security-Policy: a page with a CSP must allow `worker-src blob:` (or `script-src
// blob:`, which worker-src falls back to) and `'wasm-unsafe-eval'` in script-src. Where the
// worker is refused anyway, the same engine is imported on the main thread (it then blocks
// the page while it lays out, as before, but still draws).
//
// Each pane lays out in its own lane (its own worker), so a long backward layout never
// delays the forward pane. In a lane the newest request wins: a request that is superseded
// before it finishes resolves to null, and a running one is cut short by restarting the
// lane's worker (its WebAssembly restarts in ~0.3 s; a big layout takes seconds).
// Results are cached by DOT text, so going back to a view seen before is instant.

import WORKER_SOURCE from "../generated/layout-worker-source.js";

const CACHE_SIZE = 24;
const cache = new Map();

/** Timings of the most recent work, in milliseconds (shown in the DOM for tests/benchmarks). */
export const timings = { init: null, lastLayout: null, where: null };

/**
 * How long a new worker may take to say it is ready (its WebAssembly compiled) before the
 * pane stops waiting for it and lays out on the main thread. It normally takes ~0.3 s; a
 * worker that never answers (killed under memory pressure, a browser that starts it but
 * never runs it) would otherwise leave the pane "laying out" for ever. Settable for tests.
 */
export const workerLimits = { readyMs: 10000 };

let workersRefused = typeof Worker === "undefined";
let mainThreadEngine = null;

/**
 * Lay `dot` out; the SVG comes back as a sanitized tree (src/svgtree.js: buildSvg makes it
 * elements).
 * @param {string} dot
 * @param {{lane?: string}} [options] requests in one lane supersede each other
 * @returns {Promise<{tree: object, ms: number, cached: boolean} | null>} null: superseded
 */
export async function layoutDot(dot, { lane = "default" } = {}) {
  const hit = cache.get(dot);
  if (hit !== undefined) {
    cache.delete(dot); // refresh its place in the LRU order
    cache.set(dot, hit);
    laneFor(lane).cancel();
    return { tree: hit, ms: 0, cached: true };
  }
  const result = await laneFor(lane).run(dot);
  if (result === null) return null;
  timings.lastLayout = result.ms;
  if (result.initMs !== null && result.initMs !== undefined) timings.init = result.initMs;
  cache.set(dot, result.tree);
  if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value);
  return { tree: result.tree, ms: result.ms, cached: false };
}

const lanes = new Map();
function laneFor(name) {
  if (!lanes.has(name)) lanes.set(name, new Lane());
  return lanes.get(name);
}

/** One worker and the one request it is working on; a newer request replaces it. */
class Lane {
  constructor() {
    this.worker = null;
    this.job = null; // {id, dot, resolve, reject}
    this.nextId = 0;
  }

  /** Drop the current request (it resolves to null). */
  cancel() {
    if (!this.job) return;
    this.job.resolve(null);
    this.job = null;
    // the worker is busy with a layout nobody wants: stop it, start afresh next time
    if (this.worker) this.worker.terminate();
    this.worker = null;
  }

  run(dot) {
    this.cancel();
    if (workersRefused) return onMainThread(dot);
    return new Promise((resolve, reject) => {
      const job = { id: ++this.nextId, dot, resolve, reject };
      this.job = job;
      try {
        this.ensureWorker().postMessage({ id: job.id, dot });
      } catch (err) {
        this.refuse(err);
      }
    });
  }

  ensureWorker() {
    if (this.worker) return this.worker;
    const url = URL.createObjectURL(new Blob([WORKER_SOURCE], { type: "text/javascript" }));
    const worker = new Worker(url, { name: "thunderviz-layout" });
    let ready = false;
    const watchdog = setTimeout(() => {
      if (!ready && this.worker === worker) {
        this.refuse(`no answer in ${workerLimits.readyMs} ms`);
      }
    }, workerLimits.readyMs);
    worker.onmessage = (event) => {
      const data = event.data || {};
      if (data.ready) {
        ready = true;
        clearTimeout(watchdog);
        URL.revokeObjectURL(url);
        return;
      }
      const job = this.job;
      if (!job || data.id !== job.id) return; // an answer to a request that was superseded
      this.job = null;
      if (data.error) job.reject(new Error(data.error));
      else job.resolve({ tree: data.tree, ms: data.ms, initMs: data.initMs });
      timings.where = "worker";
    };
    worker.onerror = (event) => {
      // Before it said "ready", the worker could not start (a CSP, an old browser): lay out
      // on the main thread from now on. After, it is a failure of this one layout.
      if (event && event.preventDefault) event.preventDefault();
      clearTimeout(watchdog);
      if (!ready) this.refuse(event && event.message);
      else if (this.job) {
        const job = this.job;
        this.job = null;
        job.reject(new Error((event && event.message) || "layout worker failed"));
      }
    };
    this.worker = worker;
    return worker;
  }

  /** Workers do not work here: finish the pending request on the main thread. */
  refuse(reason) {
    workersRefused = true;
    if (this.worker) this.worker.terminate();
    this.worker = null;
    const job = this.job;
    this.job = null;
    if (reason) console.warn(`thunderviz: layout worker unavailable (${reason}); laying out on the main thread`); // eslint-disable-line no-console
    if (job) onMainThread(job.dot).then(job.resolve, job.reject);
  }
}

/** The same engine, imported into this thread (node tests; pages that refuse workers). */
async function onMainThread(dot) {
  if (!mainThreadEngine) {
    mainThreadEngine = importEngine();
    mainThreadEngine.catch(() => (mainThreadEngine = null));
  }
  const engine = await mainThreadEngine;
  const result = await engine.layout(dot);
  timings.where = "main";
  return result;
}

async function importEngine() {
  const urls = [];
  if (typeof Blob !== "undefined" && typeof URL.createObjectURL === "function") {
    urls.push(() => URL.createObjectURL(new Blob([WORKER_SOURCE], { type: "text/javascript" })));
  }
  urls.push(() => "data:text/javascript," + encodeURIComponent(WORKER_SOURCE)); // node has no blob: imports
  let lastError = null;
  for (const make of urls) {
    try {
      await import(/* webpackIgnore: true */ make()); // runs the script: it leaves its engine here
      if (globalThis.thundervizLayoutEngine) return globalThis.thundervizLayoutEngine;
    } catch (err) {
      lastError = err;
    }
  }
  throw lastError || new Error("the layout engine did not load");
}
