// ESLint (flat config) for the viewer's sources, tests and build scripts. Type errors are
// tsc's job (jsconfig.json with checkJs; both run by `npm run lint`).
import js from "@eslint/js";
import globals from "globals";

export default [
  { ignores: ["generated/**", "node_modules/**"] },
  js.configs.recommended,
  {
    linterOptions: { reportUnusedDisableDirectives: "error" },
    rules: {
      // `const { onChange: _ignored, ...rest } = options` drops a key on purpose
      "no-unused-vars": ["error", { ignoreRestSiblings: true, argsIgnorePattern: "^_" }],
    },
  },
  {
    files: ["src/**/*.js"],
    languageOptions: { globals: { ...globals.browser } },
    // the viewer runs inside a notebook: it reports through the page, not the console
    rules: { "no-console": "error" },
  },
  {
    files: ["test/**/*.js", "dev/**/*.mjs", "*.mjs", "*.js"],
    // the DOM tests install linkedom's `document` (and Node, Element...) as globals first
    languageOptions: { globals: { ...globals.node, document: "readonly" } },
  },
];
