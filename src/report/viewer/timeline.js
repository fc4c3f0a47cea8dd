// vramscope viewer: the memory timeline on a <canvas> (DOM; the data side is model.js).
//
// A frame is drawn from the model's columns (one per CSS pixel), recomputed only when the view
// changes (range, size, axis, grouping, hidden series); hovering only redraws. Each series is one
// band from the top of the one below it to its own top, with every corner snapped to the device
// pixel grid: no anti-aliased edge, so adjacent bands show no seams, and no pixel is painted twice
// (canvases are rasterized on the CPU in many setups, where overdraw is what costs).
(function (root) {
  "use strict";
  const ns = (root.vramscope = root.vramscope || {});
  const F = ns.format || (typeof require !== "undefined" ? require("./format.js") : null);
  const M = ns.model || (typeof require !== "undefined" ? require("./model.js") : null);

  // Height of one row of region bands under the axis (a 7 px bar and a 2 px gap).
  const REGION_ROW = 9;
  const COLORS = {
    allocated: "#1f2328",
    reserved: "#57606a",
    predictedAllocated: "#8250df",
    predictedReserved: "#c297ff",
    peak: "#cf222e",
    selected: "#0969da",
    grid: "#eaeef2",
    axis: "#8c959f",
    text: "#57606a",
  };
  // One colour per private pool's reserved line (CUDA graphs, MemPools).
  const POOL_COLORS = ["#bf3989", "#1a7f37", "#9a6700", "#0550ae"];
  const FONT = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';

  class Timeline {
    // opts: {height, legend (element), tooltip (element), onSelect(t), onViewChange(), compact,
    //        yMaxFloor() (the least top of the scale)}
    constructor(canvas, opts) {
      this.canvas = canvas;
      this.opts = opts || {};
      this.ctx = canvas.getContext("2d");
      this.model = null;
      this.group = "category";
      this.mode = "events";
      this.hidden = { category: new Set(), owner: new Set() };
      this.lines = { allocated: true, reserved: true, predicted: true, pools: true };
      this.view = { d0: 0, d1: 1 };
      this.selected = -1;
      this.hover = null;
      this.cols = null;
      this.colsKey = "";
      this.yMax = 1;
      this.frameTimes = [];
      this.lastFrameMs = 0;
      this.rafPending = false;
      this.hoverPending = null;
      this.cssWidth = 0;
      this.cssHeight = this.opts.height || 360;
      this.margin = { left: 70, right: 16, top: 16, bottom: this.opts.compact ? 38 : 48 };
      this.drag = null;
      this.attach();
    }

    // ---- state ----------------------------------------------------------------------------

    setModel(model) {
      this.model = model;
      if (this.mode === "time" && !model.hasTime) this.mode = "events";
      this.hidden = { category: new Set(), owner: new Set() };
      this.selected = -1;
      this.hover = null;
      this.cols = null;
      this.resetView(true);
      this.renderLegend();
    }

    fullRange() {
      return [0, Math.max(1, this.model ? this.model.domainEnd(this.mode) : 1)];
    }

    minSpan() {
      const full = this.fullRange()[1];
      return Math.min(full, this.mode === "time" ? 2 : 4);
    }

    setView(d0, d1, silent) {
      const [lo, hi] = this.fullRange();
      let span = Math.min(hi - lo, Math.max(this.minSpan(), d1 - d0));
      if (!(span > 0)) span = hi - lo;
      let a = d0;
      if (a < lo) a = lo;
      if (a + span > hi) a = hi - span;
      this.view = { d0: a, d1: a + span };
      if (!silent && this.opts.onViewChange) this.opts.onViewChange(this);
      this.requestRender();
    }

    resetView(silent) {
      const [lo, hi] = this.fullRange();
      this.setView(lo, hi, silent);
    }

    // Zoom by `factor` (< 1 zooms in) around the x position `atX` (CSS px in the canvas).
    zoomBy(factor, atX) {
      const plot = this.plot();
      const { d0, d1 } = this.view;
      const frac = atX === undefined ? 0.5 : Math.min(1, Math.max(0, (atX - plot.x) / plot.w));
      const anchor = d0 + frac * (d1 - d0);
      const span = (d1 - d0) * factor;
      this.setView(anchor - frac * span, anchor - frac * span + span);
    }

    panBy(fraction) {
      const span = this.view.d1 - this.view.d0;
      this.setView(this.view.d0 + fraction * span, this.view.d1 + fraction * span);
    }

    // Shows events e0..e1 (e1 exclusive).
    zoomTo(e0, e1) {
      if (!this.model) return;
      const E = this.model.E;
      e0 = Math.max(0, Math.min(E, Math.floor(e0)));
      e1 = Math.max(e0 + 1, Math.min(E, Math.ceil(e1)));
      this.setView(this.model.pos(e0, this.mode), this.model.pos(e1, this.mode));
    }

    // The events in view, [e0, e1).
    eventRange() {
      if (!this.model || this.model.E === 0) return [0, 0];
      const e0 = Math.max(0, this.model.eventAt(this.view.d0, this.mode));
      const e1 = Math.max(e0 + 1, this.model.eventBefore(this.view.d1, this.mode) + 1);
      return [e0, Math.min(this.model.E, e1)];
    }

    setMode(mode) {
      if (mode === this.mode || (mode === "time" && !(this.model && this.model.hasTime))) return;
      const [e0, e1] = this.eventRange();
      const full = this.view.d0 <= this.fullRange()[0] && this.view.d1 >= this.fullRange()[1];
      this.mode = mode;
      if (full) this.resetView();
      else this.zoomTo(e0, e1);
    }

    setGroup(group) {
      if (group === this.group) return;
      this.group = group;
      this.hover = null;
      if (this.opts.tooltip) this.opts.tooltip.hidden = true;
      this.renderLegend();
      this.requestRender();
    }

    toggleSeries(k) {
      const set = this.hidden[this.group];
      if (set.has(k)) set.delete(k);
      else set.add(k);
      this.renderLegend();
      this.requestRender();
    }

    toggleLine(name) {
      this.lines[name] = !this.lines[name];
      this.renderLegend();
      this.requestRender();
    }

    select(t) {
      this.selected = t;
      this.requestRender();
    }

    seriesColor(k) {
      const g = this.model.groups[this.group];
      if (this.group === "category") return F.categoryColor(g.names[k], k);
      return F.ownerColor(k, g.names.length, g.names[k]);
    }

    visibleMask() {
      const K = this.model.seriesCount(this.group);
      const set = this.hidden[this.group];
      const mask = new Uint8Array(K);
      for (let k = 0; k < K; k++) mask[k] = set.has(k) ? 0 : 1;
      return mask;
    }

    // ---- legend ---------------------------------------------------------------------------

    renderLegend() {
      const el = this.opts.legend;
      if (!el || !this.model) return;
      const m = this.model;
      const names = m.groups[this.group].names;
      const set = this.hidden[this.group];
      const items = names.map((name, k) => {
        const label = this.group === "category" ? name : name || "(no owner)";
        return '<button type="button" class="legend-item' + (set.has(k) ? " off" : "") + '" data-series="' + k + '" title="' + F.escapeHtml(label) + ' (click to show or hide)"><span class="swatch" style="background:' + this.seriesColor(k) + '"></span><span class="legend-label">' + F.escapeHtml(label) + "</span></button>";
      });
      const line = (name, label, cls) =>
        '<button type="button" class="legend-item line' + (this.lines[name] ? "" : " off") + '" data-line="' + name + '"><span class="line-swatch ' + cls + '"></span>' + F.escapeHtml(label) + "</button>";
      items.push('<span class="legend-sep"></span>');
      items.push(line("allocated", "allocated", "allocated"));
      items.push(line("reserved", "reserved", "reserved"));
      if (m.predicted) items.push(line("predicted", "predicted (" + m.predicted.label + ")", "predicted"));
      if (m.privatePools.length) items.push(line("pools", "reserved in private pools (CUDA graphs, MemPools)", "pools"));
      el.innerHTML = items.join("");
    }

    // ---- geometry -------------------------------------------------------------------------

    plot() {
      const m = this.margin;
      const bottom = m.bottom + this.regionBandsHeight();
      return { x: m.left, y: m.top, w: Math.max(10, this.cssWidth - m.left - m.right), h: Math.max(10, this.cssHeight - m.top - bottom) };
    }
    // Region bands sit below the axis labels, one row each; the compare view draws none.
    regionBandsHeight() {
      const rows = this.model && !this.opts.compact ? this.model.regionRows : 0;
      return rows ? rows * REGION_ROW + 4 : 0;
    }
    regionBandsTop(plot) {
      return plot.y + plot.h + this.margin.bottom;
    }
    xOf(d, plot) {
      plot = plot || this.plot();
      return plot.x + ((d - this.view.d0) / (this.view.d1 - this.view.d0)) * plot.w;
    }
    yOf(bytes, plot) {
      plot = plot || this.plot();
      return plot.y + plot.h - (bytes / this.yMax) * plot.h;
    }

    resize() {
      const parent = this.canvas.parentElement;
      const w = Math.max(200, Math.floor((parent && parent.clientWidth) || 800));
      const h = this.cssHeight;
      const dpr = root.devicePixelRatio || 1;
      if (w !== this.cssWidth || this.canvas.width !== Math.round(w * dpr) || this.canvas.height !== Math.round(h * dpr)) {
        this.cssWidth = w;
        this.canvas.style.width = w + "px";
        this.canvas.style.height = h + "px";
        this.canvas.width = Math.round(w * dpr);
        this.canvas.height = Math.round(h * dpr);
      }
      this.dpr = dpr;
    }

    // ---- drawing ----------------------------------------------------------------------------

    // Draws on the next animation frame, once, however many changes come before it.
    requestRender() {
      this.dirty = true;
      if (this.rafPending) return;
      this.rafPending = true;
      root.requestAnimationFrame(() => {
        this.rafPending = false;
        if (this.dirty) this.render();
      });
    }

    columns() {
      const plot = this.plot();
      const key = [this.mode, this.group, this.view.d0, this.view.d1, plot.w].join("|");
      if (this.cols && this.colsKey === key) return this.cols;
      this.cols = this.model.computeColumns({ mode: this.mode, d0: this.view.d0, d1: this.view.d1, width: plot.w, group: this.group });
      this.colsKey = key;
      return this.cols;
    }

    render() {
      const t0 = root.performance.now();
      this.dirty = false;
      this.resize();
      const ctx = this.ctx;
      ctx.setTransform(this.dpr, 0, 0, this.dpr, 0, 0);
      ctx.clearRect(0, 0, this.cssWidth, this.cssHeight);
      ctx.font = FONT;
      const m = this.model;
      if (!m) return;
      const plot = this.plot();
      if (m.E === 0) {
        ctx.fillStyle = COLORS.text;
        ctx.textAlign = "center";
        ctx.fillText("this device has no trace events: there is no timeline to draw", plot.x + plot.w / 2, plot.y + plot.h / 2);
        this.recordFrame(t0);
        return;
      }
      const cols = this.columns();
      const W = cols.W, K = cols.K;
      const vis = this.visibleMask();
      // Vertical scale: the highest visible curve in view.
      let yMax = 0;
      const showPred = this.lines.predicted && cols.predA;
      for (let p = 0; p < W; p++) {
        if (!cols.has[p]) continue;
        let stacked = 0;
        for (let k = 0; k < K; k++) if (vis[k]) stacked += cols.vals[p * K + k];
        yMax = Math.max(yMax, stacked, this.lines.allocated ? cols.alloc[p] : 0, this.lines.reserved ? cols.resv[p] : 0);
        if (showPred) yMax = Math.max(yMax, cols.predA[p], cols.predR[p]);
      }
      // A shared floor (the compare view) draws two reports on one scale.
      if (this.opts.yMaxFloor) yMax = Math.max(yMax, this.opts.yMaxFloor());
      this.yMax = yMax > 0 ? yMax * 1.08 : 1024;

      this.drawGrid(ctx, plot);
      ctx.save();
      ctx.beginPath();
      ctx.rect(plot.x, plot.y - 1, plot.w, plot.h + 1);
      ctx.clip();
      this.drawStack(ctx, plot, cols, vis);
      this.drawLines(ctx, plot, cols);
      this.drawMarkers(ctx, plot);
      this.drawHover(ctx, plot, cols);
      ctx.restore();
      this.drawAxes(ctx, plot);
      this.drawPhases(ctx, plot);
      this.drawRegions(ctx, plot);
      this.recordFrame(t0);
    }

    recordFrame(t0) {
      const dt = root.performance.now() - t0;
      this.lastFrameMs = dt;
      this.frameTimes.push(dt);
      if (this.frameTimes.length > 240) this.frameTimes.splice(0, this.frameTimes.length - 240);
      if (this.opts.onFrame) this.opts.onFrame(this, dt);
    }

    drawGrid(ctx, plot) {
      const ticks = F.byteTicks(this.yMax / 1.08, 5);
      ctx.strokeStyle = COLORS.grid;
      ctx.lineWidth = 1;
      ctx.fillStyle = COLORS.text;
      ctx.textAlign = "right";
      ctx.textBaseline = "middle";
      for (const t of ticks) {
        const y = Math.round(this.yOf(t.value, plot)) + 0.5;
        if (y < plot.y - 1) continue;
        ctx.beginPath();
        ctx.moveTo(plot.x, y);
        ctx.lineTo(plot.x + plot.w, y);
        ctx.stroke();
        ctx.fillText(t.label, plot.x - 6, y);
      }
    }

    drawStack(ctx, plot, cols, vis) {
      const W = cols.W, K = cols.K;
      let p0 = 0, p1 = W - 1;
      while (p0 < W && !cols.has[p0]) p0++;
      while (p1 >= 0 && !cols.has[p1]) p1--;
      if (p0 > p1) return;
      const dpr = this.dpr || 1;
      const snap = (v) => Math.round(v * dpr) / dpr;
      const xs = new Float64Array(W + 1);
      for (let p = p0; p <= p1 + 1; p++) xs[p] = snap(plot.x + p);
      const base = snap(plot.y + plot.h);
      let below = new Float64Array(W).fill(base); // y of the top of the bands drawn so far
      let acc = new Float64Array(W);
      for (let k = 0; k < K; k++) {
        if (!vis[k]) continue;
        const top = new Float64Array(W);
        let any = false;
        for (let p = p0; p <= p1; p++) {
          const v = cols.vals[p * K + k];
          if (v > 0) any = true;
          acc[p] += v;
          top[p] = snap(this.yOf(acc[p], plot));
        }
        if (any) {
          ctx.fillStyle = this.seriesColor(k);
          ctx.beginPath();
          ctx.moveTo(xs[p0], below[p0]);
          for (let p = p0; p <= p1; p++) {
            ctx.lineTo(xs[p], top[p]);
            ctx.lineTo(xs[p + 1], top[p]);
          }
          for (let p = p1; p >= p0; p--) {
            ctx.lineTo(xs[p + 1], below[p]);
            ctx.lineTo(xs[p], below[p]);
          }
          ctx.closePath();
          ctx.fill();
        }
        below = top;
      }
    }

    strokeSteps(ctx, plot, cols, values, color, width, dash) {
      ctx.strokeStyle = color;
      ctx.lineWidth = width;
      ctx.setLineDash(dash || []);
      ctx.beginPath();
      let started = false;
      for (let p = 0; p < cols.W; p++) {
        if (!cols.has[p]) {
          started = false;
          continue;
        }
        const y = this.yOf(values[p], plot);
        if (!started) {
          ctx.moveTo(plot.x + p, y);
          started = true;
        } else ctx.lineTo(plot.x + p, y);
        ctx.lineTo(plot.x + p + 1, y);
      }
      ctx.stroke();
      ctx.setLineDash([]);
    }

    drawLines(ctx, plot, cols) {
      if (this.lines.predicted && cols.predA) {
        this.strokeSteps(ctx, plot, cols, cols.predR, COLORS.predictedReserved, 1.5, [2, 3]);
        this.strokeSteps(ctx, plot, cols, cols.predA, COLORS.predictedAllocated, 1.5, [2, 3]);
      }
      if (this.lines.reserved) this.strokeSteps(ctx, plot, cols, cols.resv, COLORS.reserved, 1.25, [5, 3]);
      if (this.lines.pools && cols.pools) {
        cols.pools.forEach((curve, k) => this.strokeSteps(ctx, plot, cols, curve, POOL_COLORS[k % POOL_COLORS.length], 1.5, [1, 2]));
      }
      if (this.lines.allocated) this.strokeSteps(ctx, plot, cols, cols.alloc, COLORS.allocated, 1.25);
    }

    // The x (CSS px) of the middle of event e, or null when out of view.
    eventX(e, plot) {
      const m = this.model;
      const x0 = this.xOf(m.pos(e, this.mode), plot), x1 = this.xOf(m.pos(e + 1, this.mode), plot);
      if (x1 < plot.x || x0 > plot.x + plot.w) return null;
      return Math.floor((Math.max(x0, plot.x) + Math.min(x1, plot.x + plot.w)) / 2) + 0.5;
    }

    drawMarkers(ctx, plot) {
      const m = this.model;
      const s = m.summary;
      ctx.textBaseline = "alphabetic";
      if (this.selected >= 0 && this.selected < m.E) {
        const x = this.eventX(this.selected, plot);
        if (x !== null) {
          ctx.strokeStyle = COLORS.selected;
          ctx.lineWidth = 1.5;
          ctx.beginPath();
          ctx.moveTo(x, plot.y);
          ctx.lineTo(x, plot.y + plot.h);
          ctx.stroke();
        }
      }
      if (s && s.peak_event >= -1 && s.peak_event < m.E) {
        // A peak before the first event (-1) is marked at the start of the axis.
        const x = s.peak_event < 0 ? (this.view.d0 <= 0 ? plot.x + 0.5 : null) : this.eventX(s.peak_event, plot);
        if (x !== null) {
          const y = this.yOf(s.peak_allocated, plot);
          ctx.strokeStyle = COLORS.peak;
          ctx.lineWidth = 1;
          ctx.setLineDash([3, 3]);
          ctx.beginPath();
          ctx.moveTo(x, y);
          ctx.lineTo(x, plot.y + plot.h);
          ctx.stroke();
          ctx.setLineDash([]);
          ctx.fillStyle = COLORS.peak;
          ctx.beginPath();
          ctx.arc(x, y, 3.5, 0, Math.PI * 2);
          ctx.fill();
          const label = "peak " + F.formatBytes(s.peak_allocated) + (s.peak_event < 0 ? " (before the trace)" : "");
          ctx.font = "600 " + FONT;
          const w = ctx.measureText(label).width;
          const lx = x + 6 + w > plot.x + plot.w ? x - 6 - w : x + 6;
          ctx.textAlign = "left";
          ctx.fillText(label, lx, Math.max(plot.y + 10, y - 5));
          ctx.font = FONT;
        }
      }
    }

    drawHover(ctx, plot, cols) {
      const h = this.hover;
      if (!h || h.column === undefined) return;
      const x = plot.x + h.column + 0.5;
      ctx.strokeStyle = "rgba(31,35,40,0.35)";
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(x, plot.y);
      ctx.lineTo(x, plot.y + plot.h);
      ctx.stroke();
      if (h.band) {
        const yTop = this.yOf(h.band.base + h.band.size, plot), yBot = this.yOf(h.band.base, plot);
        ctx.strokeStyle = "#1f2328";
        ctx.lineWidth = 1.5;
        ctx.strokeRect(x - 4, yTop, 8, Math.max(1, yBot - yTop));
        // The allocation's lifetime, along the bottom of the plot.
        const a = h.allocation;
        const xs = Math.max(plot.x, this.xOf(this.model.pos(Math.max(0, a.start), this.mode), plot));
        const xe = Math.min(plot.x + plot.w, this.xOf(this.model.pos(a.end, this.mode), plot));
        ctx.fillStyle = F.categoryColor(a.category, a.categoryIndex);
        ctx.fillRect(xs, plot.y + plot.h - 4, Math.max(2, xe - xs), 4);
        ctx.strokeStyle = "#1f2328";
        ctx.lineWidth = 1;
        ctx.strokeRect(xs, plot.y + plot.h - 4, Math.max(2, xe - xs), 4);
      }
    }

    drawAxes(ctx, plot) {
      const m = this.model;
      ctx.strokeStyle = COLORS.axis;
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(plot.x, plot.y + plot.h + 0.5);
      ctx.lineTo(plot.x + plot.w, plot.y + plot.h + 0.5);
      ctx.stroke();
      const ticks = this.mode === "time" ? F.timeTicks(this.view.d0, this.view.d1, Math.max(2, Math.floor(plot.w / 110))) : F.eventTicks(this.view.d0, this.view.d1, Math.max(2, Math.floor(plot.w / 110)));
      ctx.fillStyle = COLORS.text;
      ctx.textAlign = "center";
      ctx.textBaseline = "top";
      const ty = plot.y + plot.h + 14;
      for (const t of ticks.ticks) {
        const x = Math.round(this.xOf(t.value, plot)) + 0.5;
        if (x < plot.x - 1 || x > plot.x + plot.w + 1) continue;
        ctx.beginPath();
        ctx.moveTo(x, plot.y + plot.h);
        ctx.lineTo(x, plot.y + plot.h + 4);
        ctx.stroke();
        ctx.fillText(t.label, x, ty);
      }
      ctx.textAlign = "right";
      ctx.fillText(this.mode === "time" ? "time (" + ticks.unit + ")" : "event", plot.x + plot.w, ty + 14);
      ctx.textAlign = "left";
      const [e0, e1] = this.eventRange();
      if (!this.opts.compact) ctx.fillText("events " + F.formatCount(e0) + "–" + F.formatCount(e1 - 1) + " of " + F.formatCount(m.E), plot.x, ty + 14);
    }

    phaseBand(plot) {
      return { y: plot.y + plot.h + 3, h: 7 };
    }

    // Phases in view only, and at most one sub-pixel phase per pixel: a long run has 100,000.
    drawPhases(ctx, plot) {
      const m = this.model;
      const phases = m.phases;
      if (!phases.length) return;
      const band = this.phaseBand(plot);
      const e0 = Math.max(0, m.eventAt(this.view.d0, this.mode));
      const e1 = m.eventBefore(this.view.d1, this.mode);
      let lastPixel = -Infinity;
      for (let i = Math.max(0, M.lastLE(m.phaseFirst, e0) - 1); i < phases.length && phases[i].first_event <= e1; i++) {
        const ph = phases[i];
        let x0 = this.xOf(m.pos(ph.first_event, this.mode), plot);
        let x1 = this.xOf(m.pos(ph.last_event + 1, this.mode), plot);
        if (x1 < plot.x || x0 > plot.x + plot.w) continue;
        x0 = Math.max(plot.x, x0);
        x1 = Math.min(plot.x + plot.w, x1);
        if (x1 - x0 < 1) {
          const px = Math.floor(x0);
          if (px === lastPixel) continue;
          lastPixel = px;
          x0 = px;
          x1 = px + 1;
          // Skip the other phases that start in this pixel.
          const next = M.lastLE(m.phaseFirst, m.eventAt(this.view.d0 + ((px + 1 - plot.x) / plot.w) * (this.view.d1 - this.view.d0), this.mode)) - 1;
          if (next > i) i = next;
        }
        ctx.fillStyle = F.phaseColor(ph.phase);
        ctx.fillRect(x0, band.y, x1 - x0, band.h);
      }
    }

    // Region bands in view, at most one sub-pixel band per pixel and row.
    drawRegions(ctx, plot) {
      const m = this.model;
      if (!this.regionBandsHeight()) return;
      const top = this.regionBandsTop(plot);
      const e0 = Math.max(0, m.eventAt(this.view.d0, this.mode));
      const e1 = m.eventBefore(this.view.d1, this.mode);
      const lastPixel = new Map();
      for (const b of m.regions) {
        if (b.last_event < e0 || b.first_event > e1) continue;
        let x0 = Math.max(plot.x, this.xOf(m.pos(b.first_event, this.mode), plot));
        let x1 = Math.min(plot.x + plot.w, this.xOf(m.pos(b.last_event + 1, this.mode), plot));
        if (x1 - x0 < 1) {
          const px = Math.floor(x0);
          if (lastPixel.get(b.row) === px) continue;
          lastPixel.set(b.row, px);
          x0 = px;
          x1 = px + 1;
        }
        const selected = this.hover && this.hover.region === b;
        ctx.fillStyle = regionColor(b.name, selected);
        ctx.fillRect(x0, top + b.row * REGION_ROW, x1 - x0, REGION_ROW - 2);
      }
    }

    // ---- hover ------------------------------------------------------------------------------

    // The data under a point (client coordinates), shown in the tooltip; null when nothing is.
    hoverAt(clientX, clientY) {
      if (this.dirty) this.render(); // the columns and scale must be the ones on screen
      const data = this.pick(clientX, clientY);
      const changed = JSON.stringify(this.hoverKey(data)) !== JSON.stringify(this.hoverKey(this.hover));
      this.hover = data;
      this.showTooltip(data, clientX, clientY);
      if (changed) this.requestRender();
      return data;
    }

    hoverKey(h) {
      if (!h) return null;
      return [h.column, h.allocation ? h.allocation.index : -1, h.phase ? h.phase.first_event : -1, h.region ? h.region.index : -1];
    }

    pick(clientX, clientY) {
      const m = this.model;
      if (!m || m.E === 0 || !this.cols) return null;
      const rect = this.canvas.getBoundingClientRect();
      const x = clientX - rect.left, y = clientY - rect.top;
      const plot = this.plot();
      if (x < plot.x || x >= plot.x + plot.w) return null;
      const band = this.phaseBand(plot);
      if (y >= band.y - 1 && y <= band.y + band.h + 1) {
        const d = this.view.d0 + ((x - plot.x) / plot.w) * (this.view.d1 - this.view.d0);
        const e = m.eventAt(d, this.mode);
        const ph = m.phaseAt(e);
        return ph ? { kind: "phase", phase: ph, event: e } : null;
      }
      const bands = this.regionBandsHeight();
      const top = this.regionBandsTop(plot);
      if (bands && y >= top && y < top + bands) {
        const d = this.view.d0 + ((x - plot.x) / plot.w) * (this.view.d1 - this.view.d0);
        const e = m.eventAt(d, this.mode);
        const region = m.regionAt(Math.floor((y - top) / REGION_ROW), e);
        return region ? { kind: "region", region, event: e } : null;
      }
      if (y < plot.y || y > plot.y + plot.h) return null;
      const cols = this.cols;
      const p = Math.floor(x - plot.x);
      if (p < 0 || p >= cols.W || !cols.has[p]) return null;
      const t = cols.event[p];
      const bytes = ((plot.y + plot.h - y) / plot.h) * this.yMax;
      const K = cols.K;
      const row = cols.vals.subarray(p * K, p * K + K);
      const data = {
        kind: "memory", column: p, event: t, timeUs: m.timeOf(t), bytes,
        allocated: cols.alloc[p], reserved: cols.resv[p],
        pools: cols.pools ? m.privatePools.map((pool, k) => ({ label: pool.label, bytes: cols.pools[k][p] })) : [],
        predictedAllocated: cols.predA ? cols.predA[p] : null, predictedReserved: cols.predR ? cols.predR[p] : null,
        exact: !!(cols.source && (cols.source.exact || cols.source.bucket === 1)), // values exact, not a bucket's peak
        group: this.group, series: null, seriesName: null, seriesBytes: null, allocation: null, band: null,
      };
      const pickd = M.DeviceModel.stackPick(row, K, this.visibleMask(), bytes);
      if (pickd) {
        data.series = pickd.series;
        data.seriesName = m.groups[this.group].names[pickd.series];
        data.seriesBytes = row[pickd.series];
        const hit = m.hitTest(t, this.group, pickd.series, pickd.offset);
        if (hit) {
          data.allocation = m.allocation(hit.index, t);
          data.band = { base: pickd.base + hit.below, size: data.allocation.size };
        }
      }
      return data;
    }

    showTooltip(data, clientX, clientY) {
      const tip = this.opts.tooltip;
      if (!tip) return;
      if (!data) {
        tip.hidden = true;
        return;
      }
      tip.innerHTML = tooltipHtml(this.model, data);
      showTooltipAt(tip, clientX, clientY);
    }

    // ---- events -----------------------------------------------------------------------------

    attach() {
      const c = this.canvas;
      c.addEventListener("wheel", (ev) => {
        if (!this.model || this.model.E === 0) return;
        ev.preventDefault();
        const unit = ev.deltaMode === 1 ? 16 : ev.deltaMode === 2 ? 400 : 1;
        const dy = Math.max(-400, Math.min(400, ev.deltaY * unit));
        const rect = c.getBoundingClientRect();
        this.zoomBy(Math.exp(dy * 0.0025), ev.clientX - rect.left);
        this.queueHover(ev.clientX, ev.clientY);
      }, { passive: false });
      c.addEventListener("mousedown", (ev) => {
        if (ev.button !== 0 || !this.model) return;
        ev.preventDefault();
        this.drag = { x: ev.clientX, d0: this.view.d0, d1: this.view.d1, moved: false };
        c.classList.add("dragging");
      });
      root.addEventListener("mousemove", (ev) => {
        if (this.drag) {
          const dx = ev.clientX - this.drag.x;
          if (Math.abs(dx) > 3) this.drag.moved = true;
          if (this.drag.moved) {
            const span = this.drag.d1 - this.drag.d0;
            const dd = (-dx / this.plot().w) * span;
            this.setView(this.drag.d0 + dd, this.drag.d1 + dd);
          }
        }
      });
      root.addEventListener("mouseup", (ev) => {
        if (!this.drag) return;
        const drag = this.drag;
        this.drag = null;
        c.classList.remove("dragging");
        if (!drag.moved && ev.target === c) this.clickAt(ev.clientX, ev.clientY);
      });
      c.addEventListener("mousemove", (ev) => this.queueHover(ev.clientX, ev.clientY));
      c.addEventListener("mouseleave", () => {
        this.hoverPending = null;
        if (this.hover) {
          this.hover = null;
          this.requestRender();
        }
        if (this.opts.tooltip) this.opts.tooltip.hidden = true;
      });
      if (this.opts.legend) {
        this.opts.legend.addEventListener("click", (ev) => {
          const b = ev.target.closest("button");
          if (!b) return;
          if (b.dataset.series !== undefined) this.toggleSeries(Number(b.dataset.series));
          else if (b.dataset.line) this.toggleLine(b.dataset.line);
        });
      }
      if (typeof ResizeObserver !== "undefined" && c.parentElement) {
        new ResizeObserver(() => this.requestRender()).observe(c.parentElement);
      }
    }

    // Hover work (a scan of the allocations) at most once per animation frame.
    queueHover(clientX, clientY) {
      const first = !this.hoverPending;
      this.hoverPending = { clientX, clientY };
      if (!first) return;
      root.requestAnimationFrame(() => {
        const h = this.hoverPending;
        this.hoverPending = null;
        if (h && !this.drag) this.hoverAt(h.clientX, h.clientY);
      });
    }

    clickAt(clientX) {
      if (!this.model || this.model.E === 0) return;
      const rect = this.canvas.getBoundingClientRect();
      const plot = this.plot();
      const x = clientX - rect.left;
      if (x < plot.x || x >= plot.x + plot.w) return;
      const p = Math.floor(x - plot.x);
      let t;
      if (this.cols && this.cols.has[p]) t = this.cols.event[p];
      else t = Math.max(0, this.model.eventAt(this.view.d0 + ((x - plot.x) / plot.w) * (this.view.d1 - this.view.d0), this.mode));
      this.select(t);
      if (this.opts.onSelect) this.opts.onSelect(t);
    }
  }

  // ---- the tooltip (shared with the other views) ----------------------------------------------

  function showTooltipAt(tip, clientX, clientY) {
    tip.hidden = false;
    const vw = root.innerWidth || 1200, vh = root.innerHeight || 800;
    const r = tip.getBoundingClientRect();
    let x = clientX + 16, y = clientY + 16;
    if (x + r.width > vw - 8) x = Math.max(8, clientX - 16 - r.width);
    if (y + r.height > vh - 8) y = Math.max(8, clientY - 16 - r.height);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }

  // ".../site-packages/torch/nn/modules/conv.py" -> "torch/nn/modules/conv.py"; other long
  // paths keep their last three parts.
  function shortPath(file) {
    const pkg = /(?:site|dist)-packages\/(.*)$/.exec(file);
    if (pkg) return pkg[1];
    const parts = file.split("/");
    return parts.length > 4 ? "…/" + parts.slice(-3).join("/") : file;
  }

  // Frames from model.stackFrames: a jump in `index` is where frames were left out.
  function framesHtml(frames, more) {
    if (!frames.length) return '<div class="tt-muted">no stack recorded</div>';
    const rows = [];
    let next = 0;
    for (const f of frames) {
      const index = f.index === undefined ? next : f.index;
      if (index > next) rows.push('<li class="more">… ' + F.formatCount(index - next) + " more</li>");
      next = index + 1;
      const where = f.file ? F.escapeHtml(shortPath(f.file)) + (f.line ? ":" + f.line : "") : "";
      rows.push('<li class="' + (f.project ? "project" : "") + '"><span class="fn">' + F.escapeHtml(f.function || "?") + "</span> " + '<span class="loc">' + where + "</span></li>");
    }
    const tail = more - (next - frames.length); // left out after the last frame shown
    if (tail > 0) rows.push('<li class="more">… ' + F.formatCount(tail) + " more</li>");
    return '<ol class="tt-stack">' + rows.join("") + "</ol>";
  }

  function eventLine(m, t) {
    const time = m.timeOf(t);
    return "event " + F.formatCount(t) + (time !== null ? " · " + F.formatTimeUs(time) : "");
  }

  // A region's colour: a hue from its name, so one name keeps its colour across rows and redraws.
  function regionColor(name, selected) {
    let h = 0;
    for (let i = 0; i < name.length; i++) h = (h * 31 + name.charCodeAt(i)) >>> 0;
    return "hsl(" + (h % 360) + ", 55%, " + (selected ? 38 : 58) + "%)";
  }

  function regionHtml(m, b) {
    const kinds = { annotation_range: "annotation range", compile_context: "compiled region (compile_context)" };
    const rows = [
      ["kind", kinds[b.kind] || b.kind],
      ["allocated", F.formatBytes(b.allocated_bytes) + " over the trace"],
      ["live at peak", F.formatBytes(b.live_at_peak_bytes)],
      ["own peak", F.formatBytes(b.peak_bytes)],
      ["events", F.formatCount(b.first_event) + "–" + F.formatCount(b.last_event)],
    ];
    if (b.unmatched) rows.push(["note", "its START or END is not in the trace"]);
    return '<div class="tt-title"><span class="swatch" style="background:' + regionColor(b.name, false) + '"></span>' + F.escapeHtml(b.name) + "</div>" + '<table class="tt-table">' + rows.map((r) => "<tr><th>" + r[0] + "</th><td>" + F.escapeHtml(r[1]) + "</td></tr>").join("") + "</table>";
  }

  function tooltipHtml(m, d) {
    if (d.kind === "region") return regionHtml(m, d.region);
    if (d.kind === "phase") {
      const p = d.phase;
      return '<div class="tt-title"><span class="swatch" style="background:' + F.phaseColor(p.phase) + '"></span>step ' + F.escapeHtml(String(p.step)) + " · " + F.escapeHtml(p.phase) + "</div>" + '<div class="tt-muted">events ' + F.formatCount(p.first_event) + "–" + F.formatCount(p.last_event) + "</div>";
    }
    const out = [];
    const a = d.allocation;
    if (a) {
      out.push('<div class="tt-title"><span class="swatch" style="background:' + F.categoryColor(a.category, a.categoryIndex) + '"></span>' + F.escapeHtml(a.category) + " · " + F.formatBytes(a.size) + "</div>");
      const rows = [];
      if (a.requested !== a.size) rows.push(["requested", F.formatBytes(a.requested) + " (" + F.formatBytes(a.size - a.requested) + " rounding)"]);
      rows.push(["owner", a.owner || "—"]);
      if (a.op) rows.push(["operation", a.op]);
      const when = [];
      if (a.step >= 0) when.push("step " + a.step);
      if (a.phase && a.phase !== "none" && a.phase !== "unknown") when.push(a.phase);
      rows.push(["live", (a.start < 0 ? "before the trace" : "event " + F.formatCount(a.start)) + " → " + (a.end >= m.E ? "the end" : "event " + F.formatCount(a.end)) + (when.length ? " (" + when.join(", ") + ")" : "")]);
      if (a.address > 0) rows.push(["address", F.formatAddress(a.address)]);
      out.push('<table class="tt-table">' + rows.map((r) => "<tr><th>" + r[0] + "</th><td>" + F.escapeHtml(r[1]) + "</td></tr>").join("") + "</table>");
      out.push(framesHtml(a.frames, a.moreFrames));
    } else if (d.seriesName !== null && d.seriesName !== undefined) {
      out.push('<div class="tt-title">' + F.escapeHtml(d.seriesName || "(no owner)") + " · " + F.formatBytes(d.seriesBytes) + "</div>");
    }
    const lines = [eventLine(m, d.event), "allocated " + F.formatBytes(d.allocated) + " · reserved " + F.formatBytes(d.reserved)];
    for (const pool of d.pools || []) lines.push("private pool " + pool.label + " reserved " + F.formatBytes(pool.bytes));
    if (d.predictedAllocated !== null && d.predictedAllocated !== undefined) lines.push("predicted " + F.formatBytes(d.predictedAllocated) + " · " + F.formatBytes(d.predictedReserved));
    out.push('<div class="tt-foot">' + lines.map(F.escapeHtml).join("<br>") + "</div>");
    return out.join("");
  }

  const api = { Timeline, tooltipHtml, framesHtml, shortPath, showTooltipAt, regionColor, COLORS };
  ns.timeline = api;
  if (typeof module !== "undefined") module.exports = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
