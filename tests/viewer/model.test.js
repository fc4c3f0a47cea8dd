"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const B = require("./blob_builder.js");
const M = require("../../src/report/viewer/model.js");
const { rng, randomTrace, bruteValues, sum, modelOf } = require("./helpers.js");

const OWNERS = ["", "o1", "o2", "o3", "o4", "o5", "o6"];
const SERIES = ["s0", "s1", "s2", "s3", "other owners"];

function header(allocs, E, extra) {
  const dev = B.buildDevice(Object.assign({ events: E, allocations: allocs, ownerSeries: SERIES, owners: OWNERS }, extra || {}));
  return B.buildHeader([B.buildReport({ devices: [dev], owners: OWNERS })]);
}

// Brute force: the exact per-event totals and per-series values of a trace.
function exactCurves(allocs, E, key, K) {
  const vals = [];
  for (let t = 0; t < E; t++) vals.push(bruteValues(allocs, t, key, K));
  return { vals, totals: vals.map(sum) };
}

test("binary searches and range maxima", () => {
  const arr = Int32Array.from([0, 2, 2, 5, 9]);
  assert.equal(M.lastLE(arr, -1), -1);
  assert.equal(M.lastLE(arr, 2), 2);
  assert.equal(M.lastLE(arr, 4), 2);
  assert.equal(M.lastLE(arr, 100), 4);
  assert.equal(M.lastLT(arr, 2), 0);
  assert.equal(M.lastLT(arr, 0), -1);
  const r = rng(7);
  const v = Float64Array.from({ length: 300000 }, () => Math.floor(r() * 1e9));
  const rm = new M.RangeMax(v);
  for (let q = 0; q < 300; q++) {
    const i0 = Math.floor(r() * v.length), i1 = Math.min(v.length - 1, i0 + Math.floor(r() * (q % 3 === 0 ? 200000 : 500)));
    let m = -Infinity;
    for (let i = i0; i <= i1; i++) m = Math.max(m, v[i]);
    assert.equal(rm.query(i0, i1), m, "range " + i0 + ".." + i1);
  }
});

test("step curves: value in effect and maximum over an event range", () => {
  const c = new M.StepCurve(Int32Array.from([0, 10, 20, 30]), Float64Array.from([100, 400, 200, 300]));
  assert.equal(c.at(-1), 0);
  assert.equal(c.at(0), 100);
  assert.equal(c.at(15), 400);
  assert.equal(c.at(99), 300);
  assert.equal(c.maxOver(0, 9), 100);
  assert.equal(c.maxOver(5, 10), 400);
  assert.equal(c.maxOver(21, 25), 200); // the value in effect at 21 came from event 20
  assert.equal(c.maxOver(20, 99), 300);
  // Long curves go through RangeMax.
  const n = 5000;
  const ev = Int32Array.from({ length: n }, (_, i) => i * 2);
  const val = Float64Array.from({ length: n }, (_, i) => (i * 7919) % 10007);
  const long = new M.StepCurve(ev, val);
  let m = 0;
  for (let i = 50; i <= 4000; i++) m = Math.max(m, val[i]);
  assert.equal(long.maxOver(100, 8001), m);
});

test("level choice: buckets at most one column wide, exact replay past the finest", async () => {
  const E = 70000;
  const m = await modelOf(header(randomTrace(1, E), E));
  // 70,000 events: finest bucket 16 (4,375 buckets), then 64, 256 (274 <= 1,024).
  assert.deepEqual(m.levels.map((l) => l.bucket), [16, 64, 256]);
  assert.deepEqual(m.chooseLevel(1000), { exact: false, level: 2, bucket: 256 });
  assert.deepEqual(m.chooseLevel(255), { exact: false, level: 1, bucket: 64 });
  assert.deepEqual(m.chooseLevel(64), { exact: false, level: 1, bucket: 64 });
  assert.deepEqual(m.chooseLevel(16), { exact: false, level: 0, bucket: 16 });
  // The finest level's buckets up to two columns wide, then the exact replay.
  assert.deepEqual(m.chooseLevel(8), { exact: false, level: 0, bucket: 16 });
  assert.deepEqual(m.chooseLevel(7.9), { exact: true, level: -1, bucket: 1 });
  assert.deepEqual(m.chooseLevel(0.01), { exact: true, level: -1, bucket: 1 });
  // Without the *_start columns there is nothing to replay from: the finest level it is.
  const m2 = await modelOf(header(randomTrace(1, E), E, { omitStart: true }));
  assert.deepEqual(m2.chooseLevel(3), { exact: false, level: 0, bucket: 16 });
});

