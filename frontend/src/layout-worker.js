// The layout engine: Graphviz compiled to WebAssembly, laying out DOT text as SVG text.
//
// This file is NOT part of the viewer's module graph. `build.mjs` bundles it on its own
// (wasm included) as a classic script, into a string (`generated/layout-worker-source.js`)
// that `layout.js` starts as a Web Worker from a blob: URL, so a layout of any size never
// blocks the page. A classic worker, not a module one: a page opened from file:// has a
// null origin, and Chromium refuses module workers there. Where a page refuses workers,
// `layout.js` runs the same string on the main thread instead: it then leaves its engine on
// `globalThis.thundervizLayoutEngine` (slower pages, same results).
//
// A worker from a blob: URL needs, under a Content-Security-Policy: `worker-src blob:` (or
// `script-src blob:`, which workers fall back to), and `'wasm-unsafe-eval'` in `script-src`
// for the WebAssembly. The HTML export already needs `script-src blob:` for the viewer itself.

import { Graphviz } from "@hpcc-js/wasm-graphviz";
import { svgToTree } from "./svgread.js";

let loading = null;
let initMs = null;

function load() {
  if (!loading) {
    const start = performance.now();
    loading = Graphviz.load().then((graphviz) => {
      initMs = performance.now() - start;
      return graphviz;
    });
    loading.catch(() => (loading = null));
  }
  return loading;
}

/**
 * Lay out one DOT graph; the SVG comes back as a sanitized tree (src/svgtree.js), which the
 * page turns into elements without parsing anything.
 * @param {string} dot
 * @returns {Promise<{tree: object, ms: number, initMs: number | null}>}
 */
async function layout(dot) {
  const graphviz = await load();
  const start = performance.now();
  const tree = svgToTree(graphviz.layout(dot, "svg", "dot"));
  return { tree, ms: performance.now() - start, initMs };
}

// Inside a worker: answer {id, dot} with {id, tree, ms, initMs} or {id, error}.
// WorkerGlobalScope is read off globalThis: the page's DOM types (and globals) do not name it.
const WorkerScope = /** @type {any} */ (globalThis).WorkerGlobalScope;
const inWorker = WorkerScope !== undefined && globalThis instanceof WorkerScope;
if (inWorker) {
  globalThis.onmessage = async (event) => {
    const { id, dot } = event.data || {};
    try {
      globalThis.postMessage({ id, ...(await layout(String(dot))) });
    } catch (err) {
      globalThis.postMessage({ id, error: String((err && err.message) || err) });
    }
  };
  globalThis.postMessage({ ready: true });
  load(); // start the WebAssembly now: the first request is on its way
} else {
  globalThis.thundervizLayoutEngine = { layout };
}
