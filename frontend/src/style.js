// The viewer's CSS. Every rule is scoped under .tv-root so the widget never restyles
// JupyterLab; colours come from JupyterLab's theme variables when they exist, with light
// and dark fallbacks for standalone pages. Graph highlights are CSS classes that override
// SVG presentation attributes, so clearing a highlight never touches `fill` / `stroke`.

import palette from "../../thunderviz/viz/palette.json" with { type: "json" };

// The graph's light colours and the key's are palette.json's, the one set the static
// pictures (thunderviz/viz/static.py) draw too.
const { nodes: N, clusters: C, edge: E } = palette;

// Dark palette; base colours still defer to JupyterLab's variables when they are defined.
const DARK_VARS = `
  --tv-bg: var(--jp-layout-color0, #0d1117); --tv-panel: var(--jp-layout-color1, #161b22);
  --tv-panel-2: var(--jp-layout-color2, #21262d); --tv-fg: var(--jp-ui-font-color0, #e6edf3);
  --tv-muted: var(--jp-ui-font-color2, #8d96a0); --tv-border: var(--jp-border-color1, #30363d);
  --tv-accent: var(--jp-brand-color1, #4493f8);
  --tv-op-fill: #1d2b45; --tv-op-stroke: #6f93d6;
  --tv-prim-fill: #262b31; --tv-prim-stroke: #7d8590;
  --tv-module-fill: #3a2d12; --tv-module-stroke: #d29922;
  --tv-input-fill: #183425; --tv-input-stroke: #4fae73;
  --tv-output-fill: #3d1d1d; --tv-output-stroke: #e06c6c;
  --tv-edge: #7d8590; --tv-edge-label: #9aa4ae;
  --tv-cluster-module: #8a7440; --tv-cluster-op: #51688f;`;

