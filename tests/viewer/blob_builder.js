// Builds viewer blobs in the exact contract format (docs/design/viewer.md, "The blob (format 1)"),
// so the tests decode what the C++ side writes: header JSON + 8-aligned little-endian columns,
// gzip-compressed, base64 in the page.
//
// It also holds a reference implementation of the level-of-detail pyramid and the summary, from
// a list of allocations, written from the contract's words (not from the page's code), so the
// page's exact replay and level choice are checked against an independent computation.
"use strict";

const zlib = require("node:zlib");
const fs = require("node:fs");
const path = require("node:path");

// The one vocabulary's export (src/model/vocabulary.h -> python/vramscope/vocabulary.json): pool
// codes and names, as the C++ encoder writes them.
const VOCABULARY = JSON.parse(fs.readFileSync(path.join(__dirname, "..", "..", "python", "vramscope", "vocabulary.json"), "utf8"));
const POOL_NAMES = Object.entries(VOCABULARY.pools).sort((a, b) => a[1] - b[1]).map(([name]) => name);

const TYPES = {
  f64: Float64Array,
  i32: Int32Array,
  u32: Uint32Array,
  u8: Uint8Array,
  i8: Int8Array,
};

const CATEGORIES = ["weight", "gradient", "optimizer_state", "activation", "input", "workspace", "temporary", "unknown"];

// A column placeholder: put it anywhere in a header; encodeBlob turns it into {"col": K}.
class Col {
  constructor(type, data, name) {
    if (!TYPES[type]) throw new Error("unknown column type " + type);
    this.type = type;
    this.data = data instanceof TYPES[type] ? data : TYPES[type].from(data);
    this.name = name || "";
  }
}
function col(type, data, name) {
  return new Col(type, data, name);
}

// header (with Col placeholders) -> the uncompressed blob bytes (a Buffer).
// options.misalign: put columns at offsets that are not multiples of 8 (to test the checks).
function encodeRaw(header, options) {
  options = options || {};
  const cols = [];
  const walk = (v, path) => {
    if (v instanceof Col) {
      if (!v.name) v.name = path;
      cols.push(v);
      return { col: cols.length - 1 };
    }
    if (Array.isArray(v)) return v.map((x, i) => walk(x, path + "." + i));
    if (v !== null && typeof v === "object" && !ArrayBuffer.isView(v)) {
      const out = {};
      for (const k of Object.keys(v)) out[k] = walk(v[k], path ? path + "." + k : k);
      return out;
    }
    return v;
  };
  const resolved = walk(header, "");
  let offset = 0;
  const specs = cols.map((c) => {
    const spec = { name: c.name, type: c.type, offset, length: c.data.length };
    offset += Math.ceil(c.data.byteLength / 8) * 8 + (options.misalign ? 4 : 0);
    return spec;
  });
  resolved.columns = specs;
  const json = Buffer.from(JSON.stringify(resolved), "utf8");
  const headerEnd = 8 + json.length;
  const binaryStart = Math.ceil(headerEnd / 8) * 8;
  const out = Buffer.alloc(binaryStart + offset);
  out.write("VSV1", 0, "latin1");
  out.writeUInt32LE(json.length, 4);
  json.copy(out, 8);
  cols.forEach((c, k) => {
    // Typed arrays are little-endian on every host these tests run on (x86, arm).
    Buffer.from(c.data.buffer, c.data.byteOffset, c.data.byteLength).copy(out, binaryStart + specs[k].offset);
  });
  return out;
}

function encodeBlob(header, options) {
  return zlib.gzipSync(encodeRaw(header, options), { level: 6 });
}

function encodeBase64(header, options) {
  return encodeBlob(header, options).toString("base64");
}

// ---- reference LOD and summary -----------------------------------------------------------------

