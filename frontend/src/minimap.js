// The overview of a graph bigger than its pane: every node as a dot-sized box, the visible
// part as a frame; click or drag in it to go there. Drawn on a small <canvas> in the pane's
// corner, only while the graph does not fit.

import { h } from "./dom.js";
import { nextFrameTurn } from "./svgtree.js";

const WIDTH = 150;
const HEIGHT = 110;

export class Minimap {
  /** @param {HTMLElement} canvas the pane's scrolling canvas */
  constructor(canvas) {
    this.scroller = canvas;
    this.el = h("canvas", { class: "tv-minimap", attrs: { width: WIDTH, height: HEIGHT, hidden: true, title: "Overview: click or drag to move", role: "img", "aria-label": "graph overview" } });
    this.boxes = [];
    this.scale = 1;
    this.queued = false; // a draw is waiting for the next frame
    const go = (event) => {
      const rect = this.el.getBoundingClientRect();
      const x = (event.clientX - rect.left) / this.scale;
      const y = (event.clientY - rect.top) / this.scale;
      this.scroller.scrollLeft = x - this.scroller.clientWidth / 2;
      this.scroller.scrollTop = y - this.scroller.clientHeight / 2;
    };
    this.el.addEventListener("pointerdown", (event) => {
      event.stopPropagation();
      this.dragging = true;
      go(event);
    });
    this.el.addEventListener("pointermove", (event) => this.dragging && go(event));
    const stop = () => (this.dragging = false);
    this.el.addEventListener("pointerup", stop);
    this.el.addEventListener("pointerleave", stop);
    // A scroll event is dispatched in the frame's rendering steps, before the layout of what
    // the page changed since the last frame (a new drawing, a pane scrolled into place): the
    // draw's reads of the scroll position made the browser lay the whole graph out inside the
    // handler (12-110 ms for a few hundred nodes). Drawn in the frame queue's next turn, once
    // that frame is on the screen, the reads find the layout done; one draw however many
    // events came meanwhile.
    this.scroller.addEventListener("scroll", () => this.drawAfterPaint(), { passive: true });
  }

  drawAfterPaint() {
    if (this.queued) return;
    this.queued = true;
    nextFrameTurn().then(() => {
      this.queued = false;
      this.draw();
    });
  }

  /**
   * Read node boxes from the drawn SVG (call once the page has laid it out: the reads are
   * then cheap) and show the map if the graph does not fit the pane.
   * @param {SVGSVGElement} svg
   * @param {Map<string, Element>} nodeEls
   * @param {Set<Element>} marked nodes drawn in the selection colour
   */
  update(svg, nodeEls, marked = new Set()) {
    const origin = svg.getBoundingClientRect();
    const width = this.scroller.scrollWidth;
    const height = this.scroller.scrollHeight;
    const fits = width <= this.scroller.clientWidth + 4 && height <= this.scroller.clientHeight + 4;
    this.el.hidden = fits;
    if (fits) return;
    const left = origin.left - this.scroller.getBoundingClientRect().left + this.scroller.scrollLeft;
    const top = origin.top - this.scroller.getBoundingClientRect().top + this.scroller.scrollTop;
    this.boxes = [...nodeEls.values()].map((el) => {
      const r = el.getBoundingClientRect();
      return { x: r.left - origin.left + left, y: r.top - origin.top + top, w: r.width, h: r.height, marked: marked.has(el) };
    });
    this.scale = Math.min(WIDTH / width, HEIGHT / height);
    this.draw();
  }

  draw() {
    if (this.el.hidden || !this.el.getContext) return;
    const ctx = this.el.getContext("2d");
    if (!ctx) return;
    const k = this.scale;
    ctx.clearRect(0, 0, WIDTH, HEIGHT);
    for (const b of this.boxes) {
      ctx.fillStyle = b.marked ? "#f59e0b" : "#8a9099";
      ctx.fillRect(b.x * k, b.y * k, Math.max(1.5, b.w * k), Math.max(1.5, b.h * k));
    }
    ctx.strokeStyle = "#0ea5e9";
    ctx.lineWidth = 1.5;
    const s = this.scroller;
    ctx.strokeRect(s.scrollLeft * k, s.scrollTop * k, s.clientWidth * k, s.clientHeight * k);
  }
}