test("exact replay from the finest level gives every event's exact values", async () => {
  const E = 3000;
  const allocs = randomTrace(2, E);
  // Small limits so the finest bucket is 16 with only 3,000 events.
  const m = await modelOf(header(allocs, E, { maxBuckets: 200, coarsestMax: 20 }));
  assert.deepEqual(m.levels.map((l) => l.bucket), [16, 64, 256]);
  const cat = exactCurves(allocs, E, "category", 8);
  const own = exactCurves(allocs, E, "ownerGroup", SERIES.length);
  for (let t = 0; t < E; t += 7) {
    assert.deepEqual(Array.from(m.valuesAt(t, "category")), Array.from(cat.vals[t]), "category values at " + t);
    assert.deepEqual(Array.from(m.valuesAt(t, "owner")), Array.from(own.vals[t]), "owner values at " + t);
  }
  // Last event of a bucket and the first of the next (the replay boundaries).
  for (const t of [15, 16, 17, 2999]) assert.deepEqual(Array.from(m.valuesAt(t, "category")), Array.from(cat.vals[t]));
  // The scan of the allocation columns agrees.
  assert.deepEqual(Array.from(m.valuesByScan(1234, "category")), Array.from(cat.vals[1234]));
  // Before the trace: only the allocations made before it.
  assert.equal(sum(m.valuesByScan(-1, "category")), sum(allocs.filter((a) => a.start < 0).map((a) => a.size)));
});

// Checks columns against the brute-force curves: each column's event lies in its range (exact)
// or is a bucket peak (LOD), its values are the exact values at that event, and no event of its
// range has a higher total (exact only: a level keeps one peak per bucket).
function checkColumns(m, cols, curves, exact) {
  let checked = 0;
  for (let p = 0; p < cols.W; p++) {
    if (!cols.has[p]) continue;
    const t = cols.event[p];
    const row = Array.from(cols.vals.subarray(p * cols.K, (p + 1) * cols.K));
    assert.deepEqual(row, Array.from(curves.vals[t]), "column " + p + " values at event " + t);
    assert.equal(cols.alloc[p], curves.totals[t]);
    if (exact) {
      assert.ok(cols.first[p] <= t && t <= cols.last[p], "column " + p + " event " + t + " in " + cols.first[p] + ".." + cols.last[p]);
      let best = -Infinity;
      for (let e = cols.first[p]; e <= cols.last[p]; e++) best = Math.max(best, curves.totals[e]);
      assert.equal(cols.alloc[p], best, "column " + p + " holds its range's highest total");
    }
    checked++;
  }
  return checked;
}

test("columns from the levels and from the exact replay match the brute-force curves", async () => {
  const E = 3000;
  const allocs = randomTrace(4, E);
  const m = await modelOf(header(allocs, E, { maxBuckets: 200, coarsestMax: 20 }));
  const cat = exactCurves(allocs, E, "category", 8);
  // Whole range on 400 columns: 7.5 events per column -> exact replay (finest bucket is 16).
  let cols = m.computeColumns({ mode: "events", d0: 0, d1: E, width: 400, group: "category" });
  assert.equal(cols.source.exact, true);
  assert.equal(checkColumns(m, cols, cat, true), 400);
  // 200 columns: 15 events per column -> the finest level (buckets of 16, about a column).
  cols = m.computeColumns({ mode: "events", d0: 0, d1: E, width: 200, group: "category" });
  assert.deepEqual(cols.source, { exact: false, level: 0, bucket: 16 });
  assert.equal(checkColumns(m, cols, cat, false), 200);
  // 50 columns: 60 events per column -> level 1 (bucket 16 would be 4 per column, 64 > 60).
  cols = m.computeColumns({ mode: "events", d0: 0, d1: E, width: 50, group: "category" });
  assert.deepEqual(cols.source, { exact: false, level: 0, bucket: 16 });
  assert.equal(checkColumns(m, cols, cat, false), 50);
  // Each column shows the highest of the level's buckets it covers.
  const L = m.levels[0];
  for (let p = 0; p < 50; p++) {
    let best = -Infinity;
    for (let j = Math.floor(cols.first[p] / 16); j <= Math.floor(cols.last[p] / 16); j++) best = Math.max(best, L.allocated[j]);
    assert.equal(cols.alloc[p], best);
  }
  // The peak survives at any zoom: the highest column is the trace's peak.
  for (const width of [7, 50, 333, 1000]) {
    const c = m.computeColumns({ mode: "events", d0: 0, d1: E, width, group: "category" });
    assert.equal(Math.max(...c.alloc), Math.max(...cat.totals), "width " + width);
  }
  // Zoomed in on a range that does not start on a bucket boundary (exact, events wider than
  // a column: several columns show the same event).
  cols = m.computeColumns({ mode: "events", d0: 1003.5, d1: 1043.5, width: 400, group: "category" });
  assert.equal(cols.source.exact, true);
  assert.equal(checkColumns(m, cols, cat, true), 400);
  assert.equal(cols.event[0], 1003);
  assert.equal(cols.event[399], 1043);
  // The owner grouping.
  const own = exactCurves(allocs, E, "ownerGroup", SERIES.length);
  cols = m.computeColumns({ mode: "events", d0: 17, d1: 2500, width: 500, group: "owner" });
  assert.equal(cols.source.exact, true);
  assert.equal(checkColumns(m, cols, own, true), 500);
});

