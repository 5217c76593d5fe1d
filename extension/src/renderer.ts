/**
 * The thunderviz renderer: one Lumino widget that shows a view document with the shared
 * viewer, used both as the content of a `.tvz` document panel and as a notebook output.
 */

import { IRenderMime } from '@jupyterlab/rendermime-interfaces';
import { Widget } from '@lumino/widgets';

import { IDocumentProblem, parseViewDocument } from './document';
import { IMountedViewer, IViewerModule, loadViewer } from './viewer';

/** Class of the renderer widget's node. */
export const RENDERER_CLASS = 'tv-jl-renderer';
/** Class of the element the viewer is mounted into. */
export const VIEWER_HOST_CLASS = 'tv-jl-viewer';
/** Class of the message shown instead of a view that cannot be shown. */
export const ERROR_CLASS = 'tv-error';

export class ThunderVizRenderer extends Widget implements IRenderMime.IRenderer {
  constructor(options: IRenderMime.IRendererOptions) {
    super();
    this._mimeType = options.mimeType;
    this.addClass(RENDERER_CLASS);
  }

  /**
   * Render a model. Never rejects: a problem with the document or the viewer is shown
   * inside the widget (JupyterLab would otherwise close a document panel whose renderer
   * fails and show only a dialog).
   */
  async renderModel(model: IRenderMime.IMimeModel): Promise<void> {
    const generation = ++this._generation;
    // JupyterLab renders a document's model again without its content changing (switching
    // the theme does it): keep the viewer as it is, with its selection, tab and expansion.
    const data = model.data[this._mimeType];
    const key = typeof data === 'string' ? data : JSON.stringify(data);
    if (this._viewer && key === this._shownKey) {
      return;
    }
    let viewer: IViewerModule;
    try {
      viewer = await loadViewer();
    } catch (error) {
      console.error('thunderviz: could not load the viewer', error);
      this._reset();
      this._showProblem({
        title: 'The thunderviz viewer could not be loaded',
        detail: `${errorText(error)}. Reload the page; if that does not help, reinstall thunderviz (it ships this extension).`
      });
      return;
    }
    if (generation !== this._generation || this.isDisposed) {
      return; // a newer model arrived while the viewer loaded
    }
    this._reset();

    const parsed = parseViewDocument(model.data[this._mimeType], viewer);
    if (!parsed.ok) {
      this._showProblem(parsed.problem);
      return;
    }

    const host = document.createElement('div');
    host.className = VIEWER_HOST_CLASS;
    // Keys pressed inside the viewer belong to it (arrow keys, search): keep JupyterLab's
    // shortcuts (notebook command mode: arrows, "a", "dd", ...) from acting on them.
    host.setAttribute('data-lm-suppress-shortcuts', 'true');
    this.node.appendChild(host);
    try {
      // Sizes come from CSS (style/base.css): the viewer fills a document panel and keeps
      // its own default height in a notebook output.
      this._viewer = viewer.mountViewer(host, parsed.doc);
      this._shownKey = key;
    } catch (error) {
      console.error('thunderviz: the viewer failed to render this document', error);
      host.remove();
      this._showProblem({
        title: 'The thunderviz viewer failed on this view',
        detail: `${errorText(error)}. The browser console has the details.`
      });
    }
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._unmount();
    super.dispose();
  }

  /** Remove what the last render put in the node. */
  private _reset(): void {
    this._unmount();
    this.node.textContent = '';
  }

  private _unmount(): void {
    const viewer = this._viewer;
    this._viewer = null;
    if (viewer) {
      try {
        viewer.destroy();
      } catch (error) {
        console.error('thunderviz: destroying the viewer failed', error);
      }
    }
  }

  private _showProblem(problem: IDocumentProblem): void {
    const box = document.createElement('div');
    box.className = ERROR_CLASS;
    box.setAttribute('role', 'alert');
    const title = document.createElement('div');
    title.className = 'tv-error-title';
    title.textContent = problem.title;
    const detail = document.createElement('div');
    detail.className = 'tv-error-detail';
    detail.textContent = problem.detail;
    box.append(title, detail);
    this.node.appendChild(box);
  }

  private _mimeType: string;
  private _viewer: IMountedViewer | null = null;
  /** The content the mounted viewer shows (the model's data as text). */
  private _shownKey: string | null = null;
  private _generation = 0;
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
