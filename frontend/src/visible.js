// Collapse / expand: from a trace index and the set of expanded things (module paths and
// op ids) to the graph that is actually drawn: nodes, nested clusters, tensor edges.
// Only what is visible ever reaches the layout engine, which is what keeps big models usable.

import { modulePrefixes } from "./traceindex.js";
import { maxOf } from "./arrays.js";

import { DEFAULT_LIMITS, isModuleId, moduleId, modulePathOf } from "./protocol.js";

// The ids and limits are owned by protocol.js; re-exported for the modules importing them here.
export { DEFAULT_LIMITS, MODULE_PREFIX, isModuleId, moduleId, modulePathOf } from "./protocol.js";

/**
 * @typedef {object} VisibleNode
 * @property {string} id          op id, "module:<path>", a tensor name, "inputs:<kind>" or "output:<kind>"
 * @property {"op"|"module"|"input"|"inputs"|"output"|"saved"} type
 * @property {string} label
 * @property {string} [opId]
 * @property {string} [module]        module path of the op / the module itself
 * @property {string} [clusterModule] module of the enclosing module cluster ("" at the root)
 * @property {boolean} [expandable]
 * @property {boolean} [isPrim]
 * @property {number} [count]         ops inside a collapsed module
 * @property {string[]} [params]      params/buffers it reads (drawn as a count)
 * @property {string[]} [saved]       saved-for-backward inputs it reads (drawn as a count)
 * @property {string[]} [returns]     trace outputs it produces, when there is no "return" node
 * @property {string[]} [tensors]     tensors of an "inputs" node or a "saved" stub
 * @property {number} [bytes]         a "saved" stub: bytes of its tensors
 * @property {string} [reader]        a "saved" stub: the node that reads it
 *
 * @typedef {object} Cluster
 * @property {string | null} id   "module:<path>" or an expanded op id; null for the root
 * @property {"root"|"module"|"op"} type
 * @property {string} label
 * @property {string[]} nodes
 * @property {Cluster[]} clusters
 *
 * @typedef {{from: string, to: string, tensors: string[]}} VisibleEdge
 */

/** More saved tensors than this read by one node are drawn as one "n saved" stub. */
const STUBS_PER_NODE = 3;

/**
 * Top-level ops that only unpack a container input of the trace (the backward's
 * `saved_for_backward` and `cotangents` tuples). They are not drawn: what they unpack
 * enters the graph where it is read (saved tensors as stubs, cotangents as inputs).
 * @returns {{ops: Set<string>, outputs: Set<string>}}
 */
export function unpackOps(ti) {
  if (ti.unpackCache) return ti.unpackCache;
  const inputs = new Set(ti.inputs);
  const isContainer = (name) => inputs.has(name) && ti.tensors[name] && ti.tensors[name].shape == null;
  const ops = new Set();
  const outputs = new Set();
  for (const op of ti.trace.ops) {
    if (op.parent !== null && op.parent !== undefined) continue;
    const ins = Array.isArray(op.inputs) ? op.inputs : [];
    if (ins.length && ins.every(isContainer)) {
      ops.add(op.id);
      for (const name of op.outputs || []) outputs.add(name);
    }
  }
  ti.unpackCache = { ops, outputs };
  return ti.unpackCache;
}

// A module whose subtree holds a single top-level op is drawn as that op: a box around one
// node, or a "fc1 (1 op)" node, says less than the op itself.
const isTrivialModule = (ti, path) => ti.modules.get(path).total <= 1;

const hasChildren = (ti, id) => (ti.children.get(id) || []).length > 0;

/** Child modules and direct ops of a module, in the order the trace first uses them. */
function moduleEntries(ti, path) {
  const mod = ti.modules.get(path);
  const entries = [
    ...mod.ops.map((op) => ({ pos: ti.position.get(op), op })),
    ...mod.children.map((module) => ({ pos: ti.modules.get(module).first, module })),
  ];
  return entries.sort((a, b) => a.pos - b.pos);
}