test("reserved and predicted columns are the highest value over each column's events", async () => {
  const E = 400;
  const allocs = randomTrace(5, E);
  const reserved = { event: [0, 100, 250], bytes: [1 << 20, 3 << 20, 2 << 20] };
  const predicted = { event: [0, 120], reserved: [2 << 20, 5 << 20], allocatedEvent: [0, 50, 300], allocated: [1, 7 << 20, 2] };
  const m = await modelOf(header(allocs, E, { reserved, predicted }));
  const cols = m.computeColumns({ mode: "events", d0: 0, d1: E, width: 40, group: "category" });
  const stepAt = (c, t, key) => {
    let v = 0;
    for (let i = 0; i < c[key || "event"].length && c[key || "event"][i] <= t; i++) v = c.bytes ? c.bytes[i] : c[key === "allocatedEvent" ? "allocated" : "reserved"][i];
    return v;
  };
  for (let p = 0; p < 40; p++) {
    let r = 0, pa = 0, pr = 0;
    for (let e = cols.first[p]; e <= cols.last[p]; e++) {
      r = Math.max(r, stepAt(reserved, e));
      pa = Math.max(pa, stepAt(predicted, e, "allocatedEvent"));
      pr = Math.max(pr, stepAt(predicted, e, "event"));
    }
    assert.equal(cols.resv[p], r, "reserved, column " + p);
    assert.equal(cols.predA[p], pa, "predicted allocated, column " + p);
    assert.equal(cols.predR[p], pr, "predicted reserved, column " + p);
  }
  assert.equal(m.predicted.label, "allocator model");
});

test("time axis: positions, events at a position, and columns over time", async () => {
  const E = 6;
  const allocs = [
    { start: 0, end: 3, size: 1000, category: 3 },
    { start: 1, end: 6, size: 500, category: 1 },
    { start: 2, end: 4, size: 2000, category: 6 },
  ];
  // Times: 0, 10, 10 (same microsecond), 40, 100, 1000.
  const m = await modelOf(header(allocs, E, { timeDeltas: [0, 10, 0, 30, 60, 900] }));
  assert.equal(m.hasTime, true);
  assert.deepEqual(Array.from(m.timeUs), [0, 10, 10, 40, 100, 1000]);
  assert.equal(m.timeEnd, 1000 + 200); // the last event gets the mean gap as its width
  assert.equal(m.pos(3, "time"), 40);
  assert.equal(m.pos(6, "time"), 1200);
  assert.equal(m.eventAt(10, "time"), 2);
  assert.equal(m.eventAt(39.9, "time"), 2);
  assert.equal(m.eventBefore(10, "time"), 0);
  assert.equal(m.eventAt(-5, "time"), -1);
  // 12 columns of 100 µs: column 0 covers events 0..3 (peak 3500 at event 2), column 1 event 4
  // (the value in effect at its left edge and the one event in it), then event 5 from 1000 µs.
  const cols = m.computeColumns({ mode: "time", d0: 0, d1: 1200, width: 12, group: "category" });
  assert.equal(cols.first[0], 0);
  assert.equal(cols.last[0], 3);
  assert.equal(cols.event[0], 2);
  assert.equal(cols.alloc[0], 3500);
  assert.equal(cols.event[1], 4);
  assert.equal(cols.alloc[1], 500);
  assert.equal(cols.event[5], 4);
  assert.equal(cols.event[10], 5);
  assert.equal(cols.event[11], 5);
  // Events mode of the same model.
  const ev = m.computeColumns({ mode: "events", d0: 0, d1: 6, width: 6, group: "category" });
  assert.deepEqual(Array.from(ev.event), [0, 1, 2, 3, 4, 5]);
  assert.deepEqual(Array.from(ev.alloc), [1000, 1500, 3500, 2500, 500, 500]);
});

