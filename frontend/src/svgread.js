// Graphviz's SVG as a plain tree that crosses from the layout worker to the page (this file
// runs in the worker; src/svgtree.js builds the page's elements from the tree).
//
// Why not DOMParser on the page: for a 400-node graph Graphviz writes ~400 KB of SVG, and
// parsing + sanitizing that took 50-160 ms of main-thread time per layout (one long task).
// The worker has no DOM, so it reads the SVG with the small tokenizer below (Graphviz's
// output is regular machine-written XML), applies the same allow-list as sanitize.js, and
// posts the tree; the page builds elements with createElementNS / setAttribute /
// textContent (the allow-list checked again), yielding to the event loop every few ms.
//
// Tree: an element is {t: tag, a: {name: value}, c: [children]}; a text node is a string.

import { ALLOWED_ELEMENTS, DROPPED_ATTRIBUTES, isSafeAttribute } from "./sanitize.js";

/** Elements whose text matters; whitespace between other elements is layout noise. */
const TEXT_PARENTS = new Set(["text", "tspan", "title", "desc"]);
const NAMED_ENTITIES = { amp: "&", lt: "<", gt: ">", quot: '"', apos: "'" };

function decodeEntities(s) {
  if (s.indexOf("&") < 0) return s;
  return s.replace(/&(#x[0-9a-fA-F]{1,6}|#[0-9]{1,7}|amp|lt|gt|quot|apos);/g, (match, e) => {
    if (e[0] !== "#") return NAMED_ENTITIES[e];
    const code = e[1] === "x" ? parseInt(e.slice(2), 16) : parseInt(e.slice(1), 10);
    return code > 0 && code <= 0x10ffff ? String.fromCodePoint(code) : "";
  });
}

const NAME = /[A-Za-z_][\w:.-]*/y;
const ATTRIBUTE = /\s+([A-Za-z_][\w:.-]*)\s*=\s*(?:"([^"]*)"|'([^']*)')/y;
const TAG_END = /\s*(\/?)>/y;

/**
 * Read Graphviz SVG text into a sanitized tree (the root <svg> element).
 * Elements off the allow-list are dropped with everything inside them; unsafe attributes
 * are dropped. Throws on anything that is not well-formed.
 * @param {string} text
 */
export function svgToTree(text) {
  const top = { t: "#document", a: {}, c: [] };
  /** @type {Array<{t: string, a?: Record<string, string>, c?: any[], skip?: boolean}>} */
  const stack = [top]; // open elements; a dropped element is {skip: true}
  let i = 0;
  const fail = (why) => {
    throw new Error(`Graphviz produced SVG that could not be read (${why} at ${i})`);
  };
  while (i < text.length) {
    const lt = text.indexOf("<", i);
    const parent = stack[stack.length - 1];
    const end = lt < 0 ? text.length : lt;
    if (end > i && !parent.skip && TEXT_PARENTS.has(parent.t)) parent.c.push(decodeEntities(text.slice(i, end)));
    if (lt < 0) break;
    i = lt;
    if (text.startsWith("<!--", i)) {
      const close = text.indexOf("-->", i + 4);
      if (close < 0) fail("unclosed comment");
      i = close + 3;
    } else if (text.startsWith("<?", i)) {
      const close = text.indexOf("?>", i + 2);
      if (close < 0) fail("unclosed declaration");
      i = close + 2;
    } else if (text.startsWith("<!", i)) {
      const close = text.indexOf(">", i + 2);
      if (close < 0 || text.slice(i, close).includes("[")) fail("unsupported doctype");
      i = close + 1;
    } else if (text.startsWith("</", i)) {
      const close = text.indexOf(">", i + 2);
      if (close < 0) fail("unclosed end tag");
      const name = text.slice(i + 2, close).trim();
      const open = stack.pop();
      if (stack.length === 0 || open.t !== name) fail(`mismatched </${name}>`);
      i = close + 1;
    } else {
      NAME.lastIndex = i + 1;
      const name = NAME.exec(text);
      if (!name) fail("bad tag");
      i = NAME.lastIndex;
      /** @type {Record<string, string>} */
      const attrs = {};
      for (;;) {
        ATTRIBUTE.lastIndex = i;
        const m = ATTRIBUTE.exec(text);
        if (!m) break;
        const value = decodeEntities(m[2] ?? m[3]);
        if (!DROPPED_ATTRIBUTES.has(m[1]) && isSafeAttribute(m[1], value)) attrs[m[1]] = value;
        i = ATTRIBUTE.lastIndex;
      }
      TAG_END.lastIndex = i;
      const tagEnd = TAG_END.exec(text);
      if (!tagEnd) fail("bad attribute");
      i = TAG_END.lastIndex;
      const keep = !parent.skip && ALLOWED_ELEMENTS.has(name[0]);
      /** @type {{t: string, a?: Record<string, string>, c?: any[], skip?: boolean}} */
      const node = keep ? { t: name[0], a: attrs, c: [] } : { t: name[0], skip: true };
      if (keep) parent.c.push(node);
      if (!tagEnd[1]) stack.push(node);
    }
  }
  if (stack.length !== 1) fail("unclosed element");
  const root = top.c.find((n) => typeof n !== "string");
  if (!root || root.t !== "svg") fail("no <svg> root");
  return root;
}