/**
 * Build the visible graph.
 * @param {ReturnType<import("./traceindex.js").buildTraceIndex>} ti
 * @param {Set<string>} expanded module paths and op ids that are open
 * @param {Partial<typeof DEFAULT_LIMITS> & {savedInfo?: (name: string) => ({bytes?: number} | undefined), labelOf?: (op: any) => string}} [limits]
 *   savedInfo: the saved-for-backward entry of a graph input, if it is one. A saved tensor
 *   enters the graph as a small stub beside each node that reads it (edges from one source
 *   would cross the whole graph); more than STUBS_PER_NODE at one node become one stub.
 *   labelOf: an op's node label (the backward names what each op is the gradient of).
 */
export function buildVisibleGraph(ti, expanded, limits = {}) {
  const { maxInputNodes, maxOutputSources, savedInfo, labelOf } = { ...DEFAULT_LIMITS, ...limits };
  const unpack = unpackOps(ti);
  /** @type {VisibleNode[]} */
  const nodes = [];
  const nodeById = new Map();
  /** every op id (all levels) -> id of the visible node that stands for it */
  const owner = new Map();
  /** @type {Cluster} */
  const root = { id: null, type: "root", label: "", nodes: [], clusters: [] };

  const clusterOf = new Map(); // visible node id -> the cluster it is drawn in
  const addNode = (cluster, node) => {
    nodes.push(node);
    nodeById.set(node.id, node);
    cluster.nodes.push(node.id);
    clusterOf.set(node.id, cluster);
  };

  const emitOp = (cluster, opId, clusterModule) => {
    const op = ti.ops.get(opId);
    if (hasChildren(ti, opId) && expanded.has(opId)) {
      const sub = { id: opId, type: "op", label: op.label || op.name || opId, nodes: [], clusters: [] };
      cluster.clusters.push(sub);
      for (const child of ti.children.get(opId)) emitOp(sub, child, clusterModule);
      return;
    }
    addNode(cluster, {
      id: opId,
      type: "op",
      opId,
      label: labelOf ? labelOf(op) : String(op.label || op.name || opId),
      module: ti.moduleOfAny(opId),
      clusterModule,
      expandable: hasChildren(ti, opId),
      isPrim: op.is_prim === true,
      params: [],
    });
    for (const id of ti.descendants(opId)) owner.set(id, opId);
  };

  const emitModule = (cluster, path) => {
    for (const entry of moduleEntries(ti, path)) {
      if (entry.op && unpack.ops.has(entry.op)) continue; // its outputs enter as inputs / stubs
      if (entry.op) {
        emitOp(cluster, entry.op, path);
      } else if (isTrivialModule(ti, entry.module)) {
        for (const op of ti.moduleTopOps(entry.module)) emitOp(cluster, op, path);
      } else if (expanded.has(entry.module)) {
        const sub = { id: moduleId(entry.module), type: "module", label: entry.module, nodes: [], clusters: [] };
        cluster.clusters.push(sub);
        emitModule(sub, entry.module);
      } else {
        const id = moduleId(entry.module);
        addNode(cluster, {
          id,
          type: "module",
          label: entry.module,
          module: entry.module,
          clusterModule: path,
          count: ti.modules.get(entry.module).total,
          expandable: true,
          params: [],
        });
        for (const top of ti.moduleTopOps(entry.module)) for (const op of ti.descendants(top)) owner.set(op, id);
      }
    }
  };
  emitModule(root, "");

  // An expanded op whose subsymbols do not produce the tensor itself: attach the edge to
  // its last subsymbol, which is where the value leaves the box.
  const resolveOwner = (opId) => {
    let current = opId;
    while (!owner.has(current)) {
      const kids = ti.children.get(current);
      if (!kids || kids.length === 0) return undefined;
      current = kids[kids.length - 1];
    }
    return owner.get(current);
  };

  const edges = new Map();
  const addEdge = (from, to, tensor) => {
    const key = from + "\u0000" + to;
    let edge = edges.get(key);
    if (!edge) edges.set(key, (edge = { from, to, tensors: [] }));
    if (!edge.tensors.includes(tensor)) edge.tensors.push(tensor);
  };

  /** byTensor: saved tensor name -> its stub node ids (a tensor read in several places) */
  const stubsByTensor = new Map();
  const addSavedStubs = (reader, cluster, names) => {
    const list = [...names];
    const bytesOf = (name) => Number((savedInfo(name) || {}).bytes) || 0;
    const groups = list.length > STUBS_PER_NODE ? [list] : list.map((name) => [name]);
    for (const group of groups) {
      const id = `saved:${group.length === 1 ? group[0] : group.length}@${reader.id}`;
      addNode(cluster, {
        id,
        type: "saved",
        label: group.length === 1 ? group[0] : `${group.length} saved`,
        tensors: group,
        bytes: group.reduce((n, name) => n + bytesOf(name), 0),
        reader: reader.id,
      });
      for (const name of group) {
        if (!stubsByTensor.has(name)) stubsByTensor.set(name, []);
        stubsByTensor.get(name).push(id);
      }
      for (const name of group) addEdge(id, reader.id, name);
    }
  };

  const inputNames = new Set(ti.inputs);
  /** graph-input tensor -> consumer node ids, in first-use order */
  const inputUse = new Map();
  const paramSets = new Map();
  const savedSets = new Map();
  const addTo = (sets, id, name) => {
    if (!sets.has(id)) sets.set(id, new Set());
    sets.get(id).add(name);
  };
  for (const op of ti.trace.ops) {
    const to = owner.get(op.id);
    if (to === undefined) continue; // expanded: its subsymbols carry the edges
    for (const name of Array.isArray(op.inputs) ? op.inputs : []) {
      if (typeof name !== "string") continue;
      const tensor = ti.tensors[name];
      if (tensor && tensor.kind === "number") continue;
      if (ti.isParam(name)) {
        addTo(paramSets, to, name);
        continue;
      }
      const producer = ti.producers.get(name);
      if (producer !== undefined && !unpack.ops.has(producer)) {
        const from = resolveOwner(producer);
        if (from !== undefined && from !== to) addEdge(from, to, name);
      } else if (savedInfo && savedInfo(name)) {
        addTo(savedSets, to, name);
      } else if (inputNames.has(name) || unpack.outputs.has(name) || (tensor && tensor.kind === "input")) {
        addTo(inputUse, name, to);
      }
    }
  }
  for (const [id, names] of paramSets) nodeById.get(id).params = [...names];
  for (const [id, names] of savedSets) {
    const reader = nodeById.get(id);
    reader.saved = [...names];
    addSavedStubs(reader, clusterOf.get(id), names);
  }

  // Graph inputs: one node each, or a single node when there are many (a backward trace
  // takes every saved tensor as an input).
  if (inputUse.size > maxInputNodes) {
    const id = "inputs:" + ti.kind;
    addNode(root, { id, type: "inputs", label: `inputs (${inputUse.size})`, tensors: [...inputUse.keys()] });
    for (const [name, consumers] of inputUse) for (const to of consumers) addEdge(id, to, name);
  } else {
    for (const [name, consumers] of inputUse) {
      addNode(root, { id: name, type: "input", label: name });
      for (const to of consumers) addEdge(name, to, name);
    }
  }

  // Trace outputs: a "return" node, unless they come from all over the graph (a backward
  // returns a gradient per parameter): then each producer just counts what it returns.
  const outputSources = new Map();
  for (const name of ti.outputs) {
    const from = ti.producers.has(name) ? resolveOwner(ti.producers.get(name)) : undefined;
    if (from !== undefined) addTo(outputSources, from, name);
  }
  if (outputSources.size > maxOutputSources) {
    for (const [from, names] of outputSources) nodeById.get(from).returns = [...names];
  } else if (outputSources.size) {
    const id = "output:" + ti.kind;
    addNode(root, { id, type: "output", label: "return" });
    for (const [from, names] of outputSources) for (const name of names) addEdge(from, id, name);
  }

  // An unpack op is drawn as what it unpacks: its stubs and input nodes.
  const unpackedBy = new Map();
  for (const opId of unpack.ops) {
    const drawn = new Set();
    for (const name of ti.ops.get(opId).outputs || []) {
      for (const stub of stubsByTensor.get(name) || []) drawn.add(stub);
      if (nodeById.has(name)) drawn.add(name);
      else if (inputUse.has(name) && nodeById.has("inputs:" + ti.kind)) drawn.add("inputs:" + ti.kind);
    }
    unpackedBy.set(opId, [...drawn]);
  }

  return { kind: ti.kind, nodes, nodeById, edges: [...edges.values()], root, owner, stubsByTensor, unpackedBy };
}