test("the allocation under the cursor: live set, stacking order, series", async () => {
  const E = 8;
  const allocs = [
    { start: -1, end: 8, size: 100, category: 0 }, // 0: weight, before the trace
    { start: 0, end: 5, size: 10, category: 3 }, // 1: activation
    { start: 1, end: 8, size: 20, category: 3 }, // 2: activation
    { start: 2, end: 4, size: 30, category: 6 }, // 3: temporary
    { start: 3, end: 6, size: 40, category: 3 }, // 4: activation
  ];
  const m = await modelOf(header(allocs, E));
  assert.deepEqual(Array.from(m.liveAt(-1)), [0]);
  assert.deepEqual(Array.from(m.liveAt(3)), [0, 1, 2, 3, 4]);
  assert.deepEqual(Array.from(m.liveAt(4)), [0, 1, 2, 4]);
  assert.deepEqual(Array.from(m.liveAt(7)), [0, 2]);
  assert.equal(m.countStartedBy(2), 4);
  // At event 3 the activation band holds allocations 1, 2, 4 bottom to top: [0,10) [10,30) [30,70).
  assert.deepEqual(m.hitTest(3, "category", 3, 0), { index: 1, below: 0 });
  assert.deepEqual(m.hitTest(3, "category", 3, 9.99), { index: 1, below: 0 });
  assert.deepEqual(m.hitTest(3, "category", 3, 10), { index: 2, below: 10 });
  assert.deepEqual(m.hitTest(3, "category", 3, 69), { index: 4, below: 30 });
  assert.equal(m.hitTest(3, "category", 3, 70), null);
  // After allocation 1 is freed, 2 is at the bottom.
  assert.deepEqual(m.hitTest(5, "category", 3, 5), { index: 2, below: 0 });
  // Stacking the series: weight [0,100), activation [100,170), temporary [170,200) at event 3.
  const vals = m.valuesAt(3, "category");
  assert.deepEqual(Array.from(vals), [100, 0, 0, 70, 0, 0, 30, 0]);
  assert.deepEqual(M.DeviceModel.stackPick(vals, 8, null, 150), { series: 3, offset: 50, base: 100 });
  assert.deepEqual(M.DeviceModel.stackPick(vals, 8, null, 199), { series: 6, offset: 29, base: 170 });
  assert.equal(M.DeviceModel.stackPick(vals, 8, null, 200), null);
  // With the weights hidden, the activations start at 0.
  const vis = Uint8Array.from([0, 1, 1, 1, 1, 1, 1, 1]);
  assert.deepEqual(M.DeviceModel.stackPick(vals, 8, vis, 50), { series: 3, offset: 50, base: 0 });
  // The whole chain as the page runs it: stack pick, then hit test.
  const pick = M.DeviceModel.stackPick(vals, 8, null, 165);
  assert.equal(m.hitTest(3, "category", pick.series, pick.offset).index, 4);
});

test("hit testing agrees with the drawn bands on a random trace, from the levels too", async () => {
  const E = 3000;
  const allocs = randomTrace(9, E);
  const m = await modelOf(header(allocs, E, { maxBuckets: 200, coarsestMax: 20 }));
  const r = rng(11);
  for (const width of [120, 900]) {
    const cols = m.computeColumns({ mode: "events", d0: 0, d1: E, width, group: "category" });
    for (let q = 0; q < 60; q++) {
      const p = Math.floor(r() * width);
      const t = cols.event[p];
      const row = cols.vals.subarray(p * 8, p * 8 + 8);
      const bytes = r() * sum(row);
      const pick = M.DeviceModel.stackPick(row, 8, null, bytes);
      assert.ok(pick);
      const hit = m.hitTest(t, "category", pick.series, pick.offset);
      assert.ok(hit, "an allocation under every point of the stack");
      const a = allocs[hit.index];
      assert.ok(a.start <= t && t < a.end, "live at the column's event");
      assert.equal(a.category, pick.series);
      assert.ok(hit.below <= pick.offset && pick.offset < hit.below + a.size);
      // `below` is the bytes of the same series' live allocations made before it.
      let below = 0;
      for (let i = 0; i < hit.index; i++) if (allocs[i].category === pick.series && allocs[i].start <= t && t < allocs[i].end) below += allocs[i].size;
      assert.equal(hit.below, below);
    }
  }
});

