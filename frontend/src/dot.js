// DOT generation for a visible graph. Every document string is user-controlled, so it only
// ever appears inside a plain double-quoted label, escaped by escapeDotString; node, cluster
// and edge names are generated ("n0", "cluster_3") and never come from the document.

import palette from "../../thunderviz/viz/palette.json" with { type: "json" };
import { formatBytes } from "./format.js";

/** Short dtype names for edge labels ("float32" -> "f32"). */
const DTYPE_SHORT = {
  float64: "f64", float32: "f32", float16: "f16", bfloat16: "bf16",
  float8_e4m3fn: "f8e4m3", float8_e5m2: "f8e5m2",
  int64: "i64", int32: "i32", int16: "i16", int8: "i8", uint8: "u8", bool: "b8",
  complex64: "c64", complex128: "c128",
};

/** "float32", [4, 16] -> "f32[4,16]". Unknown dtypes are shown as written. */
export function tensorLabel(tensor) {
  if (!tensor) return "?";
  const rawDtype = String(tensor.dtype ?? "?").replace(/^torch\./, "");
  const dtype = DTYPE_SHORT[rawDtype] || rawDtype;
  const shape = Array.isArray(tensor.shape) ? tensor.shape.map(String).join(",") : "?";
  return `${dtype}[${shape}]`;
}

/**
 * Escape text for a double-quoted DOT string used as a plain label.
 * - `\` and `"` are escaped so the string cannot end early or start a Graphviz escape
 *   (`\N`, `\G`, `\l`...);
 * - `&` becomes `&amp;` because Graphviz decodes HTML entities even in plain labels;
 * - newlines become the label line break `\n`, other control characters are dropped.
 * `<` and `>` need nothing: they are only special in HTML-like labels (`label=<...>`),
 * which this module never writes, and Graphviz escapes them in its SVG output.
 */
