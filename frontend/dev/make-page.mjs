#!/usr/bin/env node
// Development helper: write a self-contained HTML page (bundle and document inlined) that
// opens from file:// with no server, the way an HTML export works.
//
//   node dev/make-page.mjs <out.html> [doc.json | --gpt N | --flat N | --hostile] [--tab ID] [--height PX]
//
// The bundle is an ES module whose export names are minified away, so the page imports it
// from a blob: URL made from its inlined text (works from file:// in Chromium and Firefox).
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, resolve } from "node:path";
import { makeGptDocument, makeFlatDocument } from "../test/synthetic.js";

const here = dirname(fileURLToPath(import.meta.url));
const bundlePath = resolve(here, "../../thunderviz/widgets/static/viewer.js");
const fixturePath = resolve(here, "../test/fixtures/mlp.tvz.json");

const args = process.argv.slice(2);
const out = args.shift();
if (!out) {
  console.error("usage: node dev/make-page.mjs <out.html> [doc.json | --gpt N | --flat N | --hostile] [--tab ID] [--height PX]");
  process.exit(2);
}
let doc = null;
const options = {};
while (args.length) {
  const arg = args.shift();
  if (arg === "--gpt") doc = makeGptDocument({ layers: Number(args.shift()) });
  else if (arg === "--flat") doc = makeFlatDocument(Number(args.shift()));
  else if (arg === "--hostile") doc = hostile(JSON.parse(readFileSync(fixturePath, "utf8")));
  else if (arg === "--tab") options.tab = args.shift();
  else if (arg === "--height") options.height = Number(args.shift());
  else doc = JSON.parse(readFileSync(arg, "utf8"));
}
doc ??= JSON.parse(readFileSync(fixturePath, "utf8"));

/** The fixture with attacker-controlled strings in every place a name can go. */
function hostile(d) {
  const evil = "<img src=x onerror=alert(1)>";
  for (const trace of Object.values(d.traces)) {
    for (const op of trace.ops) {
      if (op.module_path === "head") op.module_path = evil;
      if (op.id.endsWith(":3")) op.label = '"];\n evil [label="x';
      if (op.source) op.source.code = `<script>alert(2)</script>`;
      op.args_repr = `${op.args_repr} </script><script>alert(3)</script>`;
    }
  }
  for (const s of d.saved) if (s.module_path === "head") s.module_path = evil;
  d.title = `<b onmouseover=alert(4)>hostile</b>`;
  return d;
}

// JSON inside <script type="application/json">: "<" escaped so "</script>" cannot end it.
const json = (value) => JSON.stringify(value).replace(/</g, "\\u003c").replace(/\u2028/g, "\\u2028").replace(/\u2029/g, "\\u2029");
const bundle = readFileSync(bundlePath, "utf8");
if (/<\/script/i.test(bundle)) throw new Error("bundle contains </script; cannot inline it");

const page = `<!doctype html>
<html><head><meta charset="utf-8"><title>thunderviz</title>
<style>body { margin: 12px; font-family: system-ui, sans-serif; }</style></head>
<body>
<div id="app"></div>
<script type="application/json" id="tv-doc">${json(doc)}</script>
<script type="application/json" id="tv-options">${json(options)}</script>
<script type="text/plain" id="tv-bundle">${bundle}</script>
<script type="module">
const text = document.getElementById("tv-bundle").textContent;
const url = URL.createObjectURL(new Blob([text], { type: "text/javascript" }));
const viewer = await import(url);
const doc = JSON.parse(document.getElementById("tv-doc").textContent);
const options = JSON.parse(document.getElementById("tv-options").textContent);
window.thunderviz = viewer;
window.tvHandle = viewer.mountViewer(document.getElementById("app"), doc, options);
</script>
</body></html>
`;
writeFileSync(out, page);
console.log(`wrote ${out} (${(page.length / 1024).toFixed(0)} KiB)`);
