// Turning Graphviz's SVG text into DOM safely. Labels carry user strings; Graphviz escapes
// them, but the SVG is still parsed as untrusted: we keep only the elements and attributes
// Graphviz uses for drawing, which drops <script>, <foreignObject>, <a>, <image>, <style>,
// every on* handler, href / xlink:href and style attributes.

const SVG_NS = "http://www.w3.org/2000/svg";

/** Elements Graphviz's SVG renderer draws with. */
export const ALLOWED_ELEMENTS = new Set([
  "svg", "g", "title", "desc", "polygon", "polyline", "path", "ellipse", "circle", "rect",
  "line", "text", "tspan", "defs", "linearGradient", "radialGradient", "stop",
]);

/** Presentation and geometry attributes; nothing that can load, link or run anything. */
export const ALLOWED_ATTRIBUTES = new Set([
  "id", "class", "transform", "x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "r", "rx", "ry",
  "width", "height", "viewBox", "points", "d", "fill", "fill-opacity", "stroke",
  "stroke-width", "stroke-dasharray", "stroke-opacity", "stroke-linecap", "stroke-linejoin",
  "font-family", "font-size", "font-weight", "font-style", "text-anchor", "text-decoration",
  "xml:space", "opacity", "offset", "stop-color", "stop-opacity", "gradientUnits",
  "gradientTransform", "preserveAspectRatio", "xmlns", "xmlns:xlink", "version",
]);

/** Attributes the page does not need from Graphviz's SVG (ids would repeat across panes; namespaces are implied). */
export const DROPPED_ATTRIBUTES = new Set(["id", "xmlns", "xmlns:xlink", "xml:space"]);

/** Is this attribute safe to keep? `url(...)` is allowed only as a local reference. */
export function isSafeAttribute(name, value) {
  if (!ALLOWED_ATTRIBUTES.has(name)) return false;
  // eslint-disable-next-line no-control-regex -- control characters are what it removes
  const compact = String(value).replace(/[\s\u0000-\u001f]/g, "").toLowerCase();
  if (compact.includes("javascript:") || compact.includes("data:") || compact.includes("expression(")) return false;
  const urls = compact.match(/url\(([^)]*)\)/g) || [];
  return urls.every((u) => /^url\(['"]?#[\w.-]+['"]?\)$/.test(u));
}

/**
 * Remove everything not on the allow lists, in place. Works on any DOM (the browser's, or
 * linkedom in the unit tests). Comments and processing instructions are removed too.
 * @param {Element} element
 */
export function sanitizeTree(element) {
  for (const child of [...element.childNodes]) {
    if (child.nodeType === 3) continue; // text
    const el = /** @type {Element} */ (child); // an element where nodeType is 1
    if (child.nodeType !== 1 || !ALLOWED_ELEMENTS.has(el.localName || child.nodeName)) {
      element.removeChild(child);
      continue;
    }
    sanitizeTree(el);
  }
  for (const attr of [...element.attributes]) {
    if (!isSafeAttribute(attr.name, attr.value)) element.removeAttribute(attr.name);
  }
}

/**
 * Parse Graphviz SVG text into a sanitized <svg> element of `doc` (the page's document).
 * @param {string} text
 * @param {{DOMParser?: any, document?: Document}} [env] injectable for tests
 * @returns {SVGSVGElement}
 */
export function parseSvg(text, env = {}) {
  const Parser = env.DOMParser || globalThis.DOMParser;
  const parsed = new Parser().parseFromString(text, "image/svg+xml");
  const root = parsed.documentElement;
  if (!root || (root.localName || root.nodeName) !== "svg" || parsed.getElementsByTagName("parsererror").length) {
    throw new Error("Graphviz produced SVG that could not be parsed");
  }
  if (root.namespaceURI !== SVG_NS && root.getAttribute("xmlns") !== SVG_NS) throw new Error("Graphviz output is not SVG");
  sanitizeTree(root);
  const target = env.document || globalThis.document;
  return target && target.importNode ? target.importNode(root, true) : root;
}