test("describing an allocation: frames innermost first, telling frames kept", async () => {
  const frames = [["", 0, "", false]];
  const parent = [0], frame = [0];
  // A stack of 30 frames: outermost main.py (project), then 25 library frames, then model.py
  // (project) called from them, then 3 allocator frames innermost.
  const chain = [["main.py", 1, "main", true]];
  for (let i = 0; i < 25; i++) chain.push(["torch/lib" + i + ".py", i, "lib" + i, false]);
  chain.push(["model.py", 40, "forward", true]);
  for (let i = 0; i < 3; i++) chain.push(["alloc.cpp", i, "malloc" + i, false]);
  for (const f of chain) {
    frames.push(f);
    frame.push(frames.length - 1);
    parent.push(parent.length - 1);
  }
  const leaf = parent.length - 1;
  const allocs = [{ start: 0, end: 2, size: 4096, requested: 4000, category: 3, owner: 1, op: 1, stack: leaf, address: 0x7f00 }];
  const dev = B.buildDevice({ events: 2, allocations: allocs, owners: ["", "forward @ model.py:40"] });
  const h = B.buildHeader([B.buildReport({ devices: [dev], frames, parent, frame, owners: ["", "forward @ model.py:40"], strings: ["", "aten::mm"] })]);
  const m = await modelOf(h);
  const a = m.allocation(0, 1);
  assert.equal(a.size, 4096);
  assert.equal(a.requested, 4000);
  assert.equal(a.category, "activation");
  assert.equal(a.owner, "forward @ model.py:40");
  assert.equal(a.op, "aten::mm");
  assert.equal(a.pending, false);
  assert.equal(a.frames.length, 12);
  assert.equal(a.moreFrames, 30 - 12);
  assert.deepEqual(a.frames.slice(0, 4).map((f) => f.function), ["malloc2", "malloc1", "malloc0", "forward"]);
  // The 3 innermost, both project frames (3 and the outermost, 29), then the next innermost;
  // in stack order, the jump from 10 to 29 is where frames were left out.
  assert.deepEqual(a.frames.map((f) => f.index), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 29]);
  assert.equal(a.frames[11].function, "main");
  assert.ok(a.frames[3].project && a.frames[11].project);
  const T = require("../../src/report/viewer/timeline.js");
  const html = T.framesHtml(a.frames, a.moreFrames);
  assert.equal((html.match(/<li class="more">… 18 more<\/li>/g) || []).length, 1);
  assert.equal((html.match(/<li class="project">/g) || []).length, 2);
  const all = m.stackFrames(leaf);
  assert.equal(all.frames.length, 30);
  assert.equal(all.frames[29].function, "main");
});

test("pending frees: end <= t < free_completed", async () => {
  const allocs = [
    { start: 0, end: 2, freeCompleted: 4, size: 100, category: 4 },
    { start: 1, end: 5, size: 50, category: 3 },
  ];
  const m = await modelOf(header(allocs, 6));
  assert.equal(m.isPending(0, 1), false);
  assert.equal(m.isPending(0, 2), true);
  assert.equal(m.isPending(0, 3), true);
  assert.equal(m.isPending(0, 4), false);
  assert.deepEqual(Array.from(m.liveAt(3)), [1]); // not allocated any more
  assert.deepEqual(m.blocksAt(3), [0, 1]); // but still in its segment
  assert.deepEqual(m.blocksAt(4), [1]);
});

