/**
 * Source paths open in JupyterLab: a click on the path in the viewer's details panel
 * (`frontend/src/details.js`) sends a bubbling OPEN_SOURCE_EVENT with {file, line}; this
 * plugin cancels it and opens the file in JupyterLab's text editor with the cursor on that
 * line, when the file is under the server's root (the only files JupyterLab can open).
 * Otherwise it lets the event go and the viewer copies `file:line`.
 *
 * A plain application plugin next to the MIME renderer (`index.ts`): a renderer has no
 * handle on the application's commands. It needs nothing but the command registry, so it
 * imports no JupyterLab package: the commands are reached through `app`, typed below.
 */

// @ts-ignore -- plain JavaScript without declarations; two string constants.
import { OPEN_SOURCE_EVENT, OPENS_SOURCE_ATTRIBUTE } from '../../frontend/src/opensource.js';

/** The part of JupyterFrontEnd this plugin uses. */
interface IApp {
  commands: { execute(id: string, args?: unknown): Promise<unknown> };
}

/** The part of a file editor's document widget this plugin uses. */
interface IEditorWidget {
  context?: { ready: Promise<void> };
  revealed?: Promise<void>;
  content?: {
    editor?: {
      setCursorPosition(position: { line: number; column: number }): void;
      revealPosition?(position: { line: number; column: number }): void;
      focus?(): void;
    };
  };
}

/** The server's root folder, as JupyterLab's page configuration gives it. */
export function serverRoot(doc: Document = document): string | null {
  const el = doc.getElementById('jupyter-config-data');
  if (!el || !el.textContent) {
    return null;
  }
  try {
    const root = JSON.parse(el.textContent).serverRoot;
    return typeof root === 'string' && root ? root : null;
  } catch {
    return null;
  }
}

/**
 * The path of `file` relative to the server root, as JupyterLab names files; null when it
 * is not under the root (a notebook cell's temporary file, another folder, `<string>`).
 */
export function pathInLab(file: string, root: string | null): string | null {
  if (!root || !file.startsWith('/')) {
    return null;
  }
  const base = root.replace(/\/+$/, '');
  if (!file.startsWith(base + '/')) {
    return null;
  }
  const rest = file.slice(base.length + 1);
  return rest.split('/').includes('..') ? null : rest;
}

/** Open `path` in the text editor and put the cursor at the start of `line` (1-based). */
export async function openAtLine(app: IApp, path: string, line: number | null): Promise<void> {
  const widget = (await app.commands.execute('docmanager:open', {
    path,
    factory: 'Editor'
  })) as IEditorWidget | undefined;
  if (!widget) {
    return;
  }
  if (widget.context) {
    await widget.context.ready;
  }
  if (widget.revealed) {
    await widget.revealed;
  }
  const editor = widget.content && widget.content.editor;
  if (!editor || !line || line < 1) {
    return;
  }
  const position = { line: line - 1, column: 0 };
  editor.setCursorPosition(position);
  if (editor.revealPosition) {
    editor.revealPosition(position);
  }
  if (editor.focus) {
    editor.focus();
  }
}

const plugin = {
  id: 'thunderviz:open-source',
  description: "Opens a thunderviz view's source paths in JupyterLab's editor at their line.",
  autoStart: true,
  activate: (app: IApp): void => {
    document.body.setAttribute(OPENS_SOURCE_ATTRIBUTE, 'true');
    document.addEventListener(OPEN_SOURCE_EVENT, (event: Event) => {
      const detail = (event as CustomEvent).detail || {};
      const path = typeof detail.file === 'string' ? pathInLab(detail.file, serverRoot()) : null;
      if (path === null) {
        return; // not a file JupyterLab can open: the viewer copies file:line
      }
      event.preventDefault();
      const line = typeof detail.line === 'number' ? detail.line : null;
      openAtLine(app, path, line).catch(error =>
        console.error(`thunderviz: could not open ${path}`, error)
      );
    });
  }
};

export default plugin;
