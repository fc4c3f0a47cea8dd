// Shared helpers of the viewer's unit tests: deterministic random traces, brute-force reference
// computations (straight from the contract's definitions), and decoding through the page's path.
"use strict";

const B = require("./blob_builder.js");
const D = require("../../src/report/viewer/decode.js");
const M = require("../../src/report/viewer/model.js");

function rng(seed) {
  return function () {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// A random trace of E events: allocations made and freed in random order, some before the
// trace, some still live at the end, some with a pending free, and "other" events.
function randomTrace(seed, E, opts) {
  opts = opts || {};
  const r = rng(seed);
  const G = opts.groups || 5;
  const allocs = [];
  const live = [];
  const before = opts.before === undefined ? 4 : opts.before;
  for (let i = 0; i < before; i++) {
    allocs.push({ start: -1, end: E, size: 512 * (1 + Math.floor(r() * 4000)), category: Math.floor(r() * 8), ownerGroup: Math.floor(r() * G) });
    live.push(i);
  }
  const pendingUntil = new Map(); // event -> allocation whose free completes there
  for (let t = 0; t < E; t++) {
    if (pendingUntil.has(t)) continue; // a free_completed event: "other"
    const x = r();
    if (x < 0.5 || live.length === 0) {
      const size = 512 * (1 + Math.floor(r() * (r() < 0.1 ? 40000 : 2000)));
      allocs.push({ start: t, end: E, size, requested: size - Math.floor(r() * 500), category: Math.floor(r() * 8), ownerGroup: Math.floor(r() * G), owner: 1 + Math.floor(r() * 6), stack: 0 });
      live.push(allocs.length - 1);
    } else if (x < 0.9) {
      const k = Math.floor(r() * live.length);
      const a = allocs[live[k]];
      live.splice(k, 1);
      a.end = t;
      if (r() < 0.1 && t + 3 < E) {
        a.freeCompleted = t + 3;
        pendingUntil.set(t + 3, a);
      }
    }
  }
  return allocs;
}

// Per-event exact values, from the allocations alone (start <= t < end).
function bruteValues(allocs, t, key, K) {
  const out = new Float64Array(K);
  for (const a of allocs) if (a.start <= t && t < a.end) out[a[key] || 0] += a.size;
  return out;
}

function sum(arr) {
  let s = 0;
  for (const v of arr) s += v;
  return s;
}

// header (blob_builder form) -> the decoded, resolved header, through the page's decoder.
async function decodeHeader(header) {
  return D.decodeBase64(B.encodeBase64(header));
}

async function modelOf(header, r, d) {
  const data = await decodeHeader(header);
  const report = data.reports[r || 0];
  return new M.DeviceModel(report, report.devices[d || 0], r || 0);
}

module.exports = { rng, randomTrace, bruteValues, sum, decodeHeader, modelOf };
