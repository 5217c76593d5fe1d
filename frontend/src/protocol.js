// The viewer protocol, browser side: the ids, MIME type and default limits the viewer shares
// with Python. Its twin is thunderviz/viz/protocol.py; tests/viz/test_protocol.py checks that
// the two hold the same values.
//
// Ids: an op is "<trace kind>:<index path>" ("forward:3", "backward:7.0.2"), a module is
// "module:<path>" ("module:" is the root), a tensor is its name.

export const MIME_TYPE = "application/vnd.thunderviz.view+json";
export const MODULE_PREFIX = "module:";

/** Node / selection id of a module: "module:transformer.h.3". */
export const moduleId = (path) => MODULE_PREFIX + path;
export const isModuleId = (id) => typeof id === "string" && id.startsWith(MODULE_PREFIX);
export const modulePathOf = (id) => id.slice(MODULE_PREFIX.length);

/** The id of the op at index `path` (top level first) of a trace: opId("backward", 7, 0) -> "backward:7.0". */
export const opId = (kind, ...path) => `${kind}:${path.join(".")}`;

/**
 * "backward:7.0.2" -> {kind: "backward", path: [7, 0, 2]}; null for a module id or
 * anything else that is not an op id.
 * @param {string} id
 * @returns {{kind: string, path: number[]} | null}
 */
export function parseOpId(id) {
  const colon = typeof id === "string" ? id.indexOf(":") : -1;
  if (colon < 0 || isModuleId(id)) return null;
  const parts = id.slice(colon + 1).split(".");
  if (!parts.every((p) => /^\d+$/.test(p))) return null;
  return { kind: id.slice(0, colon), path: parts.map(Number) };
}

/** "forward:12.0" -> "forward" (the trace kind an op id belongs to). */
export function traceKindOfId(id) {
  const colon = id.indexOf(":");
  return colon > 0 ? id.slice(0, colon) : null;
}

export const DEFAULT_LIMITS = Object.freeze({
  /** above this many visible top-level nodes the default view collapses modules */
  collapseAbove: 40,
  /** never hand more nodes than this to the layout */
  maxNodes: 2000,
  /** more graph inputs than this are drawn as one "inputs (n)" node */
  maxInputNodes: 30,
  /** outputs coming from more nodes than this get no "return" node, only a count */
  maxOutputSources: 8,
});
