// The always-available key of the graph's shapes and colours ("key" in a pane's toolbar).

import { h } from "./dom.js";

const ITEMS = [
  ["tv-k-op", "torch-level op (▸ opens its ATen ops)"],
  ["tv-k-prim", "ATen op (prim)"],
  ["tv-k-module", "closed module: ▸ or double-click opens it"],
  ["tv-k-cluster", "open module (▾ closes it)"],
  ["tv-k-input", "graph input"],
  ["tv-k-output", "return"],
  ["tv-k-saved", "saved for backward, read here"],
  ["tv-k-highlight", "linked to the selection"],
  ["tv-k-selected", "selected"],
  ["tv-k-current", "current backward step"],
  ["tv-k-ledger-born", "NaN/Inf born here (finite in, non-finite out)"],
  ["tv-k-ledger-healed", "NaN/Inf healed here (non-finite in, finite out)"],
  ["tv-k-ledger-propagated", "NaN/Inf passed on"],
];

export function legend() {
  return h(
    "details",
    { class: "tv-key", data: { "graph-action": "key" } },
    h("summary", { title: "What the shapes and colours mean" }, "key"),
    h("div", { class: "tv-key-items" }, ITEMS.map(([cls, text]) => h("div", {}, h("span", { class: `tv-k ${cls}` }), text)),
      h("div", {}, h("span", { class: "tv-k-edge" }, "f32[4,16]"), "edge: a tensor, dtype[shape]; +n: n more")),
  );
}