export function escapeDotString(text) {
  return String(text)
    .replace(/\r\n?/g, "\n")
    // eslint-disable-next-line no-control-regex -- control characters are what it removes
    .replace(/[\u0000-\u0009\u000b-\u001f\u007f]/g, "")
    .replace(/\\/g, "\\\\")
    .replace(/"/g, '\\"')
    .replace(/&/g, "&amp;")
    .replace(/\n/g, "\\n");
}

/** Shorten long labels; the details panel shows the full text. */
export function truncate(text, max = 44, keep = "end") {
  const s = String(text);
  if (s.length <= max) return s;
  return keep === "start" ? "…" + s.slice(s.length - max + 1) : s.slice(0, max - 1) + "…";
}

/** Module path relative to the cluster it is drawn in ("" when it is that module). */
export function relativeModule(module, clusterModule) {
  if (!module || module === clusterModule) return "";
  if (clusterModule && module.startsWith(clusterModule + ".")) return module.slice(clusterModule.length + 1);
  return module;
}

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** "2 params", "1 saved", "→ 3 out": what a node reads or returns without drawn edges. */
function countNotes(node) {
  const notes = [];
  if (node.params && node.params.length) notes.push(plural(node.params.length, "param"));
  if (node.saved && node.saved.length) notes.push(`${node.saved.length} saved`);
  if (node.returns && node.returns.length) notes.push(`→ ${node.returns.length} out`);
  return notes;
}

/** The label lines of a visible node. */
export function nodeLabelLines(node, ti) {
  switch (node.type) {
    case "op": {
      const first = (node.expandable ? "▸ " : "") + truncate(node.label);
      const sub = [truncate(relativeModule(node.module, node.clusterModule), 36, "start")];
      const second = [...sub, ...countNotes(node)].filter(Boolean).join(" · ");
      return second ? [first, second] : [first];
    }
    case "module": {
      const notes = countNotes(node).join(" · ");
      return [`▸ ${truncate(node.label, 40, "start")}`, `(${plural(node.count, "op")}${notes ? " · " + notes : ""})`];
    }
    case "saved": {
      const size = formatBytes(node.bytes || 0);
      if (node.tensors.length > 1) return [`${node.tensors.length} saved`, size];
      return [truncate(node.label, 24), `${tensorLabel(ti && ti.tensors[node.tensors[0]])} · ${size}`];
    }
    default:
      return [truncate(node.label)];
  }
}

// Colours and shapes come from the palette the static pictures share; sizes are the viewer's.
const NODE_SIZE = { input: "height=0.25", inputs: "height=0.25", output: "height=0.25", saved: 'fontsize=8 height=0.2 margin="0.05,0.02"' };
const NODE_STYLE = Object.fromEntries(
  Object.entries(palette.nodes).map(([type, { shape, style, fill, line }]) => {
    const attrs = `shape=${shape} style="${style}" fillcolor="${fill}" color="${line}"`;
    return [type, NODE_SIZE[type] ? `${attrs} ${NODE_SIZE[type]}` : attrs];
  }),
);
const clusterStyle = ({ style, line }) => `style="${style}" color="${line}"`;

function nodeClass(node) {
  const classes = [node.type === "op" && node.isPrim ? "tv-n-prim" : `tv-n-${node.type}`];
  if (node.expandable) classes.push("tv-expandable");
  return classes.join(" ");
}

/**
 * @param {ReturnType<import("./visible.js").buildVisibleGraph>} graph
 * @param {{tensors: Record<string, any>}} ti trace index, for edge labels
 * @param {{labels?: boolean, fast?: boolean, rankdir?: string}} [options]
 *   labels: draw shape/dtype on edges; fast: cheaper layout settings for big graphs
 * @returns {{dot: string, items: Map<string, {type: "node"|"cluster"|"edge", id?: string,
 *            edge?: import("./visible.js").VisibleEdge}>}}
 *   items maps each generated DOT name (what Graphviz writes into <title>) back to the
 *   graph element; edges are keyed "nA->nB".
 */
export function graphToDot(graph, ti, options = {}) {
  const { labels = true, fast = false, rankdir = "TB" } = options;
  const items = new Map();
  const nodeName = new Map();
  graph.nodes.forEach((node, i) => {
    nodeName.set(node.id, `n${i}`);
    items.set(`n${i}`, { type: "node", id: node.id });
  });

  const out = [];
  out.push("digraph G {");
  out.push(
    `graph [rankdir=${rankdir === "LR" ? "LR" : "TB"} nodesep=0.22 ranksep=0.32 fontname="Helvetica" ` +
      `fontsize=10 bgcolor="transparent" labeljust=l${fast ? " nslimit=2 mclimit=0.5" : ""}];`,
  );
  out.push('node [fontname="Helvetica" fontsize=10 height=0.3 margin="0.10,0.03" penwidth=1];');
  out.push(`edge [fontname="Helvetica" fontsize=8 arrowsize=0.6 color="${palette.edge.line}" fontcolor="${palette.edge.text}"];`);

  let clusterCount = 0;
  const writeCluster = (cluster, indent) => {
    for (const id of cluster.nodes) {
      const node = graph.nodeById.get(id);
      const style = NODE_STYLE[node.type === "op" && node.isPrim ? "prim" : node.type];
      const label = nodeLabelLines(node, ti).map(escapeDotString).join("\\n");
      out.push(`${indent}${nodeName.get(id)} [label="${label}" class="${nodeClass(node)}" ${style}];`);
    }
    for (const sub of cluster.clusters) {
      const name = `cluster_${clusterCount++}`;
      items.set(name, { type: "cluster", id: sub.id });
      const kind = sub.type === "module" ? "tv-c-module" : "tv-c-op";
      const style = clusterStyle(sub.type === "module" ? palette.clusters.module : palette.clusters.op);
      const label = escapeDotString(`▾ ${truncate(sub.label, 48, sub.type === "module" ? "start" : "end")}`);
      out.push(`${indent}subgraph ${name} {`);
      out.push(`${indent}  label="${label}" class="${kind}" ${style} fontsize=9 fontcolor="#6e7781";`);
      writeCluster(sub, indent + "  ");
      out.push(`${indent}}`);
    }
  };
  writeCluster(graph.root, "  ");

  for (const edge of graph.edges) {
    const from = nodeName.get(edge.from);
    const to = nodeName.get(edge.to);
    items.set(`${from}->${to}`, { type: "edge", edge });
    let attrs = 'class="tv-e"';
    if (labels) {
      const first = tensorLabel(ti.tensors[edge.tensors[0]]);
      const more = edge.tensors.length > 1 ? ` +${edge.tensors.length - 1}` : "";
      attrs += ` label="${escapeDotString(first + more)}"`;
    }
    out.push(`  ${from} -> ${to} [${attrs}];`);
  }
  out.push("}");
  return { dot: out.join("\n"), items };
}