// Level bucket sizes per the contract: the finest is 1 when E <= maxBuckets (16,384), else the smallest
// power of 4 keeping at most maxBuckets buckets; each next is 4 times coarser; the coarsest has
// at most coarsestMax buckets.
function levelBuckets(E, maxBuckets, coarsestMax) {
  maxBuckets = maxBuckets || 16384;
  coarsestMax = coarsestMax || 1024;
  if (E === 0) return [];
  let b = 1;
  while (Math.ceil(E / b) > maxBuckets) b *= 4;
  const out = [b];
  while (Math.ceil(E / b) > coarsestMax) {
    b *= 4;
    out.push(b);
  }
  return out;
}

// Events from allocations: +1 at start (when >= 0), -1 at end (when < E).
function eventsFromAllocations(E, allocs) {
  const evAlloc = new Int32Array(E).fill(-1);
  const evSign = new Int8Array(E);
  allocs.forEach((a, i) => {
    for (const [e, s] of [[a.start, 1], [a.end, -1]]) {
      if (e < 0 || e >= E) continue;
      if (evAlloc[e] !== -1) throw new Error("event " + e + " claimed by allocations " + evAlloc[e] + " and " + i);
      evAlloc[e] = i;
      evSign[e] = s;
    }
  });
  return { evAlloc, evSign };
}

function stepAt(curve, t) {
  let v = 0;
  for (let i = 0; i < curve.event.length && curve.event[i] <= t; i++) v = curve.bytes[i];
  return v;
}

