// Build the viewer: one self-contained ES module (wasm Graphviz inlined) at
// thunderviz/widgets/static/viewer.js, which the Python package ships.
import { build } from "esbuild";
import { fileURLToPath } from "node:url";
import { dirname, resolve } from "node:path";
import { statSync } from "node:fs";

const here = dirname(fileURLToPath(import.meta.url));
const outfile = resolve(here, "../thunderviz/widgets/static/viewer.js");

await build({
  entryPoints: [resolve(here, "src/index.js")],
  outfile,
  bundle: true,
  format: "esm",
  platform: "browser",
  target: ["es2022", "chrome105", "firefox110", "safari16"],
  minify: true,
  legalComments: "eof",
  charset: "utf8",
  logLevel: "warning",
});
console.log(`wrote ${outfile} (${(statSync(outfile).size / 1024).toFixed(0)} KiB)`);
