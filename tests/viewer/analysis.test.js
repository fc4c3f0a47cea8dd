"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const B = require("./blob_builder.js");
const A = require("../../src/report/viewer/analysis.js");
const M = require("../../src/report/viewer/model.js");
const S = require("./make_sample_page.js");
const { modelOf, decodeHeader, sum } = require("./helpers.js");

const KiB = 1024, MiB = 1024 * 1024;

async function sampleModel(opts) {
  const data = await decodeHeader(S.sampleHeader(opts || {}));
  const r = data.reports[0];
  return new M.DeviceModel(r, r.devices[0], 0);
}

test("allocator state: one segment's blocks, gaps, pending free and byte accounting", async () => {
  const seg = { address: 0x10000, size: 64 * KiB, start: -1, end: 10, stream: 7, pool: B.VOCABULARY.pools.small };
  const allocs = [
    { start: -1, end: 10, size: 8 * KiB, requested: 8 * KiB - 100, address: 0x10000, category: 0, segment: 0 },
    { start: 1, end: 3, freeCompleted: 6, size: 4 * KiB, requested: 4 * KiB, address: 0x10000 + 16 * KiB, category: 4, segment: 0 },
    { start: 2, end: 10, size: 16 * KiB, requested: 15 * KiB, address: 0x10000 + 32 * KiB, category: 3, segment: 0 },
  ];
  const dev = B.buildDevice({ events: 10, allocations: allocs, segments: { source: "recorded", list: [seg] } });
  const data = await decodeHeader(B.buildHeader([B.buildReport({ devices: [dev] })]));
  const m = new M.DeviceModel(data.reports[0], data.reports[0].devices[0], 0);
  const st = A.allocatorState(m, 4);
  assert.equal(st.source, "recorded");
  assert.equal(st.segments.length, 1);
  const s = st.segments[0];
  assert.equal(s.address, 0x10000);
  assert.equal(s.pool, "small");
  assert.equal(s.stream, 7);
  assert.deepEqual(s.blocks.map((b) => [b.alloc, b.offset, b.size, b.pending]), [
    [0, 0, 8 * KiB, false],
    [1, 16 * KiB, 4 * KiB, true], // freed at 3, returned to the allocator at 6
    [2, 32 * KiB, 16 * KiB, false],
  ]);
  assert.deepEqual(s.gaps, [
    { offset: 8 * KiB, size: 8 * KiB },
    { offset: 20 * KiB, size: 12 * KiB },
    { offset: 48 * KiB, size: 16 * KiB },
  ]);
  assert.equal(s.allocatedBytes, 24 * KiB);
  assert.equal(s.pendingBytes, 4 * KiB);
  assert.equal(s.freeBytes, 36 * KiB);
  assert.equal(s.allocatedBytes + s.pendingBytes + s.freeBytes, s.size);
  assert.equal(sum(s.gaps.map((g) => g.size)), s.freeBytes);
  assert.equal(s.wasteBytes, 100 + 1024);
  assert.equal(s.largestFree, 16 * KiB);
  assert.deepEqual(st.problems, []);
  // Once the free completes the block is cached free space.
  const later = A.allocatorState(m, 6).segments[0];
  assert.equal(later.blocks.length, 2);
  assert.equal(later.freeBytes, 40 * KiB);
});

test("allocator state on the sample: every segment's bytes add up, the totals match the curves", async () => {
  const m = await sampleModel();
  assert.ok(m.dev.segments.count >= 2);
  let pendingSeen = 0;
  for (let t = 0; t < m.E; t += 5) {
    const st = A.allocatorState(m, t);
    assert.deepEqual(st.problems, [], "problems at " + t);
    assert.equal(st.unplaced.length, 0);
    for (const s of st.segments) {
      assert.equal(s.allocatedBytes + s.pendingBytes + s.freeBytes, s.size, "segment " + s.index + " at " + t);
      assert.ok(s.freeBytes >= 0);
      assert.equal(sum(s.gaps.map((g) => g.size)), s.freeBytes);
    }
    for (let i = 1; i < st.segments.length; i++) assert.ok(st.segments[i - 1].address < st.segments[i].address, "sorted by address");
    // Allocated bytes in the segments = the allocated curve; segment bytes = the reserved curve.
    assert.equal(st.totals.allocated, sum(m.valuesAt(t, "category")), "allocated at " + t);
    assert.equal(st.totals.reserved, m.reserved.at(t), "reserved at " + t);
    pendingSeen += st.totals.pending;
  }
  // The sample's input batch is freed with a pending phase (record_stream).
  let pendingAt = -1;
  for (let t = 0; t < m.E && pendingAt < 0; t++) if (A.allocatorState(m, t).totals.pending > 0) pendingAt = t;
  assert.ok(pendingAt >= 0, "the sample has a pending free");
  assert.equal(A.allocatorState(m, pendingAt).totals.pending, 6 * MiB);
  assert.ok(pendingSeen >= 0);
});

