// vramscope viewer: what the views below the timeline show, computed from a DeviceModel (pure).
//   allocatorState  the segments and blocks at an event, with their byte accounting
//   breakdownAt     bytes by category and by owner live at an event
//   buildIcicle     live bytes by stack (a prefix tree hanging from node 0), layoutIcicle
//   compareRows     the per-category comparison of two reports' peaks
(function (root) {
  "use strict";
  const ns = (root.vramscope = root.vramscope || {});

  // ---- allocator state -----------------------------------------------------------------------

  // Every segment live at t (start <= t < end), sorted by address, with its byte accounting:
  //   allocatedBytes + pendingBytes + freeBytes === size
  // where pendingBytes are blocks whose free was requested but not completed, and freeBytes the
  // cached free space (not covered by a block); wasteBytes (size minus requested: the allocator's
  // rounding) is part of the blocks' bytes. The blocks themselves, the free gaps between them and
  // the largest gap ("details") are filled in by segmentDetail: for every segment when there are
  // at most DETAIL_LIMIT blocks, else only for the segments a view shows (a stress trace can
  // hold 60,000 segments and 200,000 blocks at one moment). Blocks whose segment is unknown or
  // not live at t are listed in `unplaced`; anything inconsistent is said in `problems`.
  const DETAIL_LIMIT = 50000;

  // A segment's pool by its code; the names come with the data ("pool_names", indexed by code:
  // src/model/vocabulary.h's table).
  function poolName(S, code) {
    return Array.isArray(S.pool_names) && typeof S.pool_names[code] === "string" ? S.pool_names[code] : "pool " + code;
  }

  function segmentOrder(m) {
    if (!m._segmentOrder) {
      const S = m.dev.segments;
      const order = new Int32Array(S.count);
      for (let s = 0; s < S.count; s++) order[s] = s;
      m._segmentOrder = order.sort((x, y) => S.address[x] - S.address[y] || x - y);
    }
    return m._segmentOrder;
  }

  function allocatorState(m, t) {
    const A = m.a;
    const S = m.dev.segments;
    const source = S.source || "none";
    const blocks = m.blocksAt(t);
    const count = source === "none" ? 0 : S.count;
    const live = new Uint8Array(count);
    for (let s = 0; s < count; s++) live[s] = S.start[s] <= t && t < S.end[s] ? 1 : 0;
    const alloc = new Float64Array(count), pend = new Float64Array(count), waste = new Float64Array(count);
    const first = new Int32Array(count + 1); // blocks of segment s: members[first[s] .. first[s + 1])
    const unplacedIdx = [];
    for (const i of blocks) {
      const s = A.segment[i];
      if (s >= 0 && s < count && live[s]) first[s + 1]++;
      else unplacedIdx.push(i);
    }
    for (let s = 0; s < count; s++) first[s + 1] += first[s];
    const fill = first.slice(0, count);
    const members = new Int32Array(first[count]);
    for (const i of blocks) {
      const s = A.segment[i];
      if (!(s >= 0 && s < count && live[s])) continue;
      members[fill[s]++] = i;
      if (m.isPending(i, t)) pend[s] += A.size[i];
      else alloc[s] += A.size[i];
      waste[s] += Math.max(0, A.size[i] - A.requested[i]);
    }
    const segs = [];
    const totals = { segments: 0, reserved: 0, allocated: 0, pending: 0, free: 0, waste: 0, blocks: blocks.length };
    for (const s of segmentOrder(m)) {
      if (s >= count || !live[s]) continue;
      const seg = {
        index: s, address: S.address[s], size: S.size[s], pool: poolName(S, S.pool[s]),
        stream: S.stream[s], start: S.start[s], end: S.end[s], blockCount: first[s + 1] - first[s],
        allocatedBytes: alloc[s], pendingBytes: pend[s], freeBytes: S.size[s] - alloc[s] - pend[s], wasteBytes: waste[s],
        blocks: null, gaps: null, largestFree: null,
      };
      segs.push(seg);
      totals.reserved += seg.size;
      totals.allocated += seg.allocatedBytes;
      totals.pending += seg.pendingBytes;
      totals.free += seg.freeBytes;
      totals.waste += seg.wasteBytes;
    }
    totals.segments = segs.length;
    const unplaced = unplacedIdx.map((i) => blockOf(m, i, t)).sort((x, y) => x.address - y.address);
    for (const b of unplaced) {
      if (b.pending) totals.pending += b.size;
      else totals.allocated += b.size;
      totals.waste += Math.max(0, b.size - b.requested);
    }
    const problems = [];
    if (source !== "none" && unplaced.length) {
      problems.push(unplaced.length + " block" + (unplaced.length === 1 ? "" : "s") + " live at this event belong to no live segment");
    }
    const state = { t, source, segments: segs, unplaced, problems, totals, model: m, members, first };
    if (blocks.length <= DETAIL_LIMIT) for (const seg of segs) segmentDetail(state, seg);
    return state;
  }

  function blockOf(m, i, t) {
    const A = m.a;
    return { alloc: i, address: A.address[i], size: A.size[i], requested: A.requested[i], category: A.category[i], pending: m.isPending(i, t), offset: 0 };
  }

  // Fills seg.blocks (by address, with their offsets), seg.gaps (the cached free pieces) and
  // seg.largestFree; a block that overlaps another or runs past the end goes to state.problems.
  function segmentDetail(state, seg) {
    if (seg.blocks) return seg;
    const blocks = [];
    for (let k = state.first[seg.index]; k < state.first[seg.index + 1]; k++) blocks.push(blockOf(state.model, state.members[k], state.t));
    blocks.sort((x, y) => x.address - y.address);
    const gaps = [];
    let cursor = 0; // bytes from the segment's start covered so far
    for (const b of blocks) {
      b.offset = b.address - seg.address;
      if (b.offset < cursor || b.offset + b.size > seg.size) {
        state.problems.push("segment " + seg.index + ": a block at offset " + b.offset + " overlaps another or runs past the segment's end");
      }
      if (b.offset > cursor) gaps.push({ offset: cursor, size: b.offset - cursor });
      cursor = Math.max(cursor, b.offset + b.size);
    }
    if (cursor < seg.size) gaps.push({ offset: cursor, size: seg.size - cursor });
    seg.blocks = blocks;
    seg.gaps = gaps;
    seg.largestFree = gaps.reduce((x, g) => Math.max(x, g.size), 0);
    return seg;
  }

  // ---- breakdown -------------------------------------------------------------------------------

  // Bytes and counts by category, and by (owner, category), of the allocations live at t; the
  // same shape as the summary's categories_at_peak / owners_at_peak.
  function breakdownAt(m, t, live) {
    live = live || m.liveAt(t);
    const A = m.a, r = m.report;
    const C = r.categories.length;
    const bytes = new Float64Array(C), counts = new Float64Array(C);
    const owners = new Map();
    let total = 0;
    for (let j = 0; j < live.length; j++) {
      const i = live[j];
      const c = A.category[i], s = A.size[i];
      bytes[c] += s;
      counts[c]++;
      total += s;
      const key = A.owner[i] * 256 + c;
      const o = owners.get(key);
      if (o) {
        o.bytes += s;
        o.count++;
      } else {
        owners.set(key, { category: r.categories[c], owner: r.owners[A.owner[i]] || "", bytes: s, count: 1 });
      }
    }
    const categories = [];
    for (let c = 0; c < C; c++) categories.push({ category: r.categories[c], bytes: bytes[c], count: counts[c] });
    categories.sort((x, y) => y.bytes - x.bytes);
    const ownerList = Array.from(owners.values()).sort((x, y) => y.bytes - x.bytes || (x.owner < y.owner ? -1 : 1));
    return { t, total, count: live.length, categories, owners: ownerList };
  }

  // ---- icicle ----------------------------------------------------------------------------------

  // Live bytes by stack node. total[n] = bytes of the live allocations whose stack passes through
  // n (node 0 holds everything); self[n] = those allocated exactly at n. Walks each allocation's
  // node up to 0 only when the stack table is not ordered parent-before-child; otherwise one
  // reverse pass over the nodes propagates the totals.
  function buildIcicle(m, live) {
    const parent = m.report.stacks.parent;
    const nodes = parent.length;
    const total = new Float64Array(nodes), count = new Float64Array(nodes), self = new Float64Array(nodes);
    const A = m.a;
    for (let j = 0; j < live.length; j++) {
      const i = live[j];
      const n = A.stack[i];
      self[n] += A.size[i];
      count[n]++;
    }
    if (m._parentsFirst === undefined) {
      m._parentsFirst = true;
      for (let n = 1; n < nodes; n++) if (parent[n] >= n) { m._parentsFirst = false; break; }
    }
    if (m._parentsFirst) {
      total.set(self);
      const cnt = count;
      for (let n = nodes - 1; n >= 1; n--) {
        if (total[n] !== 0 || cnt[n] !== 0) {
          total[parent[n]] += total[n];
          cnt[parent[n]] += cnt[n];
        }
      }
    } else {
      const selfCount = Float64Array.from(count);
      count.fill(0);
      for (let n = 0; n < nodes; n++) {
        if (selfCount[n] === 0) continue;
        let guard = nodes;
        for (let p = n; ; p = parent[p]) {
          total[p] += self[n];
          count[p] += selfCount[n];
          if (p === 0 || guard-- <= 0) break;
        }
      }
    }
    // Children of the nodes that hold bytes, largest first.
    const children = new Map();
    for (let n = 1; n < nodes; n++) {
      if (count[n] === 0) continue;
      const p = parent[n];
      let list = children.get(p);
      if (!list) children.set(p, (list = []));
      list.push(n);
    }
    for (const list of children.values()) list.sort((x, y) => total[y] - total[x] || x - y);
    return { total, self, count, children, parent, root: 0 };
  }

  function icicleDepth(tree, node) {
    let d = 0;
    for (let n = node, guard = tree.parent.length; n !== 0 && guard-- > 0; n = tree.parent[n]) d++;
    return d;
  }

  // Rectangles of the icicle zoomed on `zoom`: its ancestors full width above it, then `zoom` full
  // width, then its descendants to scale; a node narrower than minWidth is left out with its
  // subtree. Each rect: {node, depth (row), x, w, ancestor}.
  function layoutIcicle(tree, zoom, width, minWidth) {
    minWidth = minWidth === undefined ? 0.5 : minWidth;
    const rects = [];
    const chain = [];
    for (let n = zoom, guard = tree.parent.length; guard-- > 0; n = tree.parent[n]) {
      chain.push(n);
      if (n === 0) break;
    }
    chain.reverse();
    for (let d = 0; d < chain.length - 1; d++) rects.push({ node: chain[d], depth: d, x: 0, w: width, ancestor: true });
    const zoomDepth = chain.length - 1;
    if (!(tree.total[zoom] > 0)) {
      rects.push({ node: zoom, depth: zoomDepth, x: 0, w: width, ancestor: false });
      return { rects, depth: zoomDepth + 1 };
    }
    const scale = width / tree.total[zoom];
    let maxDepth = zoomDepth;
    const stack = [{ node: zoom, depth: zoomDepth, x: 0, w: width }];
    while (stack.length) {
      const r = stack.pop();
      rects.push({ node: r.node, depth: r.depth, x: r.x, w: r.w, ancestor: false });
      if (r.depth > maxDepth) maxDepth = r.depth;
      const kids = tree.children.get(r.node);
      if (!kids) continue;
      let x = r.x;
      for (const c of kids) {
        const w = tree.total[c] * scale;
        if (w >= minWidth) stack.push({ node: c, depth: r.depth + 1, x, w });
        x += w;
      }
    }
    return { rects, depth: maxDepth + 1 };
  }

  // ---- compare ---------------------------------------------------------------------------------

  // One row per category (A's order, then B's extras), then the peaks: {label, a, b, diff, ratio}
  // with diff = b - a and ratio = b / a (null when a is 0).
  function compareRows(summaryA, summaryB, categoriesA, categoriesB) {
    const bytesOf = (summary) => {
      const map = new Map();
      for (const c of (summary && summary.categories_at_peak) || []) map.set(c.category, (map.get(c.category) || 0) + c.bytes);
      return map;
    };
    const a = bytesOf(summaryA), b = bytesOf(summaryB);
    const names = [];
    for (const n of categoriesA || []) if (!names.includes(n)) names.push(n);
    for (const n of categoriesB || []) if (!names.includes(n)) names.push(n);
    for (const n of a.keys()) if (!names.includes(n)) names.push(n);
    for (const n of b.keys()) if (!names.includes(n)) names.push(n);
    const row = (label, x, y, kind) => ({ label, a: x, b: y, diff: y - x, ratio: x > 0 ? y / x : null, kind });
    const rows = names.map((n) => row(n, a.get(n) || 0, b.get(n) || 0, "category"));
    let ta = 0, tb = 0;
    for (const r of rows) {
      ta += r.a;
      tb += r.b;
    }
    rows.push(row("total at the peak", ta, tb, "total"));
    rows.push(row("peak allocated", (summaryA && summaryA.peak_allocated) || 0, (summaryB && summaryB.peak_allocated) || 0, "peak"));
    rows.push(row("peak reserved", (summaryA && summaryA.peak_reserved) || 0, (summaryB && summaryB.peak_reserved) || 0, "peak"));
    return rows;
  }

  const api = { allocatorState, segmentDetail, breakdownAt, buildIcicle, layoutIcicle, icicleDepth, compareRows };
  ns.analysis = api;
  if (typeof module !== "undefined") module.exports = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
