// Graph layout with Graphviz compiled to WebAssembly (@hpcc-js/wasm-graphviz). The wasm is
// inlined in the package's JS, so the bundle needs no network and works from file:// pages.
// One instance is shared by every view on the page; results are cached by DOT text, so
// collapsing back to a layout seen before is instant.

import { Graphviz } from "@hpcc-js/wasm-graphviz";

let loading = null;
const CACHE_SIZE = 24;
const cache = new Map();

/** Timings of the most recent work, in milliseconds (shown in the DOM for tests/benchmarks). */
export const timings = { init: null, lastLayout: null, lastNodes: 0 };

/** Load (once) the wasm Graphviz. */
export function loadGraphviz() {
  if (!loading) {
    const start = now();
    loading = Graphviz.load().then((graphviz) => {
      timings.init = now() - start;
      return graphviz;
    });
    // A failed load should not poison the page forever: allow a retry.
    loading.catch(() => {
      loading = null;
    });
  }
  return loading;
}

/**
 * Lay `dot` out and return SVG text.
 * @param {string} dot
 * @returns {Promise<{svg: string, ms: number, cached: boolean}>}
 */
export async function layoutDot(dot) {
  const hit = cache.get(dot);
  if (hit !== undefined) {
    // refresh its place in the LRU order
    cache.delete(dot);
    cache.set(dot, hit);
    return { svg: hit, ms: 0, cached: true };
  }
  const graphviz = await loadGraphviz();
  const start = now();
  const svg = graphviz.layout(dot, "svg", "dot");
  const ms = now() - start;
  timings.lastLayout = ms;
  cache.set(dot, svg);
  if (cache.size > CACHE_SIZE) cache.delete(cache.keys().next().value);
  return { svg, ms, cached: false };
}

const now = () => (globalThis.performance ? globalThis.performance.now() : Date.now());
