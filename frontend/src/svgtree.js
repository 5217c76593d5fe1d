// The page side of the layout's SVG: elements built from the worker's tree (src/svgread.js
// explains why the page parses no SVG), a slice at a time, with the allow-list checked
// again. Built only with createElementNS / setAttribute / createTextNode.

import { ALLOWED_ELEMENTS, DROPPED_ATTRIBUTES, isSafeAttribute } from "./sanitize.js";

const SVG_NS = "http://www.w3.org/2000/svg";

const defaultYield = () => new Promise((resolve) => setTimeout(resolve, 0));

/**
 * Build SVG elements from a tree in slices of about `sliceMs`, yielding in between, so a
 * big graph never holds the page for long. The allow-list is applied again here.
 * @param {object} tree from svgToTree (src/svgread.js)
 * @param {Document} doc the page's document
 * @param {{sliceMs?: number, yieldFn?: () => Promise<void>, cancelled?: () => boolean}} [options]
 * @returns {Promise<SVGSVGElement | null>} null when cancelled() said so between slices
 */
export async function buildSvg(tree, doc, { sliceMs = 8, yieldFn = defaultYield, cancelled = () => false } = {}) {
  const make = (node) => {
    const el = doc.createElementNS(SVG_NS, node.t);
    for (const [name, value] of Object.entries(node.a)) {
      if (!DROPPED_ATTRIBUTES.has(name) && isSafeAttribute(name, value)) el.setAttribute(name, value);
    }
    return el;
  };
  const clock = () => (globalThis.performance ? performance.now() : Date.now());
  const root = make(tree);
  const work = [[tree, root]];
  let sliceStart = clock();
  let count = 0;
  while (work.length) {
    const [node, el] = work.pop();
    for (const child of node.c) {
      if (typeof child === "string") {
        el.appendChild(doc.createTextNode(child));
      } else if (ALLOWED_ELEMENTS.has(child.t)) {
        const childEl = make(child);
        el.appendChild(childEl);
        if (child.c.length) work.push([child, childEl]);
      }
    }
    if (++count % 64 === 0 && clock() - sliceStart > sliceMs) {
      await yieldFn();
      if (cancelled()) return null;
      sliceStart = clock();
    }
  }
  return root;
}
