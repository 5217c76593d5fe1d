// How a click on a source path asks the page to open the file: an event, so that the viewer
// needs to know nothing about its host. The JupyterLab extension (extension/src/opensource.ts)
// listens for it, cancels it and opens the file at the line in an editor; where nobody does
// (an exported page, a notebook without the extension) the viewer copies "file:line".

/** Bubbling, cancelable; detail: {file: string, line: number | null}. */
export const OPEN_SOURCE_EVENT = "thunderviz-open-source";
/** Set on <body> by a host that opens files, so the link can say what a click does. */
export const OPENS_SOURCE_ATTRIBUTE = "data-thunderviz-opens-source";
