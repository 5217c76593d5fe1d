// Small DOM helpers. Document strings only ever become text nodes or attribute values
// here; nothing in the viewer uses innerHTML.

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * Create an element.
 * @param {string} tag
 * @param {{class?: string, data?: Record<string, string|number>, attrs?: Record<string, string|number|boolean>,
 *          on?: Record<string, (e: Event) => void>, title?: string}} [props]
 * @param {...(Node|string|number|null|undefined|false|Array<any>)} children strings become text nodes
 */
export function h(tag, props = {}, ...children) {
  return build(document.createElement(tag), props, children);
}

/** Same as h() in the SVG namespace. */
export function s(tag, props = {}, ...children) {
  return build(document.createElementNS(SVG_NS, tag), props, children);
}

function build(el, props, children) {
  if (props.class) el.setAttribute("class", props.class);
  if (props.title !== undefined) el.title = String(props.title);
  for (const [key, value] of Object.entries(props.data || {})) el.setAttribute(`data-tv-${key}`, String(value));
  for (const [key, value] of Object.entries(props.attrs || {})) {
    if (value === false || value === null || value === undefined) continue;
    el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const [event, handler] of Object.entries(props.on || {})) el.addEventListener(event, handler);
  append(el, children);
  return el;
}

/** Append children (strings as text, arrays flattened, empty values skipped). */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.appendChild(typeof child === "object" ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Remove all children. */
export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

/** Replace the children of `el`. */
export function replace(el, ...children) {
  clear(el);
  return append(el, children);
}

/**
 * Scroll `target` into view inside `container` only. Element.scrollIntoView would also
 * scroll every scrollable ancestor, i.e. jump the whole notebook.
 */
export function scrollWithin(container, target, { center = true, horizontal = true } = {}) {
  if (!container || !target || !container.isConnected) return;
  const box = container.getBoundingClientRect();
  const rect = target.getBoundingClientRect();
  const inView =
    rect.top >= box.top && rect.bottom <= box.bottom && rect.left >= box.left && rect.right <= box.right;
  if (inView) return;
  const dy = center ? rect.top - box.top - (box.height - rect.height) / 2 : rect.top - box.top;
  const dx = center ? rect.left - box.left - (box.width - rect.width) / 2 : 0;
  container.scrollTop += dy;
  if (horizontal && (rect.left < box.left || rect.right > box.right)) container.scrollLeft += dx;
}