/** Visible top-level node count, without building the graph (for the default collapse). */
export function countVisible(ti, expanded) {
  const countOp = (id) =>
    hasChildren(ti, id) && expanded.has(id) ? ti.children.get(id).reduce((n, c) => n + countOp(c), 0) : 1;
  const countModule = (path) => {
    let n = 0;
    for (const entry of moduleEntries(ti, path)) {
      if (entry.op) n += countOp(entry.op);
      else if (isTrivialModule(ti, entry.module)) n += ti.moduleTopOps(entry.module).reduce((s, op) => s + countOp(op), 0);
      else n += expanded.has(entry.module) ? countModule(entry.module) : 1;
    }
    return n;
  };
  return countModule("");
}

/**
 * The default view: open the module tree breadth-first, one whole depth at a time, while
 * the visible count stays within `collapseAbove`. Opening a depth all at once keeps sibling
 * blocks alike (12 GPT blocks look the same, not 5 open and 7 shut).
 * @returns {Set<string>} module paths to expand
 */
export function defaultExpanded(ti, limits = {}) {
  const { collapseAbove } = { ...DEFAULT_LIMITS, ...limits };
  const openable = (path) => ti.modules.get(path).children.filter((c) => !isTrivialModule(ti, c));
  let expanded = new Set();
  let frontier = openable("");
  while (frontier.length) {
    const candidate = new Set([...expanded, ...frontier]);
    if (countVisible(ti, candidate) > collapseAbove) break;
    expanded = candidate;
    frontier = frontier.flatMap(openable);
  }
  return expanded;
}

