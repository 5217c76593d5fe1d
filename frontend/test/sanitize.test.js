import { test } from "node:test";
import assert from "node:assert/strict";
import { DOMParser } from "linkedom";
import { parseSvg, isSafeAttribute } from "../src/sanitize.js";

const env = { DOMParser, document: null };

const HOSTILE_SVG = `<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" onload="alert(1)" viewBox="0 0 10 10">
<g class="node" onclick="alert(2)" style="background:url(javascript:alert(3))">
<title>n0</title>
<script>alert(4)</script>
<foreignObject><div xmlns="http://www.w3.org/1999/xhtml"><img src="x" onerror="alert(5)"/></div></foreignObject>
<a xlink:href="javascript:alert(6)"><text>link</text></a>
<polygon fill="url(javascript:alert(7))" stroke="black" points="0,0 1,1"/>
<ellipse fill="url(#grad)" cx="1" cy="1" rx="1" ry="1" onmouseover="alert(8)"/>
<text x="1" y="2" href="javascript:alert(9)">&lt;img src=x onerror=alert(1)&gt;</text>
<image href="http://example.com/x.png"/><use href="#n0"/><style>*{}</style>
<animate attributeName="href" to="javascript:alert(10)"/>
</g></svg>`;

const allElements = (root) => [root, ...root.querySelectorAll("*")];

test("scripts, foreign objects, links, images, styles and animations are removed", () => {
  const svg = parseSvg(HOSTILE_SVG, env);
  const names = allElements(svg).map((el) => el.localName);
  for (const banned of ["script", "foreignObject", "a", "image", "use", "style", "animate", "div", "img"]) {
    assert.ok(!names.includes(banned), `${banned} survived`);
  }
  assert.deepEqual([...new Set(names)].sort(), ["ellipse", "g", "polygon", "svg", "text", "title"]);
});

test("event handlers, href, style and javascript: urls are removed; drawing attributes stay", () => {
  const svg = parseSvg(HOSTILE_SVG, env);
  for (const el of allElements(svg)) {
    for (const attr of el.attributes) {
      assert.ok(!/^on/i.test(attr.name), `${attr.name} on ${el.localName}`);
      assert.ok(!["href", "xlink:href", "style"].includes(attr.name));
      assert.ok(!/javascript:/i.test(attr.value));
    }
  }
  assert.equal(svg.querySelector("polygon").getAttribute("fill"), null);
  assert.equal(svg.querySelector("polygon").getAttribute("points"), "0,0 1,1");
  assert.equal(svg.querySelector("ellipse").getAttribute("fill"), "url(#grad)");
  assert.equal(svg.getAttribute("viewBox"), "0 0 10 10");
});

test("escaped markup in labels stays text", () => {
  const svg = parseSvg(HOSTILE_SVG, env);
  const text = [...svg.querySelectorAll("text")].find((t) => t.textContent.includes("onerror"));
  assert.equal(text.textContent, "<img src=x onerror=alert(1)>");
  assert.equal(text.children.length, 0);
});

test("attribute checks catch obfuscated javascript: and remote urls", () => {
  assert.equal(isSafeAttribute("fill", "url(#a)"), true);
  assert.equal(isSafeAttribute("fill", " J\tavaScript:alert(1)"), false);
  assert.equal(isSafeAttribute("fill", "url(http://evil/x)"), false);
  assert.equal(isSafeAttribute("fill", "url(data:image/png;base64,xx)"), false);
  assert.equal(isSafeAttribute("onload", "x"), false);
  assert.equal(isSafeAttribute("stroke", "#fff"), true);
});

test("text that is not SVG is refused", () => {
  assert.throws(() => parseSvg("<html><body>hi</body></html>", env), /not SVG|could not be parsed/);
});
