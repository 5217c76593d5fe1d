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

/**
 * After a frame has been rendered (rAF runs just before rendering; the timeout after it).
 * Resolves with the ms from the rAF callback to the timeout: about what rendering that frame
 * (style, layout, paint) took. Without requestAnimationFrame (node tests) the next task, 0 ms.
 * @returns {Promise<number>}
 */
export const afterNextPaint = () =>
  new Promise((resolve) => {
    if (typeof requestAnimationFrame !== "function") {
      setTimeout(() => resolve(0), 0);
      return;
    }
    requestAnimationFrame(() => {
      const start = performance.now();
      setTimeout(() => resolve(performance.now() - start), 0);
    });
  });

/** Bounds of an adapted slice (elements): the smallest still fills a frame usefully. */
const MIN_SLICE = 200;
const MAX_SLICE = 6400;

/**
 * The next slice's size from what rendering the last frame took (panes take turns, so that
 * frame may have drawn another pane's slice, of about the same size): scaled so that it would
 * take `targetMs`, at most three times as big as the last. Frames come at the display's rate,
 * so each one saved is 16 ms or more; an idle machine draws a backward of 370 nodes in two or
 * three frames, a loaded one keeps each frame short.
 */
export function nextSliceSize(size, renderMs, targetMs) {
  const scaled = Math.floor((size * targetMs) / Math.max(renderMs, 1));
  return Math.max(MIN_SLICE, Math.min(MAX_SLICE, 3 * size, scaled));
}

// Frames are shared by every pane on the page: a slice waits for the frame after the
// previous slice of any pane, so two panes drawn at once never render in the same frame.
// Geometry reads take a turn too (a pane settling, the overview): after the frame, but
// before the next slice goes in, so they find the layout done rather than force one.
let frameQueue = /** @type {Promise<any>} */ (Promise.resolve());
export const nextFrameTurn = () => (frameQueue = frameQueue.then(afterNextPaint));

/**
 * Put a built SVG in `container` a slice at a time, one slice per rendered frame.
 *
 * What holds the page is not building the elements but the frame that first renders them
 * (style, layout, paint, commit of every element: 50-170 ms for a few hundred nodes on a
 * loaded machine). The graph's top-level groups (clusters, nodes, edges: Graphviz writes
 * clusters first) go in `maxElements` elements at a time, so each frame renders a part.
 * @param {Element} container its children are replaced by `svg`
 * @param {SVGSVGElement} svg built off-document (buildSvg), tagged and marked
 * @param {{maxElements?: number, targetFrameMs?: number, cancelled?: () => boolean, waitFn?: () => Promise<any>, afterSlice?: () => void}} [options]
 *   maxElements: the first slice's size, and every slice's without targetFrameMs;
 *   targetFrameMs: adapt each next slice to the render time waitFn resolves with (nextSliceSize);
 *   afterSlice: called once a slice has been rendered, but the last (graphview.js scrolls as
 *   soon as what it anchors on is drawn; reading geometry then costs no layout)
 * @returns {Promise<boolean>} false when cancelled() said so between slices (the rest is not inserted)
 */
export async function insertInSlices(container, svg, { maxElements = 800, targetFrameMs = 0, cancelled = () => false, waitFn = nextFrameTurn, afterSlice = () => {} } = {}) {
  const graph = [...svg.children].find((el) => el.localName === "g");
  const pending = graph ? [...graph.children].filter((el) => el.localName === "g") : [];
  for (const el of pending) el.remove();
  // the first slice waits its turn too: another pane's slice may be in this frame
  await waitFn();
  if (cancelled()) return false;
  while (container.firstChild) container.removeChild(container.firstChild);
  container.appendChild(svg);
  let i = 0;
  let limit = maxElements;
  while (i < pending.length) {
    const slice = svg.ownerDocument.createDocumentFragment();
    let size = 0;
    while (i < pending.length && (size === 0 || size < limit)) {
      size += 1 + pending[i].querySelectorAll("*").length;
      slice.appendChild(pending[i++]);
    }
    graph.appendChild(slice);
    if (i < pending.length) {
      const renderMs = await waitFn();
      if (targetFrameMs > 0 && typeof renderMs === "number") limit = nextSliceSize(size, renderMs, targetFrameMs);
      if (cancelled()) return false;
      afterSlice(); // after the frame: geometry reads find the layout done
    }
  }
  return true;
}