/** How deep an expansion sits: deeper ones add detail, shallower ones structure. */
function expansionDepth(ti, id) {
  if (ti.ops.has(id)) return modulePrefixes(ti.moduleOfAny(id)).length + 1 + ti.depth.get(id);
  return modulePrefixes(id).length;
}

/**
 * Build the visible graph, closing the deepest expansions until it has at most `maxNodes`.
 * @returns {{graph: ReturnType<typeof buildVisibleGraph> | null, expanded: Set<string>,
 *            dropped: string[], count: number}}
 *          graph is null when even the fully collapsed view is too big; count is the node
 *          count of the first (unfitted) attempt.
 */
export function fitVisibleGraph(ti, expanded, limits = {}) {
  const { maxNodes } = { ...DEFAULT_LIMITS, ...limits };
  const relevant = (id) => ti.ops.has(id) || (ti.modules.has(id) && id !== "");
  let current = new Set([...expanded].filter(relevant));
  const dropped = [];
  let count = -1;
  for (;;) {
    const graph = buildVisibleGraph(ti, current, limits);
    if (count < 0) count = graph.nodes.length;
    if (graph.nodes.length <= maxNodes) return { graph, expanded: current, dropped, count };
    if (current.size === 0) return { graph: null, expanded: current, dropped, count };
    const depths = [...current].map((id) => [id, expansionDepth(ti, id)]);
    const deepest = maxOf(depths.map(([, d]) => d));
    for (const [id, d] of depths) {
      if (d === deepest) {
        current.delete(id);
        dropped.push(id);
      }
    }
  }
}

/**
 * Visible nodes that stand for `id` (an op id, a module id, or a tensor name).
 * A hidden op maps to the collapsed node that contains it; an expanded op or module maps to
 * the nodes inside it.
 */
export function nodesFor(graph, ti, id) {
  if (graph.nodeById.has(id)) return [id];
  if (graph.stubsByTensor && graph.stubsByTensor.has(id)) return graph.stubsByTensor.get(id);
  if (graph.unpackedBy && graph.unpackedBy.has(id)) return graph.unpackedBy.get(id);
  const out = new Set();
  if (isModuleId(id)) {
    const path = modulePathOf(id);
    for (const top of ti.moduleTopOps(path)) for (const op of ti.descendants(top)) addOwner(graph, op, out);
  } else if (ti.ops.has(id)) {
    for (const op of ti.descendants(id)) addOwner(graph, op, out);
  }
  return [...out];
}

function addOwner(graph, op, out) {
  const node = graph.owner.get(op);
  if (node !== undefined) out.add(node);
}
