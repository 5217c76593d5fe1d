// What a drawn node says: its tooltip, its ▸ / ▾ toggle glyph, and the SVG's natural size.

import { tensorLabel } from "./dot.js";

/** The tooltip (SVG <title>) of a visible node. */
export function nodeTooltip(ti, node) {
  if (node.type === "saved") {
    const lines = node.tensors.slice(0, 12).map((t) => `${t}: ${tensorLabel(ti.tensors[t])}`);
    if (node.tensors.length > 12) lines.push(`… (${node.tensors.length})`);
    return `saved for backward, read here:\n${lines.join("\n")}\nclick: select (shows its producer in the forward)`;
  }
  if (node.type === "op") {
    const op = ti.ops.get(node.opId);
    return `${op.name} (${op.id})${node.module ? `\nmodule: ${node.module}` : ""}${readsAndReturns(node)}` +
      (node.expandable ? "\ndouble-click or ▸ to expand" : "");
  }
  if (node.type === "module") return `${node.module}: ${node.count} ops${readsAndReturns(node)}\ndouble-click or ▸ to expand`;
  if (node.type === "input") return `${node.id}: ${tensorLabel(ti.tensors[node.id])}`;
  if (node.type === "inputs") return node.tensors.join(", ");
  return node.label;
}

/** Tooltip lines for what a node reads or returns without drawn edges. */
function readsAndReturns(node) {
  const lines = [];
  const list = (names) => (names.length > 8 ? `${names.slice(0, 8).join(", ")}, … (${names.length})` : names.join(", "));
  if (node.params && node.params.length) lines.push(`params: ${list(node.params)}`);
  if (node.saved && node.saved.length) lines.push(`saved: ${list(node.saved)}`);
  if (node.returns && node.returns.length) lines.push(`returns: ${list(node.returns)}`);
  return lines.map((l) => "\n" + l).join("");
}

/**
 * Make the leading ▸ / ▾ of a label its own <tspan class="tv-toggle">, so clicking the
 * glyph expands or collapses while clicking the rest of the label selects.
 */
export function splitToggle(text) {
  if (!text) return;
  const content = text.textContent;
  if (!/^[▸▾] /.test(content)) return;
  const ns = text.namespaceURI;
  const glyph = text.ownerDocument.createElementNS(ns, "tspan");
  glyph.setAttribute("class", "tv-toggle");
  glyph.textContent = content[0];
  const rest = text.ownerDocument.createElementNS(ns, "tspan");
  rest.textContent = content.slice(1);
  while (text.firstChild) text.removeChild(text.firstChild);
  text.appendChild(glyph);
  text.appendChild(rest);
}

export function viewBoxSize(svg) {
  const box = (svg.getAttribute("viewBox") || "").split(/[\s,]+/).map(Number);
  if (box.length === 4 && box.every(Number.isFinite)) return { width: box[2], height: box[3] };
  return { width: parseFloat(svg.getAttribute("width")) || 100, height: parseFloat(svg.getAttribute("height")) || 100 };
}
