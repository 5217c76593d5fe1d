// Merged into @jupyter/builder's Rspack config (package.json: jupyterlab.rspackConfig).
module.exports = {
  // The viewer's chunk carries Graphviz compiled to WebAssembly (~800 KB, inlined by
  // @hpcc-js/wasm-graphviz). It is loaded on first use only (src/viewer.ts: loadViewer),
  // so the size hint would warn about a cost JupyterLab's start-up does not pay.
  performance: { hints: false }
};
