// vramscope viewer: one device of one report, as the timeline needs it (pure, no DOM).
//
// The x axis is either the event index or the time since event 0 (µs). Event e occupies
// [pos(e), pos(e + 1)) on it: [e, e + 1) by index, [time[e], time[e + 1]) by time. The curves are
// step functions of the event: allocation a counts from start[a] (inclusive) to end[a]
// (exclusive), reserved and predicted change at their points' events.
//
// The timeline is drawn from "columns", one per CSS pixel: a column covers the events from the
// one in effect at its left edge to the last one that starts before its right edge, and shows the
// moment among them where the allocated total is highest (so the peak is never lost, whatever
// the zoom). Columns come from the level of detail whose buckets are at most one column wide
// (at most ~4 buckets per column), or, zoomed in past the finest level, from replaying the exact
// curve with ev_alloc/ev_sign from the finest level's *_start values. Per frame the work is
// bounded by the width in pixels, never by the number of allocations.
(function (root) {
  "use strict";
  const ns = (root.vramscope = root.vramscope || {});

  // Largest i with arr[i] <= x in a sorted array, -1 if none.
  function lastLE(arr, x) {
    let lo = 0, hi = arr.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (arr[mid] <= x) lo = mid + 1;
      else hi = mid;
    }
    return lo - 1;
  }
  // Largest i with arr[i] < x in a sorted array, -1 if none.
  function lastLT(arr, x) {
    let lo = 0, hi = arr.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (arr[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    return lo - 1;
  }

  // Maximum over index ranges of a long array, in O(sqrt-ish) per query, with two levels of
  // block maxima (64 and 4096 values): 1/63 of the array's memory.
  class RangeMax {
    constructor(values) {
      this.v = values;
      const n = values.length;
      this.b1 = new Float64Array(Math.ceil(n / 64));
      this.b1.fill(-Infinity);
      for (let i = 0; i < n; i++) if (values[i] > this.b1[i >> 6]) this.b1[i >> 6] = values[i];
      this.b2 = new Float64Array(Math.ceil(this.b1.length / 64));
      this.b2.fill(-Infinity);
      for (let i = 0; i < this.b1.length; i++) if (this.b1[i] > this.b2[i >> 6]) this.b2[i >> 6] = this.b1[i];
    }
    // max of values[i0..i1], inclusive; -Infinity when empty.
    query(i0, i1) {
      const v = this.v;
      let m = -Infinity;
      i0 = Math.max(0, i0);
      i1 = Math.min(v.length - 1, i1);
      while (i0 <= i1 && (i0 & 63) !== 0) m = Math.max(m, v[i0++]);
      while (i1 >= i0 && (i1 & 63) !== 63) m = Math.max(m, v[i1--]);
      if (i0 > i1) return m;
      let j0 = i0 >> 6, j1 = i1 >> 6; // whole 64-blocks j0..j1
      while (j0 <= j1 && (j0 & 63) !== 0) m = Math.max(m, this.b1[j0++]);
      while (j1 >= j0 && (j1 & 63) !== 63) m = Math.max(m, this.b1[j1--]);
      for (let k = j0 >> 6; j0 <= j1 && k <= j1 >> 6; k++) m = Math.max(m, this.b2[k]);
      return m;
    }
  }

  // A step curve: from event[i] on, the value is values[i]; 0 before the first point.
  class StepCurve {
    constructor(event, values) {
      this.event = event;
      this.values = values;
      this.rmax = null;
    }
    at(t) {
      const i = lastLE(this.event, t);
      return i < 0 ? 0 : this.values[i];
    }
    // Highest value at any event in [a, b].
    maxOver(a, b) {
      const i0 = lastLE(this.event, a);
      const i1 = lastLE(this.event, b);
      let m = i0 < 0 ? 0 : this.values[i0];
      if (i1 > i0) {
        if (i1 - i0 < 256) {
          for (let i = i0 + 1; i <= i1; i++) if (this.values[i] > m) m = this.values[i];
        } else {
          if (!this.rmax) this.rmax = new RangeMax(this.values);
          m = Math.max(m, this.rmax.query(i0 + 1, i1));
        }
      }
      return m;
    }
    max() {
      let m = 0;
      for (let i = 0; i < this.values.length; i++) if (this.values[i] > m) m = this.values[i];
      return m;
    }
  }

  class DeviceModel {
    constructor(report, dev, reportIndex) {
      this.report = report;
      this.dev = dev;
      this.reportIndex = reportIndex || 0;
      this.device = dev.device;
      this.E = dev.events;
      const A = dev.allocations;
      this.N = A.count;
      this.a = A;
      this.categories = report.categories;
      this.summary = dev.summary || {};
      // How long a block stays in its segment. Allocations count in `allocated` from start to
      // end (the free request); a block whose free is requested but not completed (record_stream)
      // still occupies its segment, "pending": end <= t < free_completed.
      this.blockEnd = A.free_completed || A.end;
      this.groups = {
        category: { key: "category", names: dev.lod.groups.category.series, of: A.category, levelKey: "category", startKey: "category_start" },
        owner: { key: "owner", names: dev.lod.groups.owner.series, of: A.owner_group, levelKey: "owner", startKey: "owner_start" },
      };
      this.levels = dev.lod.levels;
      this.hasTime = !!dev.has_time && this.E > 0;
      if (this.hasTime) {
        const t = new Float64Array(this.E);
        const d = dev.time_us;
        let acc = 0;
        for (let e = 0; e < this.E; e++) {
          if (e > 0) acc += d[e];
          t[e] = acc;
        }
        this.timeUs = t;
        const last = t[this.E - 1];
        // The last event gets the mean gap as its width, so it has a place on the axis.
        this.timeEnd = last + Math.max(1, last / Math.max(1, this.E - 1));
      } else {
        this.timeUs = null;
        this.timeEnd = this.E;
      }
      this.time0Us = dev.time0_us || 0;
      // Phases in event order, with their first events for binary searches (a long run has one
      // per phase per step: 100,000 are drawn by pixel, never one rectangle each).
      this.phases = (dev.phases || []).slice().sort((x, y) => x.first_event - y.first_event);
      this.phaseFirst = Int32Array.from(this.phases.map((p) => p.first_event));
      // Region bands under the axis (annotation ranges by depth, then the compiled graphs), by
      // row and then first event; each keeps its position for hover identity.
      this.regions = (dev.regions || []).map((b, index) => Object.assign({ index }, b)).sort((x, y) => x.row - y.row || x.first_event - y.first_event);
      this.regionRows = this.regions.reduce((n, b) => Math.max(n, b.row + 1), 0);
      this.reserved = new StepCurve(dev.reserved.event, dev.reserved.bytes);
      this.privatePools = DeviceModel.privatePoolCurves(dev.segments, this.E);
      this.predicted = dev.predicted
        ? {
            label: dev.predicted.label || "model",
            allocated: new StepCurve(dev.predicted.allocated_event || dev.predicted.event, dev.predicted.allocated),
            reserved: new StepCurve(dev.predicted.event, dev.predicted.reserved),
          }
        : null;
    }

    // The reserved bytes of each private pool (CUDA graph, MemPool) over the events: its
    // segments' sizes from their start to their end. [] when no segment is in a private pool.
    static privatePoolCurves(S, E) {
      if (!S || !S.private_pool || !S.private_pools || S.private_pools.length === 0) return [];
      return S.private_pools.map((label, k) => {
        const delta = new Map();
        for (let i = 0; i < S.count; i++) {
          if (S.private_pool[i] !== k + 1) continue;
          const from = Math.max(0, S.start[i]);
          delta.set(from, (delta.get(from) || 0) + S.size[i]);
          if (S.end[i] < E) delta.set(S.end[i], (delta.get(S.end[i]) || 0) - S.size[i]);
        }
        const events = Array.from(delta.keys()).sort((x, y) => x - y);
        const bytes = new Float64Array(events.length);
        let level = 0;
        events.forEach((e, j) => {
          level += delta.get(e);
          bytes[j] = level;
        });
        return { label, curve: new StepCurve(Int32Array.from(events), bytes) };
      });
    }

    // ---- positions on the x axis ----------------------------------------------------------

    domainEnd(mode) {
      return mode === "time" && this.hasTime ? this.timeEnd : this.E;
    }
    pos(e, mode) {
      if (mode === "time" && this.hasTime) return e >= this.E ? this.timeEnd : e < 0 ? 0 : this.timeUs[e];
      return e;
    }
    // The event in effect at position x (last with pos <= x), -1 before event 0.
    eventAt(x, mode) {
      if (mode === "time" && this.hasTime) return lastLE(this.timeUs, x);
      return Math.min(this.E - 1, Math.max(-1, Math.floor(x)));
    }
    // The last event that starts before x (pos < x), -1 if none.
    eventBefore(x, mode) {
      if (mode === "time" && this.hasTime) return lastLT(this.timeUs, x);
      return Math.min(this.E - 1, Math.max(-1, Math.ceil(x) - 1));
    }
    // The phase holding event e, or null.
    phaseAt(e) {
      const i = lastLE(this.phaseFirst, e);
      for (let j = i; j >= 0 && j > i - 4; j--) {
        const p = this.phases[j];
        if (p.first_event <= e && e <= p.last_event) return p;
      }
      return null;
    }
    // The band of `row` covering event e (the latest-starting one when several do), or null.
    regionAt(row, e) {
      let best = null;
      for (const b of this.regions) {
        if (b.row !== row || b.first_event > e) continue;
        if (e <= b.last_event && (!best || b.first_event >= best.first_event)) best = b;
      }
      return best;
    }
    timeOf(e) {
      return this.hasTime && e >= 0 && e < this.E ? this.timeUs[e] : null;
    }

    // ---- levels of detail -----------------------------------------------------------------

    // The source for a view with `epp` events per column: the coarsest level whose buckets are
    // at most one column wide; the finest level up to two columns wide (an exact replay would
    // cost up to bucket x width events then, for a step of at most two pixels); past that, an
    // exact replay when the blob has the finest level's *_start values (else the finest level,
    // blocky). Between levels 4 apart, a column shows 1 to 4 buckets.
    chooseLevel(epp) {
      const levels = this.levels;
      if (levels.length === 0) return { exact: true, level: -1, bucket: 1 };
      let chosen = -1;
      for (let i = 0; i < levels.length; i++) if (levels[i].bucket <= epp) chosen = i;
      if (chosen >= 0) return { exact: false, level: chosen, bucket: levels[chosen].bucket };
      const finest = levels[0];
      const canReplay = finest.bucket > 1 && finest.category_start && finest.owner_start;
      if (canReplay && finest.bucket > 2 * epp) return { exact: true, level: -1, bucket: 1 };
      return { exact: false, level: 0, bucket: finest.bucket };
    }

    seriesCount(group) {
      return this.groups[group].names.length;
    }

    // Each series' exact bytes at event t (after t's change), replayed from the finest level.
    valuesAt(t, group) {
      const g = this.groups[group];
      const K = g.names.length;
      const out = new Float64Array(K);
      if (this.levels.length === 0 || this.E === 0) return this.valuesByScan(t, group);
      const L0 = this.levels[0];
      t = Math.min(t, this.E - 1);
      if (L0.bucket === 1 && t >= 0) {
        out.set(L0[g.levelKey].subarray(t * K, t * K + K));
        return out;
      }
      const startCol = L0[g.startKey];
      if (!startCol) return this.valuesByScan(t, group);
      const j = Math.max(0, Math.floor(t / L0.bucket));
      out.set(startCol.subarray(j * K, j * K + K));
      this.replay(out, g.of, j * L0.bucket, t);
      return out;
    }

    // Applies events e0..e1 (inclusive) to per-series values; returns the change of the total.
    replay(vals, seriesOf, e0, e1) {
      const evA = this.dev.ev_alloc, evS = this.dev.ev_sign, size = this.a.size;
      let delta = 0;
      for (let e = e0; e <= e1; e++) {
        const a = evA[e];
        if (a >= 0) {
          const s = evS[e];
          if (s !== 0) {
            const d = s * size[a];
            vals[seriesOf[a]] += d;
            delta += d;
          }
        }
      }
      return delta;
    }

    // The same from the allocation columns (start <= t < end), for blobs without levels.
    valuesByScan(t, group) {
      const g = this.groups[group];
      const out = new Float64Array(g.names.length);
      const n = this.countStartedBy(t);
      const end = this.a.end, size = this.a.size, of = g.of;
      for (let i = 0; i < n; i++) if (end[i] > t) out[of[i]] += size[i];
      return out;
    }

    // ---- columns ----------------------------------------------------------------------------

    // view: {mode: "events"|"time", d0, d1 (x range), width (columns), group}.
    computeColumns(view) {
      const W = Math.max(1, Math.floor(view.width));
      const g = this.groups[view.group];
      const K = g.names.length;
      const cols = {
        W, K, group: view.group, mode: view.mode, d0: view.d0, d1: view.d1,
        source: null, epp: 0,
        has: new Uint8Array(W), event: new Int32Array(W).fill(-1),
        alloc: new Float64Array(W), resv: new Float64Array(W),
        predA: this.predicted ? new Float64Array(W) : null,
        predR: this.predicted ? new Float64Array(W) : null,
        pools: this.privatePools.map(() => new Float64Array(W)),
        vals: new Float64Array(W * K),
        first: new Int32Array(W), last: new Int32Array(W),
      };
      const E = this.E;
      const mode = view.mode;
      const end = this.domainEnd(mode);
      if (E === 0 || !(view.d1 > view.d0)) return cols;
      const dpp = (view.d1 - view.d0) / W;
      const eFirst = Math.max(0, this.eventAt(view.d0, mode));
      const eLast = Math.min(E - 1, this.eventBefore(view.d1, mode));
      if (eLast < 0 || view.d0 >= end) return cols;
      cols.epp = (eLast - eFirst + 1) / W;
      const choice = this.chooseLevel(cols.epp);
      cols.source = choice;
      // Which events each column covers.
      for (let p = 0; p < W; p++) {
        const left = view.d0 + p * dpp, right = left + dpp;
        if (right <= 0 || left >= end) continue;
        const a = Math.max(0, this.eventAt(left, mode));
        const b = Math.max(a, Math.min(E - 1, this.eventBefore(right, mode)));
        cols.has[p] = 1;
        cols.first[p] = a;
        cols.last[p] = b;
      }
      if (choice.exact) this.fillExact(cols, g);
      else this.fillFromLevel(cols, g, this.levels[choice.level]);
      this.privatePools.forEach((pool, k) => {
        for (let p = 0; p < W; p++) if (cols.has[p]) cols.pools[k][p] = pool.curve.maxOver(cols.first[p], cols.last[p]);
      });
      if (this.predicted) {
        for (let p = 0; p < W; p++) {
          if (!cols.has[p]) continue;
          cols.predA[p] = this.predicted.allocated.maxOver(cols.first[p], cols.last[p]);
          cols.predR[p] = this.predicted.reserved.maxOver(cols.first[p], cols.last[p]);
        }
      }
      return cols;
    }

    fillFromLevel(cols, g, level) {
      const K = cols.K, bk = level.bucket;
      const alloc = level.allocated, resv = level.reserved, peak = level.peak_event, rows = level[g.levelKey];
      for (let p = 0; p < cols.W; p++) {
        if (!cols.has[p]) continue;
        const j0 = Math.floor(cols.first[p] / bk), j1 = Math.floor(cols.last[p] / bk);
        let best = j0, r = resv[j0];
        for (let j = j0 + 1; j <= j1; j++) {
          if (alloc[j] > alloc[best]) best = j;
          if (resv[j] > r) r = resv[j];
        }
        cols.event[p] = peak[best];
        cols.alloc[p] = alloc[best];
        cols.resv[p] = r;
        cols.vals.set(rows.subarray(best * K, best * K + K), p * K);
      }
    }

    fillExact(cols, g) {
      const K = cols.K;
      const L0 = this.levels[0];
      const W = cols.W;
      let p0 = 0;
      while (p0 < W && !cols.has[p0]) p0++;
      if (p0 >= W) return;
      // Replay from the start of the finest bucket holding the first visible event.
      const vals = new Float64Array(K);
      let cur; // the last event applied: vals are the values at `cur`
      if (L0) {
        const j = Math.floor(cols.first[p0] / L0.bucket);
        vals.set(L0[g.startKey].subarray(j * K, j * K + K));
        cur = j * L0.bucket - 1;
      } else {
        vals.set(this.valuesByScan(-1, g.key));
        cur = -1;
      }
      let total = 0;
      for (let k = 0; k < K; k++) total += vals[k];
      const evA = this.dev.ev_alloc, evS = this.dev.ev_sign, size = this.a.size, of = g.of;
      const step = () => {
        cur++;
        const a = evA[cur];
        if (a >= 0 && evS[cur] !== 0) {
          const d = evS[cur] * size[a];
          vals[of[a]] += d;
          total += d;
        }
      };
      for (let p = p0; p < W; p++) {
        if (!cols.has[p]) continue;
        const a = cols.first[p], b = cols.last[p];
        while (cur < a) step();
        let best = -Infinity;
        // cur may be past a when the previous column ended on the same event.
        for (;;) {
          if (total > best) {
            best = total;
            cols.event[p] = cur;
            cols.alloc[p] = total;
            cols.vals.set(vals, p * K);
          }
          if (cur >= b) break;
          step();
        }
        cols.resv[p] = this.reserved.maxOver(a, b);
      }
    }

    // ---- hit testing ------------------------------------------------------------------------

    // How many allocations start at or before t (they are sorted by start).
    countStartedBy(t) {
      return lastLE(this.a.start, t) + 1;
    }

    // Allocation indices live at t (start <= t < end), in allocation order.
    liveAt(t) {
      const n = this.countStartedBy(t);
      const end = this.a.end;
      let count = 0;
      for (let i = 0; i < n; i++) if (end[i] > t) count++;
      const out = new Int32Array(count);
      let k = 0;
      for (let i = 0; i < n; i++) if (end[i] > t) out[k++] = i;
      return out;
    }

    // Blocks occupying a segment at t: live allocations plus those whose free is pending.
    blocksAt(t) {
      const n = this.countStartedBy(t);
      const end = this.blockEnd;
      const out = [];
      for (let i = 0; i < n; i++) if (end[i] > t) out.push(i);
      return out;
    }

    // True when allocation i's free was requested by t but the block is not yet reusable.
    isPending(i, t) {
      return this.a.end[i] <= t && t < this.blockEnd[i];
    }

    // Which visible series holds `bytes` in a column's stacked values (series 0 at the bottom).
    // Returns {series, offset (bytes into that series' band), base (bytes below it)} or null.
    static stackPick(vals, K, visible, bytes) {
      if (!(bytes >= 0)) return null;
      let base = 0;
      for (let k = 0; k < K; k++) {
        if (visible && !visible[k]) continue;
        const v = vals[k];
        if (v > 0 && bytes < base + v) return { series: k, offset: bytes - base, base };
        base += v;
      }
      return null;
    }

    // The allocation of series k live at t whose band holds `offset` bytes, stacking that series'
    // live allocations in allocation order from the bottom. Linear in the allocations started by
    // t: a few ms for a million, so callers throttle it to animation frames.
    hitTest(t, group, k, offset) {
      const of = this.groups[group].of;
      const n = this.countStartedBy(t);
      const end = this.a.end, size = this.a.size;
      let cum = 0;
      for (let i = 0; i < n; i++) {
        if (end[i] > t && of[i] === k) {
          const s = size[i];
          if (offset < cum + s) return { index: i, below: cum };
          cum += s;
        }
      }
      return null;
    }

    // ---- descriptions -----------------------------------------------------------------------

    // The frames of a stack node, innermost (the allocating call) first, each with its `index`
    // in the whole stack. With a limit, a long stack keeps its innermost 3 frames, then the
    // "telling" ones (project files; Python files when the report marks no frame as the
    // project's), then the next innermost; `more` counts the frames left out, and a jump in
    // `index` is where they were.
    stackFrames(node, limit) {
      const parent = this.report.stacks.parent, frame = this.report.stacks.frame, frames = this.report.frames;
      const all = [];
      let guard = parent.length;
      for (let n = node; n !== 0 && guard-- > 0; n = parent[n]) {
        const f = frames[frame[n]] || ["", 0, "", false];
        all.push({ index: all.length, file: f[0], line: f[1], function: f[2], project: !!f[3] });
      }
      if (limit === undefined || all.length <= limit) return { frames: all, more: 0 };
      if (this._anyProject === undefined) this._anyProject = frames.some((f) => f && f[3]);
      const telling = this._anyProject ? (f) => f.project : (f) => /\.py$/.test(f.file);
      const keep = new Uint8Array(all.length);
      let kept = 0;
      const take = (i) => {
        if (!keep[i] && kept < limit) {
          keep[i] = 1;
          kept++;
        }
      };
      for (let i = 0; i < 3; i++) take(i);
      for (let i = 3; i < all.length && kept < limit; i++) if (telling(all[i])) take(i);
      for (let i = 3; i < all.length && kept < limit; i++) take(i);
      const out = all.filter((f, i) => keep[i]);
      return { frames: out, more: all.length - out.length, total: all.length };
    }

    allocation(i, t) {
      const A = this.a, r = this.report;
      const cat = r.categories[A.category[i]];
      const st = this.stackFrames(A.stack[i], 12);
      const info = {
        index: i,
        size: A.size[i],
        requested: A.requested[i],
        category: cat,
        categoryIndex: A.category[i],
        owner: r.owners[A.owner[i]] || "",
        op: r.strings[A.op[i]] || "",
        phase: r.phases[A.phase[i]] || "",
        step: A.step[i],
        start: A.start[i],
        end: A.end[i],
        address: A.address[i],
        segment: A.segment[i],
        stackNode: A.stack[i],
        frames: st.frames,
        moreFrames: st.more,
      };
      if (t !== undefined) info.pending = this.isPending(i, t);
      return info;
    }

    frameLabel(node) {
      if (node === 0) return { file: "", line: 0, function: "all live memory", project: false };
      const f = this.report.frames[this.report.stacks.frame[node]] || ["", 0, "", false];
      return { file: f[0], line: f[1], function: f[2], project: !!f[3] };
    }
  }

  const api = { lastLE, lastLT, RangeMax, StepCurve, DeviceModel };
  ns.model = api;
  if (typeof module !== "undefined") module.exports = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