export const CSS = String.raw`
.tv-root {
  --tv-bg: var(--jp-layout-color0, #ffffff);
  --tv-panel: var(--jp-layout-color1, #f6f8fa);
  --tv-panel-2: var(--jp-layout-color2, #eaeef2);
  --tv-fg: var(--jp-ui-font-color0, #1f2328);
  --tv-muted: var(--jp-ui-font-color2, #656d76);
  --tv-border: var(--jp-border-color1, #d0d7de);
  --tv-accent: var(--jp-brand-color1, #0969da);
  --tv-mono: var(--jp-code-font-family, ui-monospace, SFMono-Regular, Menlo, Consolas, monospace);
  --tv-sans: var(--jp-ui-font-family, system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif);
  --tv-select: #f59e0b;
  --tv-select-bg: rgba(245, 158, 11, 0.22);
  --tv-highlight: #0ea5e9;
  --tv-highlight-bg: rgba(14, 165, 233, 0.16);
  --tv-current: #e11d48;
  --tv-current-bg: rgba(225, 29, 72, 0.16);
  --tv-ledger-born: #c026d3; --tv-ledger-born-bg: rgba(192, 38, 211, 0.18);
  --tv-ledger-healed: #15803d; --tv-ledger-propagated: #b45309;
  --tv-op-fill: ${N.op.fill}; --tv-op-stroke: ${N.op.line};
  --tv-prim-fill: ${N.prim.fill}; --tv-prim-stroke: ${N.prim.line};
  --tv-module-fill: ${N.module.fill}; --tv-module-stroke: ${N.module.line};
  --tv-input-fill: ${N.input.fill}; --tv-input-stroke: ${N.input.line};
  --tv-output-fill: ${N.output.fill}; --tv-output-stroke: ${N.output.line};
  --tv-edge: ${E.line}; --tv-edge-label: ${E.text};
  --tv-cluster-module: ${C.module.line}; --tv-cluster-op: ${C.op.line};
  --tv-removed-bg: rgba(248, 81, 73, 0.18); --tv-inserted-bg: rgba(46, 160, 67, 0.2);
  --tv-height: 640px;
  color: var(--tv-fg);
  background: var(--tv-bg);
  font-family: var(--tv-sans);
  font-size: 13px;
  line-height: 1.35;
  border: 1px solid var(--tv-border);
  border-radius: 6px;
  box-sizing: border-box;
  display: flex;
  flex-direction: column;
  height: var(--tv-height);
  overflow: hidden;
  position: relative;
  resize: vertical; /* drag the bottom-right corner: the notebook's height is the user's */
  min-height: 320px;
}
/* dark: JupyterLab's dark theme, an explicit .tv-theme-dark, or a dark OS outside JupyterLab */
body[data-jp-theme-light="false"] .tv-root, .tv-root.tv-theme-dark { ${DARK_VARS} }
@media (prefers-color-scheme: dark) {
  body:not([data-jp-theme-light]) .tv-root:not(.tv-theme-light) { ${DARK_VARS} }
}
.tv-root *, .tv-root *::before, .tv-root *::after { box-sizing: border-box; }
.tv-root [hidden] { display: none !important; }
.tv-root button, .tv-root select, .tv-root input { font: inherit; color: inherit; }
.tv-root button {
  background: var(--tv-panel); border: 1px solid var(--tv-border); border-radius: 4px;
  padding: 2px 8px; cursor: pointer; line-height: 1.4;
}
.tv-root button:hover:not(:disabled) { border-color: var(--tv-accent); }
.tv-root button:disabled { opacity: 0.45; cursor: default; }
.tv-root select, .tv-root input[type="number"] {
  background: var(--tv-bg); border: 1px solid var(--tv-border); border-radius: 4px; padding: 1px 4px;
}
.tv-root code, .tv-root pre { font-family: var(--tv-mono); font-size: 12px; }
.tv-root pre { margin: 0; white-space: pre-wrap; word-break: break-word; }

/* header: title, tabs */
.tv-root .tv-header {
  display: flex; align-items: center; gap: 8px; padding: 4px 8px;
  border-bottom: 1px solid var(--tv-border); background: var(--tv-panel); flex: 0 0 auto; flex-wrap: wrap;
}
.tv-root .tv-title { font-weight: 600; margin-right: 8px; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; max-width: 30%; }
.tv-root .tv-tabs { display: flex; gap: 2px; flex-wrap: wrap; }
.tv-root .tv-search { position: relative; margin-left: auto; flex: 0 1 320px; min-width: 160px; }
.tv-root .tv-search input { width: 100%; box-sizing: border-box; font: inherit; padding: 2px 6px; border: 1px solid var(--tv-border); border-radius: 4px; background: var(--tv-bg); color: var(--tv-fg); }
.tv-root .tv-search-results { position: absolute; right: 0; top: 100%; z-index: 20; width: min(560px, 90vw); max-height: 320px; overflow: auto; margin: 2px 0 0; padding: 2px 0; list-style: none; background: var(--tv-bg); border: 1px solid var(--tv-border); border-radius: 4px; box-shadow: 0 4px 12px rgba(0,0,0,0.18); }
.tv-root .tv-search-results li { display: flex; gap: 8px; padding: 2px 8px; cursor: pointer; white-space: nowrap; }
.tv-root .tv-search-results li.tv-active { background: var(--tv-highlight-bg, rgba(80,130,220,0.15)); }
.tv-root .tv-search-kind { color: var(--tv-muted); min-width: 48px; }
.tv-root .tv-search-detail { color: var(--tv-muted); overflow: hidden; text-overflow: ellipsis; }
.tv-root .tv-graph-canvas g.node:focus { outline: none; }
.tv-root .tv-graph-canvas g.node:focus-visible > path, .tv-root .tv-graph-canvas g.node:focus-visible > polygon, .tv-root .tv-graph-canvas g.node:focus-visible > ellipse { stroke-width: 3px; }
.tv-root .tv-tabs button { border-color: transparent; background: transparent; border-radius: 4px 4px 0 0; }
.tv-root .tv-tabs button.tv-active { border-color: var(--tv-border); border-bottom-color: var(--tv-bg); background: var(--tv-bg); font-weight: 600; }
.tv-root .tv-body { flex: 1 1 auto; min-height: 0; position: relative; }
.tv-root .tv-panel-tab { position: absolute; inset: 0; display: grid; gap: 0; min-height: 0; }
.tv-root .tv-layout-trace { grid-template-columns: minmax(0, 3fr) minmax(0, 2fr) minmax(260px, 1.4fr); }
.tv-root .tv-layout-fwdbwd { grid-template-columns: minmax(0, 1fr) minmax(0, 1fr) minmax(260px, 0.8fr); }
.tv-root .tv-layout-saved { grid-template-columns: minmax(0, 2.2fr) minmax(260px, 1fr); }
.tv-root .tv-layout-transforms { grid-template-columns: minmax(0, 1.2fr) minmax(0, 1fr); grid-template-rows: auto minmax(0, 1fr); }
.tv-root .tv-col { min-width: 0; min-height: 0; display: flex; flex-direction: column; border-right: 1px solid var(--tv-border); }
.tv-root .tv-col:last-child { border-right: none; }
.tv-root .tv-side { overflow: auto; background: var(--tv-panel); }
.tv-root .tv-error {
  margin: 12px; padding: 10px 12px; border: 1px solid #d1242f; border-radius: 6px;
  background: rgba(209, 36, 47, 0.08); color: var(--tv-fg); white-space: pre-wrap;
}
.tv-root .tv-error strong { color: #d1242f; }
.tv-root .tv-message {
  padding: 3px 8px; font-size: 12px; background: rgba(245, 158, 11, 0.15); color: var(--tv-fg);
  border-bottom: 1px solid var(--tv-border);
}
.tv-root .tv-message:empty { display: none; }
.tv-root .tv-muted { color: var(--tv-muted); }
.tv-root .tv-link { justify-self: start; text-align: left; color: var(--tv-accent); cursor: pointer; text-decoration: none; background: none; border: none; padding: 0; font-family: var(--tv-mono); font-size: 12px; }
.tv-root .tv-link:hover { text-decoration: underline; }

/* graph panes */
.tv-root .tv-graph-pane { flex: 1 1 auto; min-height: 0; display: flex; flex-direction: column; position: relative; }
.tv-root .tv-toolbar { display: flex; align-items: center; gap: 4px; padding: 3px 6px; border-bottom: 1px solid var(--tv-border); flex-wrap: wrap; font-size: 12px; }
.tv-root .tv-toolbar .tv-pane-title { font-weight: 600; margin-right: auto; }
.tv-root .tv-toolbar button { padding: 0 6px; font-size: 12px; }
.tv-root .tv-toolbar label { display: inline-flex; align-items: center; gap: 3px; cursor: pointer; }
.tv-root .tv-graph-canvas { flex: 1 1 auto; min-height: 0; overflow: auto; cursor: grab; background: var(--tv-bg); }
.tv-root .tv-graph-canvas.tv-dragging { cursor: grabbing; user-select: none; }
.tv-root .tv-graph-canvas svg { display: block; margin: 0 auto; }
.tv-root .tv-busy { position: absolute; right: 8px; top: 34px; font-size: 11px; color: var(--tv-muted); pointer-events: none; }
.tv-root .tv-graph-canvas text { fill: var(--tv-fg); }
.tv-root .tv-graph-canvas g.edge text { fill: var(--tv-edge-label); }
.tv-root .tv-graph-canvas g.cluster text { fill: var(--tv-muted); }
.tv-root .tv-graph-canvas g.edge path { stroke: var(--tv-edge); }
.tv-root .tv-graph-canvas g.edge polygon { stroke: var(--tv-edge); fill: var(--tv-edge); }
.tv-root .tv-graph-canvas g.node { cursor: pointer; }
.tv-root .tv-graph-canvas g.node.tv-n-op > :is(polygon, path, ellipse) { fill: var(--tv-op-fill); stroke: var(--tv-op-stroke); }
.tv-root .tv-graph-canvas g.node.tv-n-prim > :is(polygon, path, ellipse) { fill: var(--tv-prim-fill); stroke: var(--tv-prim-stroke); }
.tv-root .tv-graph-canvas g.node.tv-n-module > :is(polygon, path, ellipse) { fill: var(--tv-module-fill); stroke: var(--tv-module-stroke); }
.tv-root .tv-graph-canvas g.node.tv-n-module > polyline { stroke: var(--tv-module-stroke); }
.tv-root .tv-graph-canvas g.node:is(.tv-n-input, .tv-n-inputs) > :is(polygon, path, ellipse) { fill: var(--tv-input-fill); stroke: var(--tv-input-stroke); }
.tv-root .tv-graph-canvas g.node.tv-n-output > :is(polygon, path, ellipse) { fill: var(--tv-output-fill); stroke: var(--tv-output-stroke); }
.tv-root .tv-graph-canvas g.cluster.tv-c-module > :is(polygon, path) { stroke: var(--tv-cluster-module); fill: none; }
.tv-root .tv-graph-canvas g.cluster.tv-c-op > :is(polygon, path) { stroke: var(--tv-cluster-op); fill: none; }
.tv-root .tv-graph-canvas .tv-toggle { cursor: pointer; fill: var(--tv-accent); font-weight: 700; }
.tv-root .tv-graph-canvas g.cluster > text { cursor: pointer; }
.tv-root .tv-graph-canvas g.node:hover > :is(polygon, path, ellipse) { stroke-width: 2px; }
.tv-root .tv-graph-canvas g.tv-highlight > :is(polygon, path, ellipse) { stroke: var(--tv-highlight) !important; stroke-width: 2.5px !important; }
.tv-root .tv-graph-canvas g.node.tv-highlight > :is(polygon, path, ellipse):first-of-type { fill: var(--tv-highlight-bg); }
.tv-root .tv-graph-canvas g.edge.tv-highlight path { stroke: var(--tv-highlight) !important; stroke-width: 2px; }
.tv-root .tv-graph-canvas g.tv-current-step > :is(polygon, path, ellipse) { stroke: var(--tv-current) !important; stroke-width: 3px !important; }
.tv-root .tv-graph-canvas g.tv-selected > :is(polygon, path, ellipse) { stroke: var(--tv-select) !important; stroke-width: 3px !important; }
.tv-root .tv-graph-canvas g.node.tv-selected > :is(polygon, path, ellipse):first-of-type { fill: var(--tv-select-bg); }
.tv-root .tv-graph-canvas g.edge.tv-selected path { stroke: var(--tv-select) !important; stroke-width: 2.5px; }
/* NaN/Inf ledger: a dashed outline in its own colours, drawn over grad-flow's inline styles (selection and
   current step keep theirs); born wins */
.tv-root .tv-graph-canvas g.tv-ledger-propagated:not(.tv-selected, .tv-current-step) > :is(polygon, path, ellipse):first-of-type { stroke: var(--tv-ledger-propagated) !important; stroke-width: 2.5px !important; stroke-dasharray: 2 2 !important; }
.tv-root .tv-graph-canvas g.tv-ledger-healed:not(.tv-selected, .tv-current-step) > :is(polygon, path, ellipse):first-of-type { stroke: var(--tv-ledger-healed) !important; stroke-width: 3px !important; stroke-dasharray: 6 3 !important; }
.tv-root .tv-graph-canvas g.tv-ledger-born:not(.tv-selected, .tv-current-step) > :is(polygon, path, ellipse):first-of-type { stroke: var(--tv-ledger-born) !important; stroke-width: 3px !important; stroke-dasharray: 6 3 !important; fill: var(--tv-ledger-born-bg) !important; }
.tv-root .tv-graph-canvas text.tv-norm-label { fill: var(--tv-fg); font-family: var(--tv-mono); }
.tv-root .tv-menu { position: fixed; z-index: 30; display: grid; gap: 2px; min-width: 180px; max-width: 320px; padding: 6px; background: var(--tv-bg); border: 1px solid var(--tv-border); border-radius: 4px; box-shadow: 0 4px 12px rgba(0,0,0,0.2); font-size: 12px; }
.tv-root .tv-menu[hidden] { display: none; }
.tv-root .tv-menu button { text-align: left; }
.tv-root .tv-menu-title { font-weight: 600; overflow-wrap: anywhere; }
.tv-root .tv-menu-note { color: var(--tv-muted); }
/* the grad-flow legend sits below the graph, in the pane's flow: it never covers nodes */
.tv-root .tv-legend {
  flex: 0 0 auto; background: var(--tv-panel); border-top: 1px solid var(--tv-border);
  padding: 3px 8px; font-size: 11px;
}
.tv-root .tv-key { position: relative; font-size: 12px; }
.tv-root .tv-key summary { cursor: pointer; padding: 0 4px; }
.tv-root .tv-key-items { position: absolute; right: 0; top: 100%; z-index: 15; width: 300px; background: var(--tv-bg); border: 1px solid var(--tv-border); border-radius: 4px; padding: 6px 8px; box-shadow: 0 4px 12px rgba(0,0,0,0.18); display: grid; gap: 3px; }
.tv-root .tv-key-items > div { display: flex; align-items: center; gap: 6px; }
.tv-root .tv-k { display: inline-block; width: 22px; height: 12px; border: 1.5px solid; border-radius: 3px; flex: 0 0 auto; }
.tv-root .tv-k-op { background: ${N.op.fill}; border-color: ${N.op.line}; }
.tv-root .tv-k-prim { background: ${N.prim.fill}; border-color: ${N.prim.line}; }
.tv-root .tv-k-module { background: ${N.module.fill}; border-color: ${N.module.line}; border-radius: 0; box-shadow: 2px 2px 0 ${N.module.line}; }
.tv-root .tv-k-cluster { background: transparent; border-color: ${C.module.line}; }
.tv-root .tv-k-input { background: ${N.input.fill}; border-color: ${N.input.line}; border-radius: 50%; }
.tv-root .tv-k-output { background: ${N.output.fill}; border-color: ${N.output.line}; border-radius: 50%; }
.tv-root .tv-k-saved { background: ${N.saved.fill}; border-color: ${N.saved.line}; border-radius: 0 5px 0 0; }
.tv-root .tv-k-highlight { background: var(--tv-highlight-bg); border-color: var(--tv-highlight); }
.tv-root .tv-k-selected { background: var(--tv-select-bg); border-color: var(--tv-select); }
.tv-root .tv-k-current { border-color: var(--tv-current); }
.tv-root .tv-k-ledger-propagated { border: 2px dotted var(--tv-ledger-propagated); }
.tv-root .tv-k-ledger-healed { border: 2px dashed var(--tv-ledger-healed); }
.tv-root .tv-k-ledger-born { border: 2px dashed var(--tv-ledger-born); background: var(--tv-ledger-born-bg); }
.tv-root .tv-k-edge { font-size: 10px; color: var(--tv-muted); min-width: 22px; }
.tv-root .tv-legend-bar { height: 8px; border-radius: 2px; margin: 2px 0; }
.tv-root .tv-legend-scale { display: flex; justify-content: space-between; }
.tv-root .tv-legend-items { display: flex; flex-wrap: wrap; gap: 2px 8px; margin-top: 3px; }
.tv-root .tv-swatch { display: inline-block; width: 14px; height: 0; border-top-width: 3px; border-top-style: solid; vertical-align: middle; margin-right: 3px; }

/* trace text */
.tv-root .tv-trace-text { flex: 1 1 auto; min-height: 0; overflow: auto; font-family: var(--tv-mono); font-size: 12px; padding: 4px 0; background: var(--tv-bg); }
.tv-root .tv-line { display: flex; white-space: pre; cursor: pointer; padding-right: 8px; min-width: max-content; }
.tv-root .tv-line:hover { background: var(--tv-panel); }
.tv-root .tv-lineno { flex: 0 0 3.5em; text-align: right; padding-right: 10px; color: var(--tv-muted); user-select: none; }
.tv-root .tv-line.tv-comment .tv-code { color: var(--tv-muted); }
.tv-root .tv-line.tv-highlight { background: var(--tv-highlight-bg); }
.tv-root .tv-line.tv-current-step { background: var(--tv-current-bg); box-shadow: inset 3px 0 var(--tv-current); }
.tv-root .tv-line.tv-selected { background: var(--tv-select-bg); box-shadow: inset 3px 0 var(--tv-select); }

/* details */
.tv-root .tv-details { padding: 8px 10px; }
.tv-root h3 { margin: 0 0 2px; font-size: 14px; word-break: break-all; }
.tv-root h4 { margin: 10px 0 3px; font-size: 11px; text-transform: uppercase; letter-spacing: 0.04em; color: var(--tv-muted); }
.tv-root .tv-kv { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 1px 10px; }
.tv-root .tv-kv > :nth-child(odd) { color: var(--tv-muted); }
.tv-root .tv-kv > * { word-break: break-word; }
.tv-root .tv-badge { display: inline-block; padding: 0 5px; border-radius: 8px; font-size: 11px; background: var(--tv-panel-2); margin-right: 3px; }
.tv-root .tv-badge.tv-bad { background: rgba(209, 36, 47, 0.18); color: #d1242f; }
.tv-root .tv-code-block { background: var(--tv-bg); border: 1px solid var(--tv-border); border-radius: 4px; padding: 3px 0; overflow-x: auto; }
.tv-root .tv-code-block > div { white-space: pre; padding: 0 6px; font-family: var(--tv-mono); font-size: 12px; min-width: max-content; }
.tv-root .tv-code-block > div.tv-current-line { background: var(--tv-select-bg); }
.tv-root .tv-code-block .tv-lineno { display: inline-block; width: 3em; padding-right: 8px; }
.tv-root table.tv-table { border-collapse: collapse; width: 100%; font-size: 12px; }
/* a table wider than its column scrolls sideways instead of being cut at the pane's edge */
.tv-root .tv-side table.tv-table, .tv-root .tv-steps table { display: block; max-width: 100%; overflow-x: auto; }
.tv-root .tv-source-path { overflow-wrap: anywhere; }
.tv-root .tv-minimap { position: absolute; right: 10px; bottom: 10px; z-index: 5; background: var(--tv-panel); border: 1px solid var(--tv-border); border-radius: 3px; opacity: 0.92; cursor: crosshair; box-shadow: 0 1px 4px rgba(0,0,0,0.15); }
.tv-root .tv-minimap[hidden] { display: none; }
.tv-root .tv-note { padding: 4px 10px; font-size: 12px; background: var(--tv-panel); border-bottom: 1px solid var(--tv-border); color: var(--tv-muted); }
.tv-root .tv-loading { padding: 12px; color: var(--tv-muted); }
.tv-root table.tv-table th { text-align: left; color: var(--tv-muted); font-weight: 600; border-bottom: 1px solid var(--tv-border); padding: 2px 6px; position: sticky; top: 0; background: var(--tv-panel); }
.tv-root table.tv-table td { padding: 2px 6px; border-bottom: 1px solid var(--tv-border); vertical-align: top; }
.tv-root table.tv-table td.tv-num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.tv-root table.tv-table tr.tv-row { cursor: pointer; }
.tv-root table.tv-table tr.tv-row:hover { background: var(--tv-panel-2); }
.tv-root table.tv-table tr.tv-highlight { background: var(--tv-highlight-bg); }
.tv-root table.tv-table tr.tv-selected { background: var(--tv-select-bg); }
.tv-root table.tv-table tr.tv-current-step { background: var(--tv-current-bg); }
.tv-root .tv-hist { display: block; margin-top: 4px; }
.tv-root .tv-hist rect { fill: var(--tv-accent); }
.tv-root .tv-hist text { fill: var(--tv-muted); font-size: 9px; font-family: var(--tv-sans); }

/* steps */
.tv-root .tv-steps { border-top: 1px solid var(--tv-border); padding: 6px 10px; }
.tv-root .tv-step-buttons { display: flex; gap: 3px; flex-wrap: wrap; }
.tv-root .tv-status { margin: 4px 0; font-weight: 600; font-variant-numeric: tabular-nums; }
.tv-root .tv-status .tv-reason { font-weight: normal; color: var(--tv-muted); margin-left: 6px; }
.tv-root .tv-bp { display: flex; flex-wrap: wrap; gap: 4px 8px; align-items: center; font-size: 12px; margin: 4px 0; }
.tv-root .tv-bp-list { list-style: none; margin: 2px 0; padding: 0; font-size: 12px; }
.tv-root .tv-bp-list li { display: flex; gap: 6px; align-items: center; }
.tv-root .tv-step-list { max-height: 160px; overflow: auto; border: 1px solid var(--tv-border); border-radius: 4px; margin-top: 4px; background: var(--tv-bg); }

/* saved tensors */
.tv-root .tv-saved { overflow: auto; padding: 6px 10px; }
.tv-root .tv-bar { display: inline-block; height: 8px; background: var(--tv-accent); opacity: 0.6; border-radius: 2px; vertical-align: middle; }

/* transforms */
.tv-root .tv-transform-controls { grid-column: 1 / -1; display: flex; gap: 8px; align-items: center; padding: 6px 8px; border-bottom: 1px solid var(--tv-border); flex-wrap: wrap; background: var(--tv-panel); }
.tv-root .tv-transform-controls input[type="range"] { flex: 1 1 160px; min-width: 120px; }
.tv-root .tv-transform-info { font-size: 12px; }
.tv-root .tv-diff { flex: 1 1 auto; overflow: auto; font-family: var(--tv-mono); font-size: 12px; padding: 4px 0; }
.tv-root .tv-diff-line { white-space: pre; padding: 0 8px; min-width: max-content; }
.tv-root .tv-diff-line::before { content: "  "; color: var(--tv-muted); }
.tv-root .tv-diff-removed { background: var(--tv-removed-bg); }
.tv-root .tv-diff-removed::before { content: "- "; }
.tv-root .tv-diff-inserted { background: var(--tv-inserted-bg); }
.tv-root .tv-diff-inserted::before { content: "+ "; }
.tv-root .tv-empty { padding: 16px; color: var(--tv-muted); }
`;

/** Add the stylesheet once inside `root` (inside, so it follows the widget into iframes and shadow roots). */
export function installStyle(root) {
  const style = document.createElement("style");
  style.setAttribute("data-tv-style", "");
  style.textContent = CSS;
  root.appendChild(style);
  return style;
}
