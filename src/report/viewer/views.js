// vramscope viewer: the views under the timeline (DOM): allocator state at a moment, the
// breakdown at the peak with its icicle graph, and the comparison of two reports.
(function (root) {
  "use strict";
  const ns = (root.vramscope = root.vramscope || {});
  const F = ns.format;
  const A = ns.analysis;
  const T = ns.timeline;

  function h(text) {
    return F.escapeHtml(text);
  }
  function swatch(color) {
    return '<span class="swatch" style="background:' + color + '"></span>';
  }
  function catColor(m, c) {
    return F.categoryColor(m.categories[c], c);
  }
  // Event -1 is the state before the first event (what was live when the trace began): the
  // summary's peaks can be there, e.g. in a snapshot without history.
  function whenHtml(m, t) {
    if (t < 0) return "the start of the trace (before event 0)";
    const time = m.timeOf(t);
    return "event " + F.formatCount(t) + (time !== null ? " (" + F.formatTimeUs(time) + ")" : "");
  }

  // One allocation as a tooltip (the allocator view's blocks, the owner tables).
  function allocationTooltip(m, i, t) {
    const a = m.allocation(i, t);
    const rows = [["size", F.formatBytes(a.size) + (a.requested !== a.size ? " (requested " + F.formatBytes(a.requested) + ", " + F.formatBytes(a.size - a.requested) + " rounding)" : "")]];
    rows.push(["owner", a.owner || "—"]);
    if (a.op) rows.push(["operation", a.op]);
    rows.push(["address", F.formatAddress(a.address)]);
    rows.push(["live", (a.start < 0 ? "before the trace" : "event " + F.formatCount(a.start)) + " → " + (a.end >= m.E ? "the end" : "event " + F.formatCount(a.end))]);
    if (a.pending) rows.push(["state", "free requested, not yet completed (the block is not reusable yet)"]);
    return '<div class="tt-title">' + swatch(F.categoryColor(a.category, a.categoryIndex)) + h(a.category) + " · " + F.formatBytes(a.size) + "</div>" +
      '<table class="tt-table">' + rows.map((r) => "<tr><th>" + r[0] + "</th><td>" + h(r[1]) + "</td></tr>").join("") + "</table>" + T.framesHtml(a.frames, a.moreFrames);
  }

  // ---- allocator state ------------------------------------------------------------------------

  const SEGMENTS_PER_PAGE = 40;
  const BLOCKS_PER_PAGE = 100;

  class AllocatorView {
    constructor(root, tooltip) {
      this.root = root;
      this.tooltip = tooltip;
      this.when = root.querySelector("#alloc-when");
      this.summary = root.querySelector("#alloc-summary");
      this.list = root.querySelector("#alloc-segments");
      this.more = root.querySelector("#alloc-more");
      this.model = null;
      this.state = null;
      this.shown = 0;
      this.more.addEventListener("click", () => this.renderMore());
      this.list.addEventListener("mousemove", (ev) => {
        const el = ev.target.closest("[data-alloc]");
        if (!el || !this.model) {
          this.tooltip.hidden = true;
          return;
        }
        this.tooltip.innerHTML = allocationTooltip(this.model, Number(el.dataset.alloc), this.state.t);
        T.showTooltipAt(this.tooltip, ev.clientX, ev.clientY);
      });
      this.list.addEventListener("mouseleave", () => (this.tooltip.hidden = true));
    }

    show(model, t) {
      this.model = model;
      this.state = A.allocatorState(model, t);
      const s = this.state, tot = s.totals;
      this.when.innerHTML = "at " + whenHtml(model, t) + (model.summary.peak_event === t ? ' <span class="badge peak">peak</span>' : "");
      const parts = [];
      if (s.source === "none") {
        parts.push('<p class="notice">This report records no segments (source "none"): the blocks live at this event are listed by address, without the cached free space around them.</p>');
      } else {
        parts.push('<div class="stats">' +
          stat("segments", F.formatCount(tot.segments) + (s.source === "model" ? " (from the allocator model)" : "")) +
          stat("reserved", F.formatBytes(tot.reserved)) +
          stat("allocated", F.formatBytes(tot.allocated)) +
          stat("pending free", F.formatBytes(tot.pending)) +
          stat("cached free", F.formatBytes(tot.free)) +
          stat("rounding waste", F.formatBytes(tot.waste)) +
          "</div>");
        parts.push('<div class="bar-legend"><span><span class="key alloc"></span>allocated (category colour)</span><span><span class="key pending"></span>free requested, pending</span><span><span class="key free"></span>cached free</span><span><span class="key waste"></span>rounding waste</span><span class="muted">each bar spans its segment; segments sorted by address</span></div>');
      }
      for (const p of s.problems) parts.push('<p class="notice warn">' + h(p) + "</p>");
      this.summary.innerHTML = parts.join("");
      this.list.innerHTML = "";
      this.shown = 0;
      this.renderMore();
    }

    items() {
      const s = this.state;
      return s.source === "none" ? s.unplaced : s.segments.concat(s.unplaced.length ? [{ unplaced: true }] : []);
    }

    renderMore() {
      const s = this.state;
      const items = this.items();
      const per = s.source === "none" ? BLOCKS_PER_PAGE : SEGMENTS_PER_PAGE;
      const next = items.slice(this.shown, this.shown + per);
      let html = "";
      if (s.source === "none") {
        if (this.shown === 0) html += blockTableHead();
        html += next.map((b) => blockRow(this.model, b)).join("");
        if (this.shown === 0) {
          this.list.innerHTML = '<table class="data blocks">' + html + "</table>";
        } else this.list.querySelector("table").insertAdjacentHTML("beforeend", html);
        if (!items.length) this.list.innerHTML = '<p class="muted">nothing is live at this event</p>';
      } else {
        const problems = this.state.problems.length;
        html = next.map((seg) => (seg.unplaced ? this.unplacedHtml() : this.segmentHtml(seg))).join("");
        this.list.insertAdjacentHTML("beforeend", html);
        // Segments detailed just now may have found problems of their own.
        for (const p of this.state.problems.slice(problems)) this.summary.insertAdjacentHTML("beforeend", '<p class="notice warn">' + h(p) + "</p>");
        if (!items.length) this.list.innerHTML = '<p class="muted">no segment is live at this event</p>';
      }
      this.shown += next.length;
      const left = items.length - this.shown;
      this.more.hidden = left <= 0;
      this.more.textContent = "show " + Math.min(left, per) + " more (" + F.formatCount(left) + " left)";
    }

    segmentHtml(seg) {
      const m = this.model;
      A.segmentDetail(this.state, seg);
      const pct = (x) => ((x / seg.size) * 100).toFixed(4) + "%";
      const blocks = seg.blocks.map((b) => {
        const waste = b.size > 0 ? Math.max(0, b.size - b.requested) / b.size : 0;
        const color = catColor(m, b.category);
        return '<div class="blk' + (b.pending ? " pending" : "") + '" data-alloc="' + b.alloc + '" style="left:' + pct(b.offset) + ";width:" + pct(b.size) + ";--c:" + color + '">' +
          (waste > 0 ? '<div class="waste" style="width:' + (waste * 100).toFixed(3) + '%"></div>' : "") + "</div>";
      });
      const used = seg.allocatedBytes + seg.pendingBytes;
      return '<div class="segment"><div class="seg-head">' +
        '<span class="addr">' + F.formatAddress(seg.address) + "</span>" +
        '<span class="size">' + F.formatBytes(seg.size) + "</span>" +
        '<span class="tag">' + seg.pool + " pool</span>" +
        '<span class="tag">stream ' + h(String(seg.stream)) + "</span>" +
        '<span class="muted">' + F.formatCount(seg.blocks.length) + " block" + (seg.blocks.length === 1 ? "" : "s") + " · " + F.formatBytes(used) + " in use (" + F.formatPercent(seg.size > 0 ? used / seg.size : 0, 0) + ")" +
        (seg.pendingBytes ? " · " + F.formatBytes(seg.pendingBytes) + " pending" : "") +
        " · free " + F.formatBytes(seg.freeBytes) + (seg.gaps.length > 1 ? " in " + seg.gaps.length + " pieces, largest " + F.formatBytes(seg.largestFree) : "") + "</span>" +
        '</div><div class="seg-bar">' + blocks.join("") + "</div></div>";
    }

    unplacedHtml() {
      const s = this.state;
      const rows = s.unplaced.slice(0, BLOCKS_PER_PAGE).map((b) => blockRow(this.model, b)).join("");
      const more = s.unplaced.length > BLOCKS_PER_PAGE ? '<p class="muted">… and ' + F.formatCount(s.unplaced.length - BLOCKS_PER_PAGE) + " more</p>" : "";
      return '<div class="segment"><div class="seg-head"><span class="addr">blocks in no known segment</span></div><table class="data blocks">' + blockTableHead() + rows + "</table>" + more + "</div>";
    }
  }

  function stat(label, value) {
    return '<div class="stat"><div class="stat-label">' + h(label) + '</div><div class="stat-value">' + value + "</div></div>";
  }

  function blockTableHead() {
    return "<tr><th>address</th><th class=\"num\">size</th><th>category</th><th>owner</th><th>state</th></tr>";
  }
  function blockRow(m, b) {
    const owner = m.report.owners[m.a.owner[b.alloc]] || "—";
    return '<tr data-alloc="' + b.alloc + '"><td class="mono">' + F.formatAddress(b.address) + '</td><td class="num">' + F.formatBytes(b.size) + "</td><td>" + swatch(catColor(m, b.category)) + h(m.categories[b.category]) + '</td><td class="owner">' + h(owner) + "</td><td>" + (b.pending ? "pending free" : "allocated") + "</td></tr>";
  }

  // ---- the peak -------------------------------------------------------------------------------

  class PeakView {
    constructor(root, tooltip, onToggle) {
      this.root = root;
      this.tooltip = tooltip;
      this.title = root.querySelector("#peak-when");
      this.bar = root.querySelector("#category-bar");
      this.catTable = root.querySelector("#category-table");
      this.ownerTable = root.querySelector("#owner-table");
      this.useSelected = root.querySelector("#peak-use-selected");
      this.icicle = new Icicle(root.querySelector("#icicle-canvas"), tooltip, root.querySelector("#icicle-crumbs"));
      this.useSelected.addEventListener("change", () => onToggle && onToggle(this.useSelected.checked));
      this.bar.addEventListener("mousemove", (ev) => {
        const el = ev.target.closest("[data-tip]");
        if (!el) return;
        this.tooltip.innerHTML = el.dataset.tip;
        T.showTooltipAt(this.tooltip, ev.clientX, ev.clientY);
      });
      this.bar.addEventListener("mouseleave", () => (this.tooltip.hidden = true));
    }

    // t: the event shown; fromSummary: use the summary's breakdown (the peak) rather than recount.
    show(model, t, atPeak) {
      this.model = model;
      const live = t >= -1 ? model.liveAt(t) : new Int32Array(0);
      const counted = A.breakdownAt(model, t, live);
      let cats = counted.categories, owners = counted.owners, total = counted.total;
      const s = model.summary;
      if (atPeak && Array.isArray(s.categories_at_peak)) {
        // The report's own numbers at its peak (they agree with the recount on valid data).
        cats = s.categories_at_peak.slice();
        owners = (s.owners_at_peak || []).slice();
        total = cats.reduce((x, c) => x + c.bytes, 0);
      }
      this.title.innerHTML = (atPeak ? "the peak: " : "the selected moment: ") + "<strong>" + F.formatBytes(total) + "</strong> live at " + whenHtml(model, t) +
        " in " + F.formatCount(counted.count) + " allocations";
      const catIndex = (name) => model.categories.indexOf(name);
      const shown = cats.filter((c) => c.bytes > 0 || c.count > 0);
      this.bar.innerHTML = shown.map((c) => {
        const share = total > 0 ? c.bytes / total : 0;
        const tip = '<div class="tt-title">' + swatch(F.categoryColor(c.category, catIndex(c.category))) + h(c.category) + "</div>" + F.formatBytes(c.bytes) + " · " + F.formatPercent(share) + " · " + F.formatCount(c.count) + " allocations";
        return '<div class="seg" style="width:' + (share * 100).toFixed(3) + "%;background:" + F.categoryColor(c.category, catIndex(c.category)) + '" data-tip="' + h(tip) + '"></div>';
      }).join("");
      const all = model.categories.map((name) => cats.find((c) => c.category === name) || { category: name, bytes: 0, count: 0 });
      for (const c of cats) if (!all.includes(c)) all.push(c);
      all.sort((x, y) => y.bytes - x.bytes);
      this.catTable.innerHTML = "<thead><tr><th>category</th><th class=\"num\">bytes</th><th class=\"num\">share</th><th class=\"num\">count</th></tr></thead><tbody>" +
        all.map((c) => '<tr class="' + (c.bytes ? "" : "zero") + '"><td>' + swatch(F.categoryColor(c.category, catIndex(c.category))) + h(c.category) + '</td><td class="num">' + F.formatBytes(c.bytes) + '</td><td class="num">' + F.formatPercent(total > 0 ? c.bytes / total : 0) + '</td><td class="num">' + F.formatCount(c.count) + "</td></tr>").join("") +
        '</tbody><tfoot><tr><td>total</td><td class="num">' + F.formatBytes(total) + '</td><td class="num">100.0%</td><td class="num">' + F.formatCount(all.reduce((x, c) => x + c.count, 0)) + "</td></tr></tfoot>";
      const top = owners.slice(0, 20);
      this.ownerTable.innerHTML = "<thead><tr><th>owner</th><th>category</th><th class=\"num\">bytes</th><th class=\"num\">share</th><th class=\"num\">count</th></tr></thead><tbody>" +
        top.map((o) => '<tr><td class="owner" title="' + h(o.owner) + '">' + h(o.owner || "(no owner)") + "</td><td>" + swatch(F.categoryColor(o.category, catIndex(o.category))) + h(o.category) + '</td><td class="num">' + F.formatBytes(o.bytes) + '</td><td class="num">' + F.formatPercent(total > 0 ? o.bytes / total : 0) + '</td><td class="num">' + F.formatCount(o.count) + "</td></tr>").join("") +
        "</tbody>" + (owners.length > 20 ? '<tfoot><tr><td colspan="5" class="muted">' + F.formatCount(owners.length - 20) + " smaller owners not shown</td></tr></tfoot>" : "");
      this.icicle.setData(model, A.buildIcicle(model, live), atPeak ? "all memory live at the peak" : "all memory live at event " + F.formatCount(t));
    }
  }

  // ---- icicle -------------------------------------------------------------------------------------

  const ROW = 20;

  function hashString(s) {
    let x = 2166136261;
    for (let i = 0; i < s.length; i++) x = Math.imul(x ^ s.charCodeAt(i), 16777619);
    return x >>> 0;
  }

  class Icicle {
    constructor(canvas, tooltip, crumbs) {
      this.canvas = canvas;
      this.ctx = canvas.getContext("2d");
      this.tooltip = tooltip;
      this.crumbs = crumbs;
      this.tree = null;
      this.zoom = 0;
      this.layout = null;
      this.hovered = -1;
      canvas.addEventListener("mousemove", (ev) => this.onMove(ev));
      canvas.addEventListener("mouseleave", () => {
        this.tooltip.hidden = true;
        if (this.hovered !== -1) {
          this.hovered = -1;
          this.render();
        }
      });
      canvas.addEventListener("click", (ev) => {
        const r = this.rectAt(ev);
        if (!r) return;
        this.zoom = r.node;
        this.render();
      });
      if (crumbs) {
        crumbs.addEventListener("click", (ev) => {
          const b = ev.target.closest("[data-node]");
          if (!b) return;
          this.zoom = Number(b.dataset.node);
          this.render();
        });
      }
      if (typeof ResizeObserver !== "undefined" && canvas.parentElement) {
        let last = 0;
        new ResizeObserver(() => {
          const w = canvas.parentElement.clientWidth;
          if (w !== last && this.tree) {
            last = w;
            this.render();
          }
        }).observe(canvas.parentElement);
      }
    }

    setData(model, tree, rootLabel) {
      this.model = model;
      this.tree = tree;
      this.rootLabel = rootLabel;
      if (!(tree.total[this.zoom] > 0)) this.zoom = 0;
      this.render();
    }

    label(node) {
      if (node === 0) return this.rootLabel;
      const f = this.model.frameLabel(node);
      return f.function || (f.file ? f.file.split("/").pop() + ":" + f.line : "?");
    }

    color(node, rect) {
      if (node === 0) return "#d0d7de";
      const f = this.model.frameLabel(node);
      const v = hashString(f.function + f.file) % 12;
      if (rect.ancestor) return "#e6e9ed";
      return f.project ? "hsl(212, 55%, " + (62 + v) + "%)" : "hsl(34, 30%, " + (74 + v) + "%)";
    }

    render() {
      if (!this.tree) return;
      const wrap = this.canvas.parentElement;
      const width = Math.max(200, wrap.clientWidth || 800);
      this.layout = A.layoutIcicle(this.tree, this.zoom, width, 0.5);
      const height = Math.max(1, this.layout.depth) * ROW + 1;
      const dpr = root.devicePixelRatio || 1;
      this.canvas.style.width = width + "px";
      this.canvas.style.height = height + "px";
      this.canvas.width = Math.round(width * dpr);
      this.canvas.height = Math.round(height * dpr);
      const ctx = this.ctx;
      ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      ctx.clearRect(0, 0, width, height);
      ctx.font = '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
      ctx.textBaseline = "middle";
      const total = this.tree.total;
      for (const r of this.layout.rects) {
        const y = r.depth * ROW;
        ctx.fillStyle = this.color(r.node, r);
        ctx.fillRect(r.x, y, Math.max(0.5, r.w - 1), ROW - 1);
        if (r.node === this.hovered) {
          ctx.strokeStyle = "#1f2328";
          ctx.lineWidth = 1.5;
          ctx.strokeRect(r.x + 0.75, y + 0.75, Math.max(0.5, r.w - 2.5), ROW - 2.5);
        }
        if (r.w > 36) {
          const f = r.node === 0 ? null : this.model.frameLabel(r.node);
          ctx.fillStyle = f && f.project ? "#0b2545" : "#24292f";
          ctx.font = (f && f.project ? "600 " : "") + '11px system-ui, -apple-system, "Segoe UI", Roboto, sans-serif';
          const text = this.label(r.node) + " · " + F.formatBytes(total[r.node]);
          ctx.save();
          ctx.beginPath();
          ctx.rect(r.x, y, r.w - 4, ROW);
          ctx.clip();
          ctx.fillText(text, r.x + 4, y + ROW / 2);
          ctx.restore();
        }
      }
      if (this.crumbs) {
        const chain = [];
        for (let n = this.zoom, g = this.tree.parent.length; g-- > 0; n = this.tree.parent[n]) {
          chain.unshift(n);
          if (n === 0) break;
        }
        this.crumbs.innerHTML = this.zoom === 0 ? '<span class="muted">click a frame to zoom in</span>' :
          chain.map((n) => '<button type="button" class="crumb" data-node="' + n + '">' + h(this.label(n)) + "</button>").join('<span class="sep">›</span>');
      }
    }

    rectAt(ev) {
      if (!this.layout) return null;
      const b = this.canvas.getBoundingClientRect();
      const x = ev.clientX - b.left, y = ev.clientY - b.top;
      const depth = Math.floor(y / ROW);
      for (const r of this.layout.rects) if (r.depth === depth && x >= r.x && x < r.x + r.w) return r;
      return null;
    }

    onMove(ev) {
      const r = this.rectAt(ev);
      const node = r ? r.node : -1;
      if (node !== this.hovered) {
        this.hovered = node;
        this.render();
      }
      if (!r) {
        this.tooltip.hidden = true;
        return;
      }
      const t = this.tree;
      const rootBytes = t.total[0];
      let html;
      if (r.node === 0) {
        html = '<div class="tt-title">' + h(this.rootLabel) + "</div>" + F.formatBytes(rootBytes) + " in " + F.formatCount(t.count[0]) + " allocations";
      } else {
        const f = this.model.frameLabel(r.node);
        html = '<div class="tt-title' + (f.project ? " project" : "") + '">' + h(f.function || "?") + "</div>" +
          '<div class="mono">' + h(f.file + (f.line ? ":" + f.line : "")) + "</div>" +
          '<div>' + F.formatBytes(t.total[r.node]) + " (" + F.formatPercent(rootBytes > 0 ? t.total[r.node] / rootBytes : 0) + " of the live bytes) in " + F.formatCount(t.count[r.node]) + " allocations" +
          (t.self[r.node] > 0 ? "; " + F.formatBytes(t.self[r.node]) + " allocated right here" : "") + "</div>" +
          (f.project ? '<div class="tt-muted">a project file</div>' : "");
      }
      this.tooltip.innerHTML = html;
      T.showTooltipAt(this.tooltip, ev.clientX, ev.clientY);
    }
  }

  // ---- compare ----------------------------------------------------------------------------------

  function compareTableHtml(rows, titleA, titleB, categories) {
    const head = "<thead><tr><th></th><th class=\"num\">A: " + h(titleA) + "</th><th class=\"num\">B: " + h(titleB) + "</th><th class=\"num\">B − A</th><th class=\"num\">B / A</th></tr></thead>";
    const body = rows.map((r) => {
      const color = r.kind === "category" ? swatch(F.categoryColor(r.label, categories.indexOf(r.label))) : "";
      const cls = r.diff > 0 ? "up" : r.diff < 0 ? "down" : "";
      return '<tr class="' + r.kind + (r.a === 0 && r.b === 0 ? " zero" : "") + '"><td>' + color + h(r.label) + '</td><td class="num">' + F.formatBytes(r.a) + '</td><td class="num">' + F.formatBytes(r.b) + '</td><td class="num ' + cls + '">' + F.formatBytesDelta(r.diff) + '</td><td class="num">' + F.formatRatio(r.ratio) + "</td></tr>";
    });
    return head + "<tbody>" + body.join("") + "</tbody>";
  }

  const api = { AllocatorView, PeakView, Icicle, allocationTooltip, compareTableHtml };
  ns.views = api;
  if (typeof module !== "undefined") module.exports = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
