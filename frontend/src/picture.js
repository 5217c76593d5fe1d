// "Export picture": the graph a pane shows (its expansion, selection and highlights) as an
// SVG or PNG file. The SVG is Graphviz's drawing plus a small style block for the marks,
// since the page's own CSS does not travel with the file.

const SVG_NS = "http://www.w3.org/2000/svg";

/**
 * Stand-alone SVG text for `svg` (the pane's <svg>), at natural size. `colours`: highlight,
 * selected, current; born / healed / propagated for the NaN ledger's marks (optional).
 */
export function svgText(svg, natural, colours) {
  const clone = svg.cloneNode(true);
  clone.setAttribute("xmlns", SVG_NS);
  clone.setAttribute("width", `${Math.round(natural.width)}pt`);
  clone.setAttribute("height", `${Math.round(natural.height)}pt`);
  for (const el of clone.querySelectorAll("[tabindex]")) el.removeAttribute("tabindex");
  const style = svg.ownerDocument.createElementNS(SVG_NS, "style");
  const ledger = (status) => `.tv-ledger-${status} > :is(polygon, path, ellipse):first-of-type { stroke: ${colours[status]}; stroke-width: 3px; stroke-dasharray: 6 3; }`;
  style.textContent = [
    ...["propagated", "healed", "born"].filter((status) => colours[status]).map(ledger),
    `.tv-highlight > polygon, .tv-highlight > path, .tv-highlight > ellipse { stroke: ${colours.highlight}; stroke-width: 2.5px; }`,
    `.tv-selected > polygon, .tv-selected > path, .tv-selected > ellipse { stroke: ${colours.selected}; stroke-width: 3px; }`,
    `.tv-current-step > polygon, .tv-current-step > path, .tv-current-step > ellipse { stroke: ${colours.current}; stroke-width: 3px; }`,
  ].join("\n");
  clone.insertBefore(style, clone.firstChild);
  return new XMLSerializer().serializeToString(clone);
}

/** Save `blob` as `filename` through a temporary download link. */
export function download(doc, blob, filename) {
  const url = URL.createObjectURL(blob);
  const a = doc.createElement("a");
  a.href = url;
  a.download = filename;
  a.style.display = "none";
  doc.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** A PNG of SVG text, `scale` pixels per point, on a white background. */
export async function svgToPng(text, natural, scale = 2) {
  const url = URL.createObjectURL(new Blob([text], { type: "image/svg+xml" }));
  try {
    const img = new Image();
    img.src = url;
    await img.decode();
    const canvas = document.createElement("canvas");
    canvas.width = Math.ceil(natural.width * scale * (4 / 3));
    canvas.height = Math.ceil(natural.height * scale * (4 / 3));
    const ctx = canvas.getContext("2d");
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);
    ctx.drawImage(img, 0, 0, canvas.width, canvas.height);
    return await new Promise((resolve, reject) => canvas.toBlob((b) => (b ? resolve(b) : reject(new Error("PNG encoding failed"))), "image/png"));
  } finally {
    URL.revokeObjectURL(url);
  }
}
