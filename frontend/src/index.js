// The bundle's public API (thunderviz/widgets/static/viewer.js). The Python widget, the HTML
// export and the JupyterLab extension all load this one module.

import { renderWidget as render } from "./mount.js";

export { render };
export { mountViewer } from "./mount.js";
export { mountSideBySide, comparisonOf, MatchIndex } from "./sidebyside.js";
export { validateDocument, MIME_TYPE, FORMAT_VERSION } from "./document.js";

export default { render };