test("allocator state without segments lists the live blocks by address", async () => {
  const m = await sampleModel({ segments: "none" });
  const t = m.summary.peak_event;
  const st = A.allocatorState(m, t);
  assert.equal(st.source, "none");
  assert.equal(st.segments.length, 0);
  assert.deepEqual(st.problems, []);
  assert.equal(sum(st.unplaced.map((b) => b.size)), m.summary.peak_allocated);
  for (let i = 1; i < st.unplaced.length; i++) assert.ok(st.unplaced[i - 1].address <= st.unplaced[i].address);
});

test("allocator state reports blocks outside any live segment", async () => {
  const allocs = [
    { start: 0, end: 4, size: 1024, address: 0x5000, category: 0, segment: -1 },
    { start: 1, end: 4, size: 4096, address: 0x1000, category: 0, segment: 0 },
  ];
  const dev = B.buildDevice({ events: 4, allocations: allocs, segments: { source: "model", list: [{ address: 0x1000, size: 2048, start: 0, end: 4 }] } });
  const data = await decodeHeader(B.buildHeader([B.buildReport({ devices: [dev] })]));
  const m = new M.DeviceModel(data.reports[0], data.reports[0].devices[0], 0);
  const st = A.allocatorState(m, 2);
  assert.equal(st.unplaced.length, 1);
  assert.equal(st.problems.length, 2); // the unplaced block, and a block larger than its segment
  assert.match(st.problems[0], /belong to no live segment/);
  assert.match(st.problems[1], /runs past the segment's end/);
});

test("the breakdown at the peak equals the summary's", async () => {
  const m = await sampleModel();
  const s = m.summary;
  const b = A.breakdownAt(m, s.peak_event);
  assert.equal(b.total, s.peak_allocated);
  const nonzero = b.categories.filter((c) => c.count > 0);
  assert.deepEqual(nonzero, s.categories_at_peak);
  assert.deepEqual(b.owners.map((o) => [o.owner, o.category, o.bytes, o.count]).sort(), s.owners_at_peak.map((o) => [o.owner, o.category, o.bytes, o.count]).sort());
  assert.equal(sum(b.categories.map((c) => c.count)), b.count);
});

test("icicle: totals per stack node equal the live bytes under it", async () => {
  const m = await sampleModel();
  const t = m.summary.peak_event;
  const live = m.liveAt(t);
  const tree = A.buildIcicle(m, live);
  let liveBytes = 0;
  for (const i of live) liveBytes += m.a.size[i];
  assert.equal(tree.total[0], liveBytes);
  assert.equal(tree.total[0], m.summary.peak_allocated);
  assert.equal(tree.count[0], live.length);
  // Every node: its total is its own bytes plus its children's.
  const parent = m.report.stacks.parent;
  const childSum = new Float64Array(parent.length);
  for (let n = 1; n < parent.length; n++) childSum[parent[n]] += tree.total[n];
  for (let n = 0; n < parent.length; n++) assert.equal(tree.total[n], tree.self[n] + childSum[n], "node " + n);
  // Brute force for one node: the bytes of the live allocations whose stack passes through it.
  const kids = tree.children.get(0);
  assert.ok(kids && kids.length >= 1);
  const node = kids[0];
  let through = 0;
  for (const i of live) {
    for (let n = m.a.stack[i]; n !== 0; n = parent[n]) {
      if (n === node) {
        through += m.a.size[i];
        break;
      }
    }
  }
  assert.equal(tree.total[node], through);
  // Children are sorted largest first.
  for (const list of tree.children.values()) for (let i = 1; i < list.length; i++) assert.ok(tree.total[list[i - 1]] >= tree.total[list[i]]);
});

test("icicle: a stack table not ordered parent-first gives the same totals", async () => {
  // Node ids 1..4 with parents after children: 1 <- 3 (3 is 1's parent), 2 <- 4.
  //   0 -> 3 -> 1 ; 0 -> 4 -> 2
  const parent = [0, 3, 4, 0, 0];
  const frame = [0, 1, 2, 3, 4];
  const frames = [["", 0, "", false], ["a.py", 1, "a", true], ["b.py", 2, "b", false], ["c.py", 3, "c", true], ["d.py", 4, "d", false]];
  const allocs = [
    { start: -1, end: 3, size: 5, stack: 0 },
    { start: 0, end: 3, size: 100, stack: 1 },
    { start: 1, end: 3, size: 50, stack: 2 },
    { start: 2, end: 3, size: 25, stack: 3 },
  ];
  const dev = B.buildDevice({ events: 3, allocations: allocs });
  const data = await decodeHeader(B.buildHeader([B.buildReport({ devices: [dev], frames, parent, frame })]));
  const m = new M.DeviceModel(data.reports[0], data.reports[0].devices[0], 0);
  const tree = A.buildIcicle(m, m.liveAt(2));
  assert.equal(m._parentsFirst, false);
  assert.deepEqual(Array.from(tree.total), [180, 100, 50, 125, 50]);
  assert.deepEqual(Array.from(tree.count), [4, 1, 1, 2, 1]);
  assert.deepEqual(tree.children.get(0), [3, 4]);
  assert.deepEqual(tree.children.get(3), [1]);
  // Layout: root full width, children to scale, left to right largest first.
  const lay = A.layoutIcicle(tree, 0, 360, 0.5);
  const at = (n) => lay.rects.find((r) => r.node === n);
  assert.deepEqual([at(0).x, at(0).w, at(0).depth], [0, 360, 0]);
  assert.deepEqual([at(3).x, at(3).w, at(3).depth], [0, 250, 1]);
  assert.deepEqual([at(4).x, at(4).w, at(4).depth], [250, 100, 1]);
  assert.deepEqual([at(1).x, at(1).w, at(1).depth], [0, 200, 2]);
  assert.deepEqual([at(2).x, at(2).w, at(2).depth], [250, 100, 2]);
  assert.equal(lay.depth, 3);
  // Zoomed on node 4: the root above it full width (an ancestor), 4 full width, 2 below it.
  const z = A.layoutIcicle(tree, 4, 360, 0.5);
  assert.deepEqual(z.rects.map((r) => [r.node, r.depth, r.x, r.w, r.ancestor]), [[0, 0, 0, 360, true], [4, 1, 0, 360, false], [2, 2, 0, 360, false]]);
  // Narrow nodes are culled with their subtrees.
  const narrow = A.layoutIcicle(tree, 0, 10, 3);
  assert.deepEqual(narrow.rects.map((r) => r.node).sort(), [0, 1, 3]);
});

test("icicle layout on the sample: children never exceed their parent", async () => {
  const m = await sampleModel();
  const tree = A.buildIcicle(m, m.liveAt(m.summary.peak_event));
  const lay = A.layoutIcicle(tree, 0, 1000, 0);
  const byNode = new Map(lay.rects.map((r) => [r.node, r]));
  for (const r of lay.rects) {
    if (r.node === 0) continue;
    const p = byNode.get(tree.parent[r.node]);
    assert.ok(p, "parent laid out");
    assert.equal(r.depth, p.depth + 1);
    assert.ok(r.x >= p.x - 1e-9 && r.x + r.w <= p.x + p.w + 1e-9);
  }
  // The widths at depth 1 add up to the root's share not allocated right at the root.
  const depth1 = lay.rects.filter((r) => r.depth === 1);
  assert.ok(Math.abs(sum(depth1.map((r) => r.w)) - (1000 * (tree.total[0] - tree.self[0])) / tree.total[0]) < 1e-6);
});

test("compare: per-category differences and ratios, then the peaks", () => {
  const a = { peak_allocated: 1000, peak_reserved: 2000, categories_at_peak: [{ category: "weight", bytes: 600, count: 2 }, { category: "activation", bytes: 400, count: 5 }] };
  const b = { peak_allocated: 700, peak_reserved: 2048, categories_at_peak: [{ category: "weight", bytes: 600, count: 2 }, { category: "activation", bytes: 50, count: 5 }, { category: "workspace", bytes: 50, count: 1 }] };
  const cats = ["weight", "gradient", "activation", "workspace"];
  const rows = A.compareRows(a, b, cats, cats);
  const row = (label) => rows.find((r) => r.label === label);
  assert.deepEqual(rows.map((r) => r.label), ["weight", "gradient", "activation", "workspace", "total at the peak", "peak allocated", "peak reserved"]);
  assert.deepEqual(row("weight"), { label: "weight", a: 600, b: 600, diff: 0, ratio: 1, kind: "category" });
  assert.deepEqual(row("activation"), { label: "activation", a: 400, b: 50, diff: -350, ratio: 0.125, kind: "category" });
  assert.deepEqual(row("workspace"), { label: "workspace", a: 0, b: 50, diff: 50, ratio: null, kind: "category" });
  assert.deepEqual(row("gradient"), { label: "gradient", a: 0, b: 0, diff: 0, ratio: null, kind: "category" });
  assert.equal(row("total at the peak").diff, -300);
  assert.deepEqual(row("peak allocated"), { label: "peak allocated", a: 1000, b: 700, diff: -300, ratio: 0.7, kind: "peak" });
  assert.equal(row("peak reserved").diff, 48);
});

test("compare on two sample reports", async () => {
  const data = await decodeHeader(S.sampleHeader({ compare: true }));
  assert.equal(data.reports.length, 2);
  const [ra, rb] = data.reports;
  const rows = A.compareRows(ra.devices[0].summary, rb.devices[0].summary, ra.categories, rb.categories);
  const act = rows.find((r) => r.label === "activation");
  // The second run has half the batch: its activations at the peak are smaller.
  assert.ok(act.b <= act.a);
  const peak = rows.find((r) => r.label === "peak allocated");
  assert.equal(peak.a, ra.devices[0].summary.peak_allocated);
  assert.equal(peak.b, rb.devices[0].summary.peak_allocated);
  assert.equal(peak.diff, peak.b - peak.a);
  assert.ok(peak.diff < 0);
  const total = rows.find((r) => r.label === "total at the peak");
  assert.equal(total.a, peak.a);
});