// spec: {device, events: E, allocations: [{start, end, size, requested, address, category,
//   owner, op, stack, phase, step, segment, ownerGroup, freeCompleted}], timeDeltas, time0,
//   segments: {source, list: [{address, size, start, end, stream, pool}]}, reserved: {event,
//   bytes} (default: from the segments), predicted: {label, event, reserved, allocatedEvent,
//   allocated}, phases, ownerSeries, categories,
//   maxBuckets, coarsestMax, omitStart (leave out *_start), owners (names, for the summary)}
function buildDevice(spec) {
  const E = spec.events;
  const allocs = spec.allocations;
  const categories = spec.categories || CATEGORIES;
  const C = categories.length;
  const ownerSeries = spec.ownerSeries || ["other owners"];
  const G = ownerSeries.length;
  const N = allocs.length;
  for (let i = 1; i < N; i++) if (allocs[i].start < allocs[i - 1].start) throw new Error("allocations must be sorted by start");
  const { evAlloc, evSign } = eventsFromAllocations(E, allocs);
  const segList = (spec.segments && spec.segments.list) || [];
  let reserved = spec.reserved;
  if (!reserved) {
    // Reserved from the segments: the total after each event where one starts or ends.
    const changes = new Set([0]);
    for (const s of segList) {
      if (s.start >= 0 && s.start < E) changes.add(s.start);
      if (s.end >= 0 && s.end < E) changes.add(s.end);
    }
    const ev = Array.from(changes).sort((x, y) => x - y);
    reserved = { event: ev, bytes: ev.map((t) => segList.reduce((acc, s) => acc + (s.start <= t && t < s.end ? s.size : 0), 0)) };
  }
  const size = allocs.map((a) => a.size);
  const catOf = allocs.map((a) => (typeof a.category === "string" ? categories.indexOf(a.category) : a.category || 0));
  const grpOf = allocs.map((a) => a.ownerGroup || 0);

  // Values before event 0: the allocations live before the trace.
  const cat = new Float64Array(C), own = new Float64Array(G);
  for (let i = 0; i < N; i++) {
    if (allocs[i].start < 0 && allocs[i].end >= 0) {
      cat[catOf[i]] += size[i];
      own[grpOf[i]] += size[i];
    }
  }
  const startAllocated = cat.reduce((x, y) => x + y, 0);
  const buckets = levelBuckets(E, spec.maxBuckets, spec.coarsestMax);
  const levels = buckets.map((b) => {
    const B = Math.ceil(E / b);
    return {
      bucket: b, count: B,
      peak: new Int32Array(B).fill(-1), alloc: new Float64Array(B).fill(-Infinity), resv: new Float64Array(B),
      cat: new Float64Array(B * C), own: new Float64Array(B * G),
      catStart: new Float64Array(B * C), ownStart: new Float64Array(B * G),
    };
  });
  let total = startAllocated;
  let peak = { bytes: -Infinity, event: -1 };
  let rpeak = { bytes: -Infinity, event: -1 };
  let ri = -1; // index into the reserved curve in effect
  for (let t = 0; t < E; t++) {
    for (const L of levels) {
      if (t % L.bucket === 0) {
        const j = t / L.bucket;
        L.catStart.set(cat, j * C);
        L.ownStart.set(own, j * G);
      }
    }
    const a = evAlloc[t];
    if (a >= 0 && evSign[t] !== 0) {
      const d = evSign[t] * size[a];
      cat[catOf[a]] += d;
      own[grpOf[a]] += d;
      total += d;
    }
    while (ri + 1 < reserved.event.length && reserved.event[ri + 1] <= t) ri++;
    const r = ri >= 0 ? reserved.bytes[ri] : 0;
    if (total > peak.bytes) peak = { bytes: total, event: t };
    if (r > rpeak.bytes) rpeak = { bytes: r, event: t };
    for (const L of levels) {
      const j = Math.floor(t / L.bucket);
      if (total > L.alloc[j]) {
        L.alloc[j] = total;
        L.peak[j] = t;
        L.cat.set(cat, j * C);
        L.own.set(own, j * G);
      }
      if (r > L.resv[j]) L.resv[j] = r;
    }
  }
  const lod = {
    groups: { category: { series: categories.slice() }, owner: { series: ownerSeries.slice() } },
    levels: levels.map((L, i) => {
      const level = {
        bucket: L.bucket, count: L.count,
        peak_event: col("i32", L.peak), allocated: col("f64", L.alloc), reserved: col("f64", L.resv),
        category: col("f64", L.cat), owner: col("f64", L.own),
      };
      if (i === 0 && !spec.omitStart) {
        level.category_start = col("f64", L.catStart);
        level.owner_start = col("f64", L.ownStart);
      }
      return level;
    }),
  };

  // The summary at the peak (independently of the page: scan of start <= t < end).
  const peakEvent = E > 0 ? peak.event : -1;
  const owners = spec.owners || [""];
  const liveAtPeak = allocs.map((a, i) => i).filter((i) => allocs[i].start <= peakEvent && peakEvent < allocs[i].end);
  const catSum = categories.map((name) => ({ category: name, bytes: 0, count: 0 }));
  const ownSum = new Map();
  for (const i of liveAtPeak) {
    catSum[catOf[i]].bytes += size[i];
    catSum[catOf[i]].count++;
    const key = (allocs[i].owner || 0) + "/" + catOf[i];
    const o = ownSum.get(key) || { category: categories[catOf[i]], owner: owners[allocs[i].owner || 0] || "", bytes: 0, count: 0 };
    o.bytes += size[i];
    o.count++;
    ownSum.set(key, o);
  }
  const allocatedAtEnd = E > 0 ? total : startAllocated;
  const summary = {
    peak_allocated: E > 0 ? peak.bytes : startAllocated,
    peak_event: peakEvent,
    peak_reserved: E > 0 ? rpeak.bytes : stepAt(reserved, 0),
    peak_reserved_event: E > 0 ? rpeak.event : -1,
    allocated_at_end: allocatedAtEnd,
    reserved_at_end: stepAt(reserved, E - 1),
    start_allocated: startAllocated,
    categories_at_peak: catSum.filter((c) => c.bytes > 0).sort((x, y) => y.bytes - x.bytes),
    owners_at_peak: Array.from(ownSum.values()).sort((x, y) => y.bytes - x.bytes),
    iterations: spec.iterations || [],
  };

  const dev = {
    device: spec.device || 0,
    events: E,
    has_time: !!spec.timeDeltas,
    ev_alloc: col("i32", evAlloc),
    ev_sign: col("i8", evSign),
    reserved: { event: col("i32", reserved.event), bytes: col("f64", reserved.bytes) },
    predicted: spec.predicted
      ? {
          label: spec.predicted.label || "allocator model",
          event: col("i32", spec.predicted.event), reserved: col("f64", spec.predicted.reserved),
          allocated_event: col("i32", spec.predicted.allocatedEvent || spec.predicted.event), allocated: col("f64", spec.predicted.allocated),
        }
      : null,
    allocations: {
      count: N,
      start: col("i32", allocs.map((a) => a.start)),
      end: col("i32", allocs.map((a) => a.end)),
      free_completed: col("i32", allocs.map((a) => (a.freeCompleted === undefined ? a.end : a.freeCompleted))),
      size: col("f64", size),
      requested: col("f64", allocs.map((a) => (a.requested === undefined ? a.size : a.requested))),
      address: col("f64", allocs.map((a) => a.address || 0)),
      category: col("u8", catOf),
      owner: col("u32", allocs.map((a) => a.owner || 0)),
      op: col("u32", allocs.map((a) => a.op || 0)),
      stack: col("u32", allocs.map((a) => a.stack || 0)),
      phase: col("u8", allocs.map((a) => a.phase || 0)),
      step: col("i32", allocs.map((a) => (a.step === undefined ? -1 : a.step))),
      segment: col("i32", allocs.map((a) => (a.segment === undefined ? -1 : a.segment))),
      owner_group: col("u8", grpOf),
    },
    segments: {
      source: (spec.segments && spec.segments.source) || "none",
      count: segList.length,
      address: col("f64", segList.map((s) => s.address)),
      size: col("f64", segList.map((s) => s.size)),
      start: col("i32", segList.map((s) => s.start)),
      end: col("i32", segList.map((s) => s.end)),
      stream: col("f64", segList.map((s) => s.stream || 0)),
      pool: col("u8", segList.map((s) => (s.pool === undefined ? VOCABULARY.pools.large : s.pool))),
      pool_names: POOL_NAMES,
    },
    phases: spec.phases || [],
    regions: spec.regions || [],
    summary,
    lod,
  };
  // Segments of private pools: spec.segments.pools names them ("(1, 0)"), each segment's
  // private_pool is 0 (default) or 1 + its pool's index.
  if (spec.segments && spec.segments.pools) {
    dev.segments.private_pool = col("i32", segList.map((s) => s.private_pool || 0));
    dev.segments.private_pools = spec.segments.pools;
  }
  if (spec.timeDeltas) {
    dev.time_us = col("u32", spec.timeDeltas);
    dev.time0_us = spec.time0 || 1700000000000000;
  }
  return dev;
}

// A report around devices; frames/stacks given as {frames: [[file, line, fn, project]...],
// parent: [...], frame: [...]} (node 0 and frame 0 are added when absent).
function buildReport(spec) {
  const frames = spec.frames || [["", 0, "", false]];
  const parent = spec.parent || [0];
  const frame = spec.frame || [0];
  return {
    title: spec.title || "test.pickle",
    kind: spec.kind || "measured",
    source: spec.source || "snapshot",
    categories: spec.categories || CATEGORIES.slice(),
    phases: spec.phases || ["none", "forward", "backward", "optimizer"],
    strings: spec.strings || [""],
    owners: spec.owners || [""],
    frames,
    stacks: { parent: col("u32", parent), frame: col("u32", frame) },
    notes: spec.notes || [],
    devices: spec.devices,
  };
}

function buildHeader(reports) {
  return { format: 1, generator: "vramscope test blob builder", reports };
}

module.exports = {
  VOCABULARY,
  TYPES, CATEGORIES, Col, col, encodeRaw, encodeBlob, encodeBase64, levelBuckets,
  eventsFromAllocations, buildDevice, buildReport, buildHeader,
};
