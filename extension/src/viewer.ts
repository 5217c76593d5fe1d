/**
 * The shared thunderviz viewer, typed for this extension.
 *
 * The viewer lives in `frontend/src/` (plain ES modules). It is the same source that the
 * anywidget front end and the standalone HTML export are built from: the extension imports
 * it by relative path and the JupyterLab builder bundles it into the labextension, so there
 * is exactly one viewer in the repository. This file only adds TypeScript types for the
 * part of its API the extension uses (see `frontend/src/index.js`).
 */

/** A thunderviz view document (docs/view-format.md), as parsed JSON. */
export type ViewDocument = { [key: string]: unknown };

/** What `mountViewer` returns. */
export interface IMountedViewer {
  /** The viewer's state (selection, tab, expanded ops, ...); opaque to the extension. */
  model: unknown;
  /** Removes the viewer from its element and releases what it holds. */
  destroy(): void;
}

/** Options of `mountViewer` that the extension uses (see frontend/src/mount.js). */
export interface IMountOptions {
  height?: string | number;
  theme?: 'light' | 'dark' | 'auto';
}

/** The part of `frontend/src/index.js` the extension uses. */
export interface IViewerModule {
  mountViewer(el: HTMLElement, doc: ViewDocument, options?: IMountOptions): IMountedViewer;
  validateDocument(doc: unknown): { ok: boolean; error?: string | null };
  MIME_TYPE: string;
  /** The view format version the viewer reads (and every older one). */
  FORMAT_VERSION: number;
}

let loading: Promise<IViewerModule> | null = null;

/**
 * Load the viewer (once). It is imported on first use, not at JupyterLab start-up: it
 * carries Graphviz compiled to WebAssembly (~800 KB), which a session that never shows a
 * thunderviz view should not download. The bundler puts it in a chunk of its own.
 */
export function loadViewer(): Promise<IViewerModule> {
  if (!loading) {
    // @ts-ignore -- plain JavaScript without declarations; typed by IViewerModule.
    loading = import('../../frontend/src/index.js') as Promise<IViewerModule>;
    // A failed load (e.g. the server went away) must not stick: allow a retry.
    loading.catch(() => {
      loading = null;
    });
  }
  return loading;
}
