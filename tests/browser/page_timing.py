"""Drive the viewer like a person opening modules, and read what the browser measured.

Shared by the freeze regression test (`test_responsiveness.py`) and the benchmark
(`benchmarks/view_speed.py`). Everything here is measured by the page itself:

* long tasks: a `PerformanceObserver` for `longtask` entries (main-thread tasks of 50 ms or
  more), installed before the page's own scripts run (`install_long_task_observer`), and the
  script invocations inside long animation frames (`long-animation-frame` entries: which
  handler ran and for how long), which attribute main-thread time to the viewer's code;
* "drawn": from the click on a ▸ toggle to the frame after every graph pane says
  `data-tv-ready="true"` with the module drawn open;
* layout time: each pane's `data-tv-layout-ms` (the engine's own time, in its worker).
"""

from __future__ import annotations

from typing import Any

LONG_TASK_OBSERVER = """
window.__tvLongTasks = [];
window.__tvLongScripts = [];
try {
  new PerformanceObserver((list) => {
    for (const e of list.getEntries()) window.__tvLongTasks.push({start: e.startTime, duration: e.duration});
  }).observe({type: "longtask", buffered: true});
} catch (err) { window.__tvLongTasks = null; }
try {
  // Long animation frames name the script invocations inside them: which handler ran, how long.
  new PerformanceObserver((list) => {
    for (const frame of list.getEntries()) {
      for (const s of frame.scripts) {
        window.__tvLongScripts.push({start: s.startTime, duration: s.duration, invoker: s.invoker});
      }
    }
  }).observe({type: "long-animation-frame", buffered: true});
} catch (err) { window.__tvLongScripts = null; }
"""

# Click the toggle of `id` in every pane that shows it (each pane has its own expansion),
# wait until those panes are ready and show `id` open, one more frame, and report what
# happened meanwhile.
_EXPAND = """
async ({id, timeoutMs}) => {
  const sel = (s) => CSS.escape(s);
  const panes = [...document.querySelectorAll(".tv-graph-pane")];
  const toggles = panes.map((p) => [p, p.querySelector(`g.node[data-tv-id="${sel(id)}"] .tv-toggle`)]).filter(([, t]) => t);
  if (!toggles.length) return {error: `no toggle for ${id}`};
  const before = window.__tvLongTasks.length;
  const beforeScripts = (window.__tvLongScripts || []).length;
  const start = performance.now();
  for (const [, toggle] of toggles) toggle.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
  for (;;) {
    await frame();
    const ready = panes.every((p) => p.dataset.tvReady === "true");
    if (ready && toggles.every(([p]) => p.querySelector(`g.cluster[data-tv-id="${sel(id)}"]`))) break;
    if (performance.now() - start > timeoutMs) return {error: `timed out opening ${id}`};
  }
  await frame();
  const drawnMs = performance.now() - start;
  const tasks = window.__tvLongTasks.slice(before);
  const scripts = (window.__tvLongScripts || []).slice(beforeScripts);
  const result = {};
  for (const p of panes) {
    result[p.dataset.tvGraph] = {nodes: Number(p.dataset.tvNodes), layoutMs: Number(p.dataset.tvLayoutMs)};
  }
  return {drawnMs, longTasks: tasks.map((t) => t.duration),
          scripts: scripts.map((s) => [s.invoker, s.duration]), panes: result};
}
"""

# Start a layout in one pane (click a module's ▸ there), then at once click a node of
# another pane, and time until that node shows as selected.
_CLICK_DURING_LAYOUT = """
async ({busyPane, toggleId, clickPane}) => {
  const frame = () => new Promise((r) => requestAnimationFrame(() => r()));
  const busy = document.querySelector(`.tv-graph-pane[data-tv-graph="${busyPane}"]`);
  const toggle = busy.querySelector(`[data-tv-id="${CSS.escape(toggleId)}"] > text .tv-toggle`);
  if (!toggle) return {error: `no toggle for ${toggleId}`};
  const other = document.querySelector(`.tv-graph-pane[data-tv-graph="${clickPane}"]`);
  const node = [...other.querySelectorAll("g.node[data-tv-type='op']")].find((n) => !n.classList.contains("tv-selected"));
  toggle.dispatchEvent(new MouseEvent("click", {bubbles: true}));
  await frame();
  const layingOut = busy.dataset.tvReady === "false";
  const start = performance.now();
  node.querySelector("text").dispatchEvent(new MouseEvent("click", {bubbles: true, detail: 1}));
  while (!node.classList.contains("tv-selected")) await frame();
  return {answeredMs: performance.now() - start, layingOut, stillLayingOut: busy.dataset.tvReady === "false"};
}
"""


def install_long_task_observer(page: Any) -> None:
    """Observe long tasks from the page's first script on (call before `goto`)."""
    page.add_init_script(LONG_TASK_OBSERVER)


def long_tasks(page: Any) -> list[float]:
    """Durations (ms) of every long task the page has had so far."""
    tasks = page.evaluate("() => window.__tvLongTasks")
    if tasks is None:
        raise RuntimeError("this browser does not report long tasks")
    return [t["duration"] for t in tasks]


def open_module(page: Any, module_path: str, timeout_ms: float = 120_000) -> dict:
    """Open `module_path` with its ▸ in every pane that shows it; returns drawnMs,
    longTasks (ms), scripts ([invoker, ms] of script runs in long animation frames), panes."""
    result = page.evaluate(_EXPAND, {"id": f"module:{module_path}", "timeoutMs": timeout_ms})
    if "error" in result:
        raise RuntimeError(result["error"])
    return result


def click_during_layout(page: Any, busy_pane: str, toggle_id: str, click_pane: str) -> dict:
    """Open/close `toggle_id` in `busy_pane`, then select a node in `click_pane` while that
    layout runs; returns answeredMs (to the frame showing the selection), layingOut (when
    clicked) and stillLayingOut (when answered)."""
    result = page.evaluate(
        _CLICK_DURING_LAYOUT,
        {"busyPane": busy_pane, "toggleId": toggle_id, "clickPane": click_pane},
    )
    if "error" in result:
        raise RuntimeError(result["error"])
    return result


def expanded(page: Any) -> list[str]:
    """The viewer's `expanded` trait (HTML export page: window.thunderviz.handle.model)."""
    return page.evaluate("() => window.thunderviz.handle.model.get('expanded')")
