// Line diff of two printed traces, for the transform stepper. A transform step changes a
// few lines of a long trace, so the common head and tail are trimmed first and only the
// changed middle goes through the (quadratic) longest-common-subsequence table.

import { pushAll } from "./arrays.js";

const MAX_TABLE = 4_000_000;

/**
 * @typedef {{type: "same"|"removed"|"inserted", text: string, oldLine: number|null, newLine: number|null}} DiffLine
 */

/**
 * @param {string} before
 * @param {string} after
 * @returns {DiffLine[]} every line of both texts, in order, with 1-based line numbers
 */
export function diffLines(before, after) {
  const a = String(before ?? "").split("\n");
  const b = String(after ?? "").split("\n");
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;

  /** @type {DiffLine[]} */
  const out = [];
  for (let i = 0; i < head; i++) out.push({ type: "same", text: a[i], oldLine: i + 1, newLine: i + 1 });
  pushAll(out, diffMiddle(a.slice(head, a.length - tail), b.slice(head, b.length - tail), head));
  for (let k = tail; k > 0; k--) {
    out.push({ type: "same", text: a[a.length - k], oldLine: a.length - k + 1, newLine: b.length - k + 1 });
  }
  return out;
}

function diffMiddle(a, b, offset) {
  const out = [];
  const removed = (i) => ({ type: "removed", text: a[i], oldLine: offset + i + 1, newLine: null });
  const inserted = (j) => ({ type: "inserted", text: b[j], oldLine: null, newLine: offset + j + 1 });
  if (a.length * b.length > MAX_TABLE) {
    // too big to align: show it as replaced wholesale rather than stall the page
    a.forEach((_, i) => out.push(removed(i)));
    b.forEach((_, j) => out.push(inserted(j)));
    return out;
  }
  // lcs[i][j] = length of the LCS of a[i:] and b[j:]
  const width = b.length + 1;
  const lcs = new Uint32Array((a.length + 1) * width);
  for (let i = a.length - 1; i >= 0; i--) {
    for (let j = b.length - 1; j >= 0; j--) {
      lcs[i * width + j] = a[i] === b[j] ? lcs[(i + 1) * width + j + 1] + 1 : Math.max(lcs[(i + 1) * width + j], lcs[i * width + j + 1]);
    }
  }
  let i = 0;
  let j = 0;
  while (i < a.length && j < b.length) {
    if (a[i] === b[j]) {
      out.push({ type: "same", text: a[i], oldLine: offset + i + 1, newLine: offset + j + 1 });
      i++;
      j++;
    } else if (lcs[(i + 1) * width + j] >= lcs[i * width + j + 1]) {
      out.push(removed(i++));
    } else {
      out.push(inserted(j++));
    }
  }
  while (i < a.length) out.push(removed(i++));
  while (j < b.length) out.push(inserted(j++));
  return out;
}
