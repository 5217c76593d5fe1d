// What is open in each graph pane. Every pane has its own set, so collapsing the backward
// leaves the forward as the user was reading it, and opening a forward module does not pay
// for a backward layout. The `expanded` trait (what Python reads and sets) is the union of
// the panes' sets; when Python (or a saved state) sets it, every pane adopts it.

import { countVisible, isModuleId, modulePathOf } from "./visible.js";
import { modulePrefixes } from "./traceindex.js";

export class PaneExpansions {
  /**
   * @param {object} options
   * @param {() => Set<string>} options.read the `expanded` trait
   * @param {(list: string[]) => void} options.write set the `expanded` trait
   * @param {() => any[]} options.views every GraphView
   * @param {number} options.maxNodes
   * @param {(text: string) => void} options.say
   */
  constructor(options) {
    this.options = options;
    this.panes = new Map(); // GraphView -> its own Set, once it differs from the trait
    this.lastWritten = null;
  }

  /** The set a pane shows. */
  of(view) {
    return new Set(this.panes.get(view) || this.options.read());
  }

  /** The trait changed: ours (nothing to do) or someone else's (every pane adopts it). */
  traitChanged() {
    const now = JSON.stringify([...this.options.read()].sort());
    if (now !== this.lastWritten) this.panes.clear();
  }

  /**
   * Open or close `id` (a module id or path, or an op id) in `views` (default: every
   * pane). Refused, with a message, when a pane would get more nodes than the layout takes.
   */
  toggle(id, views) {
    const key = isModuleId(id) ? modulePathOf(id) : id;
    const opening = !views.some((view) => this.of(view).has(key));
    const next = new Map(views.map((view) => [view, this.of(view)]));
    for (const [view, set] of next) {
      if (!opening) {
        set.delete(key);
        continue;
      }
      set.add(key);
      const ti = view.ti;
      if (!ti.ops.has(key) && !ti.modules.has(key)) continue;
      const count = countVisible(ti, set); // ops and modules; cheap, unlike building the graph
      if (count > this.options.maxNodes) {
        this.options.say(`Not expanding ${key || "(root)"}: it would show ${count.toLocaleString("en")} nodes; the layout is given at most ${this.options.maxNodes.toLocaleString("en")}. Expand a smaller module.`);
        return;
      }
    }
    this.commit(next);
  }

  /** Replace one pane's set (its toolbar: Default, Collapse all, symbols level). */
  set(view, set) {
    this.commit(new Map([[view, new Set(set)]]));
  }

  /** Add `keys` to the sets of `views`. */
  add(views, keys) {
    const next = new Map();
    for (const view of views) {
      const set = this.of(view);
      const before = set.size;
      for (const key of keys) set.add(key);
      if (set.size !== before) next.set(view, set);
    }
    if (next.size) this.commit(next);
    return next.size > 0;
  }

  /** Store pane sets and write the union (plus what no pane shows) to the trait. */
  commit(changed) {
    // panes that followed the trait keep what they show now
    for (const view of this.options.views()) if (!this.panes.has(view)) this.panes.set(view, this.options.read());
    for (const [view, set] of changed) this.panes.set(view, set);
    const union = new Set(this.options.read());
    // drop from the trait what belongs to a changed pane's trace, then add the panes' sets
    for (const [view] of changed) {
      for (const key of [...union]) if (view.ti.ops.has(key) || view.ti.modules.has(key)) union.delete(key);
    }
    for (const set of this.panes.values()) for (const key of set) union.add(key);
    const list = [...union];
    this.lastWritten = JSON.stringify([...list].sort());
    this.options.write(list);
  }
}

/**
 * What pane `ti` must open to show the region linked to a selection in another pane (the
 * "follow selection" switch): a module with its parents, or the modules around linked ops.
 */
export function regionToFollow(ti, selected, linkedOps) {
  const open = new Set();
  if (isModuleId(selected)) {
    const path = modulePathOf(selected);
    if (ti.modules.has(path)) for (const p of modulePrefixes(path)) open.add(p);
    return open;
  }
  for (const op of linkedOps) {
    if (!ti.ops.has(op)) continue;
    for (const p of modulePrefixes(ti.moduleOfAny(op))) open.add(p);
  }
  return open;
}
