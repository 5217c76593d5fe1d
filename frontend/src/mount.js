// mountViewer: the entry point for static pages (HTML export, the JupyterLab extension).
// It wraps the document in an in-memory model and runs the same render() as the widget.

import { createModel } from "./model.js";
import { render, errorBox } from "./viewer.js";
import { parseDocument } from "./document.js";
import { comparisonOf, mountSideBySide } from "./sidebyside.js";

/**
 * @param {HTMLElement} el where to draw
 * @param {any} doc a view document (object, or its JSON text)
 * @param {{tab?: string, selected?: string, expanded?: string[], current_step?: number,
 *          height?: string|number, theme?: "light"|"dark"|"auto", limits?: object,
 *          onChange?: (name: string, value: any) => void}} [options]
 * @returns {{model: ReturnType<typeof createModel>, destroy: () => void, ready?: Promise<void>}}
 *   ready (one viewer, not a comparison): settles once the document is checked, indexed and
 *   its view built (or its error shown); a big document is read over several tasks
 */
export function mountViewer(el, doc, options = {}) {
  if (!el || typeof el.appendChild !== "function") throw new TypeError("mountViewer: el must be a DOM element");
  // a comparison document (two runs, or ranks): every side in its own viewer, side by side
  const parsed = parseDocument(doc).doc;
  if (comparisonOf(parsed)) return mountSideBySide(el, parsed, options, mountOne);
  return mountOne(el, doc, options);
}

/**
 * The widget's entry point (index.js exports it as `render`): a comparison document shows
 * side by side (static: its sides' selections are not the widget's traits, and a document
 * set later is drawn static too); any other document goes to the viewer's render() unchanged.
 */
export function renderWidget(args) {
  const { model, el, options = {} } = args;
  if (!comparisonOf(parseDocument(model.get("document")).doc)) return render(args);
  let handle = null;
  const build = () => {
    if (handle) handle.destroy();
    handle = mountViewer(el, model.get("document"), options);
  };
  model.on("change:document", build);
  build();
  return () => {
    if (model.off) model.off("change:document", build);
    handle.destroy();
  };
}

/** One document in one viewer. */
function mountOne(el, doc, options) {
  const initial = { document: doc, live: false };
  for (const key of ["tab", "selected", "expanded", "current_step", "highlight"]) {
    if (options[key] !== undefined) initial[key] = options[key];
  }
  const model = createModel(initial);
  if (options.onChange) {
    for (const name of ["selected", "tab", "expanded", "current_step"]) {
      model.on(`change:${name}`, () => options.onChange(name, model.get(name)));
    }
  }
  let cleanup = () => {};
  /** @type {(value?: any) => void} */
  let onReady = () => {};
  const ready = new Promise((resolve) => (onReady = resolve));
  try {
    cleanup = render({ model, el, options: { ...options, onReady } }) || cleanup;
  } catch (err) {
    // render() reports document problems itself; this is the last line of defence
    el.appendChild(errorBox(`The viewer failed to start: ${err && err.message ? err.message : err}`));
    onReady();
  }
  return {
    model,
    ready,
    destroy() {
      cleanup();
      cleanup = () => {};
    },
  };
}