test("a device without events: nothing to draw, the state before the trace still answers", async () => {
  const allocs = [
    { start: -1, end: 0, size: 4096, category: 0 },
    { start: -1, end: 0, size: 8192, category: 3 },
  ];
  const m = await modelOf(header(allocs, 0, { reserved: { event: [], bytes: [] } }));
  assert.equal(m.E, 0);
  assert.equal(m.levels.length, 0);
  const cols = m.computeColumns({ mode: "events", d0: 0, d1: 1, width: 100, group: "category" });
  assert.equal(cols.has.reduce((x, y) => x + y, 0), 0);
  assert.deepEqual(Array.from(m.valuesAt(-1, "category")), [4096, 0, 0, 8192, 0, 0, 0, 0]);
  assert.deepEqual(Array.from(m.liveAt(-1)), [0, 1]);
  assert.equal(m.summary.peak_event, -1);
  assert.equal(m.summary.peak_allocated, 12288);
});

test("private pools: each pool's reserved bytes over the events, from its segments", async () => {
  const MiB = 1 << 20;
  const allocs = [{ start: 1, end: 9, size: 6 * MiB, segment: 1 }];
  const segments = {
    source: "recorded",
    pools: ["(1, 0)", "(0, 1)"],
    list: [
      { address: 0x1000000, size: 20 * MiB, start: -1, end: 10, pool: 0 },
      { address: 0x4000000, size: 20 * MiB, start: 0, end: 10, private_pool: 1 },
      { address: 0x8000000, size: 30 * MiB, start: 3, end: 6, private_pool: 2 },
      { address: 0xc000000, size: 2 * MiB, start: 4, end: 10, private_pool: 2 },
    ],
  };
  const m = await modelOf(header(allocs, 10, { segments }));
  assert.deepEqual(m.privatePools.map((p) => p.label), ["(1, 0)", "(0, 1)"]);
  const at = (k, t) => m.privatePools[k].curve.at(t);
  assert.deepEqual([0, 2, 3, 4, 5, 6, 9].map((t) => at(0, t)), Array(7).fill(20 * MiB));
  assert.deepEqual([2, 3, 4, 5, 6, 9].map((t) => at(1, t)), [0, 30 * MiB, 32 * MiB, 32 * MiB, 2 * MiB, 2 * MiB]);
  const cols = m.computeColumns({ mode: "event", d0: 0, d1: 10, width: 10, group: "category" });
  assert.equal(cols.pools.length, 2);
  assert.equal(cols.pools[1][4], 32 * MiB);
  assert.equal(cols.pools[1][7], 2 * MiB);
  // A report without private pools has none, and no pool columns.
  const plain = await modelOf(header([{ start: 1, end: 9, size: 6 * MiB, segment: 0 }], 10, { segments: { source: "recorded", list: segments.list.slice(0, 1) } }));
  assert.deepEqual(plain.privatePools, []);
});

test("region bands: the latest-starting band of a row covers an event; damaged bands are dropped", async () => {
  const allocs = [{ start: 0, end: 10, size: 4096, category: 0 }];
  const band = (name, row, first, last) => ({ name, kind: "annotation_range", first_event: first, last_event: last, allocated_bytes: 4096, live_at_peak_bytes: 0, peak_bytes: 4096, unmatched: false, row });
  const regions = [
    band("vramscope::forward#1", 0, 0, 5),
    band("Optimizer.step#AdamW.step", 0, 6, 9),
    band("inner", 1, 2, 3),
    band("nested later", 1, 3, 4),
    { name: "damaged", first_event: 5, last_event: 2, row: 0 }, // ends before it starts
    { name: "no row", first_event: 1, last_event: 2 },
  ];
  const m = await modelOf(header(allocs, 10, { regions }));
  assert.equal(m.regions.length, 4);
  assert.equal(m.regionRows, 2);
  assert.equal(m.regionAt(0, 0).name, "vramscope::forward#1");
  assert.equal(m.regionAt(0, 5).name, "vramscope::forward#1");
  assert.equal(m.regionAt(0, 6).name, "Optimizer.step#AdamW.step");
  assert.equal(m.regionAt(1, 1), null);
  assert.equal(m.regionAt(1, 2).name, "inner");
  assert.equal(m.regionAt(1, 3).name, "nested later"); // both cover 3: the later start is the inner
  assert.equal(m.regionAt(2, 3), null);
  // The tooltip names the region and its bytes.
  const T = require("../../src/report/viewer/timeline.js");
  const html = T.tooltipHtml(m, { kind: "region", region: m.regionAt(0, 6), event: 6 });
  assert.match(html, /Optimizer\.step#AdamW\.step/);
  assert.match(html, /4\.00 KiB over the trace/);
  assert.match(html, /live at peak<\/th><td>0 B/);
});
