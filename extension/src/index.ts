/**
 * thunderviz for JupyterLab: a MIME renderer extension.
 *
 * - renders notebook outputs of type `application/vnd.thunderviz.view+json`, so a saved
 *   notebook shows its interactive views when reopened without a kernel;
 * - registers the `thunderviz` file type (`*.tvz`, JSON text) and a document widget
 *   factory that is the default for it: a `.tvz` opens in the viewer, no kernel needed.
 *
 * The document factory hands the renderer the file's text (`dataType: 'string'`), so a file
 * that is not JSON reaches our renderer and gets a message in the panel, instead of failing
 * in JupyterLab's own JSON parse.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';

import { ThunderVizRenderer } from './renderer';

/** The MIME type of a thunderviz view document (frontend/src/index.js: MIME_TYPE). */
export const MIME_TYPE = 'application/vnd.thunderviz.view+json';
/** The file type name and the document widget factory name. */
export const FILE_TYPE = 'thunderviz';
export const FACTORY = 'thunderviz viewer';

const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" width="16" viewBox="0 0 24 24">' +
  '<g class="jp-icon3" fill="#616161">' +
  '<circle cx="5" cy="5" r="3"/><circle cx="19" cy="5" r="3"/><circle cx="12" cy="19" r="3"/>' +
  '<path d="M6.5 7.2l4.2 9.1 1.4-.6-4.2-9.1zM17.5 7.2l-4.2 9.1-1.4-.6 4.2-9.1z"/>' +
  '</g></svg>';

export const rendererFactory: IRenderMime.IRendererFactory = {
  // Safe: the viewer renders every string of a document as text, never as HTML, and runs
  // nothing from it (docs/view-format.md), so untrusted notebooks may show it too.
  safe: true,
  mimeTypes: [MIME_TYPE],
  defaultRank: 40,
  createRenderer: options => new ThunderVizRenderer(options)
};

const extension: IRenderMime.IExtension = {
  id: 'thunderviz:view',
  description: 'Interactive thunderviz autodiff views for notebooks and .tvz files.',
  rendererFactory,
  // Ahead of text/html (50), image/svg+xml (80) and text/plain (120), which thunderviz
  // outputs carry as fallbacks; behind the live widget view (ipywidgets, -10).
  rank: 40,
  dataType: 'string',
  fileTypes: [
    {
      name: FILE_TYPE,
      displayName: 'thunderviz view',
      mimeTypes: [MIME_TYPE],
      extensions: ['.tvz'],
      fileFormat: 'text',
      icon: { name: 'thunderviz:file', svgstr: ICON_SVG }
    }
  ],
  documentWidgetFactoryOptions: {
    name: FACTORY,
    label: 'thunderviz',
    primaryFileType: FILE_TYPE,
    fileTypes: [FILE_TYPE],
    defaultFor: [FILE_TYPE]
  }
};

export default extension;
