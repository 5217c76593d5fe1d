/**
 * Turning what JupyterLab hands the renderer (the text of a `.tvz` file, or the JSON of a
 * notebook output) into a view document, with a message a person can act on when it is not
 * one. The viewer's own `validateDocument` does the full structural check; the checks here
 * are the ones that decide which message to show (not JSON, not a thunderviz document, a
 * newer format), so that they stay clear whatever the structure check reports.
 */

import { IViewerModule, ViewDocument } from './viewer';

/** A document that could not be shown: a short title and the detail. */
export interface IDocumentProblem {
  title: string;
  detail: string;
}

export type ParseResult =
  | { ok: true; doc: ViewDocument }
  | { ok: false; problem: IDocumentProblem };

const NOT_A_VIEW = 'This is not a thunderviz view';

function isPlainObject(value: unknown): value is { [key: string]: unknown } {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (value === null) {
    return 'null';
  }
  if (Array.isArray(value)) {
    return 'a JSON array';
  }
  if (typeof value === 'string') {
    return `the string ${JSON.stringify(value.slice(0, 40))}`;
  }
  return `a JSON ${typeof value}`;
}

/**
 * Parse and check a view document.
 *
 * @param data - a string (the text of a `.tvz` file) or already-parsed JSON (a notebook
 *   output's data for the thunderviz MIME type).
 * @param viewer - the loaded viewer: its format version and structural check.
 */
export function parseViewDocument(data: unknown, viewer: IViewerModule): ParseResult {
  const { FORMAT_VERSION, validateDocument } = viewer;
  let value: unknown = data;
  if (typeof data === 'string') {
    if (data.trim() === '') {
      return {
        ok: false,
        problem: {
          title: NOT_A_VIEW,
          detail:
            'The file is empty. A .tvz file holds the JSON view document that thunderviz.save() writes.'
        }
      };
    }
    try {
      value = JSON.parse(data);
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      return {
        ok: false,
        problem: {
          title: NOT_A_VIEW,
          detail: `The file is not valid JSON (${reason}). A .tvz file holds the JSON view document that thunderviz.save() writes.`
        }
      };
    }
  }
  // Notebook output data belongs to the notebook model: the viewer gets a copy (below), made
  // only after the checks, which read without recursing, so a hostile 100k-deep output is
  // refused with a message instead of overflowing the stack inside structuredClone.

  if (!isPlainObject(value) || value.format !== 'thunderviz') {
    const found = isPlainObject(value)
      ? 'format' in value
        ? `its "format" is ${JSON.stringify(value.format)}`
        : 'it has no "format" field'
      : `it is ${describe(value)}`;
    return {
      ok: false,
      problem: {
        title: NOT_A_VIEW,
        detail: `This JSON is not a thunderviz view document: ${found}, where a view document starts with "format": "thunderviz". Write views with thunderviz.save().`
      }
    };
  }

  const version = value.version;
  if (typeof version === 'number' && Number.isInteger(version) && version > FORMAT_VERSION) {
    const writer =
      typeof value.created_by === 'string' && value.created_by
        ? ` by ${value.created_by}`
        : '';
    return {
      ok: false,
      problem: {
        title: 'This view needs a newer thunderviz',
        detail:
          `It was written${writer} in view format version ${version}; this JupyterLab ` +
          `extension reads format version ${FORMAT_VERSION} and older. Upgrade the ` +
          'thunderviz package (it ships this extension) and reload JupyterLab, or save the ' +
          'view again with the thunderviz installed here.'
      }
    };
  }

  const check = validateDocument(value);
  if (!check.ok) {
    return {
      ok: false,
      problem: {
        title: 'This thunderviz view is damaged',
        detail: `${check.error || 'The document does not follow the view format.'} (view format version ${FORMAT_VERSION}, docs/view-format.md)`
      }
    };
  }
  return { ok: true, doc: typeof data === 'string' ? value : copyOf(value) };
}

function copyOf(value: ViewDocument): ViewDocument {
  try {
    return structuredClone(value);
  } catch {
    return JSON.parse(JSON.stringify(value));
  }
}
