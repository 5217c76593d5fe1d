// How an op is named to a person: what it is, where in the model, where in the source —
// "linear · blocks.3.mlp.fc · models.py:97" rather than "forward:44"; and a backward op by
// what it is the gradient of: "mm · d linear".

import { traceKindOfId } from "./protocol.js";

/** "models.py:97" from an op's source (the file's last path part), or "". */
export function sourceLine(op) {
  const src = op && op.source;
  if (!src || typeof src.file !== "string" || !Number.isInteger(src.line)) return "";
  return `${src.file.split(/[\\/]/).pop()}:${src.line}`;
}

/** The graph label of a backward op made by a forward op's rule: "mm · d linear". */
export function gradLabel(op, forwardOp) {
  const own = String(op.label || op.name || op.id);
  if (!forwardOp) return own;
  return `${own} · d ${String(forwardOp.label || forwardOp.name || forwardOp.id)}`;
}

/**
 * A one-line description of the op `id` (any trace) for links and status lines; the id
 * itself when the document does not know it.
 * @param {{opById: Map<string, {op: any}>}} index
 */
export function describeOp(index, id) {
  const found = index.opById.get(id);
  if (!found) return String(id);
  const { op } = found;
  const forward = op.fwd_op && op.fwd_op !== op.id ? index.opById.get(op.fwd_op) : undefined;
  const name = traceKindOfId(op.id) === "backward" && forward ? gradLabel(op, forward.op) : String(op.label || op.name || op.id);
  return [name, op.module_path || "", sourceLine(op) || sourceLine(forward && forward.op)].filter(Boolean).join(" · ");
}
