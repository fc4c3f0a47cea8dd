#!/usr/bin/env node
// Checks the data of viewer pages against the contract (docs/design/viewer.md), with the page's
// own decoder and an independent replay of the allocations:
//
//   node tests/viewer/check_page.js PAGE.html [PAGE.html ...]
//
// For every device: ev_alloc/ev_sign agree with the allocations' start and end; every level's
// buckets hold the highest allocated total of their events, with each series' exact bytes at
// that event, and the highest reserved; the finest level's *_start rows are the values just
// before each bucket; the summary's peak and its breakdown by category and owner are what the
// allocations give; at the peak and at sampled events, the segments hold every live block and
// add up to the reserved curve. Prints one line per finding; exit status 1 when there is one.
"use strict";

const fs = require("node:fs");
const D = require("../../src/report/viewer/decode.js");
const M = require("../../src/report/viewer/model.js");
const A = require("../../src/report/viewer/analysis.js");

function blobOf(html) {
  const m = /<script type="application\/octet-stream" id="vramscope-data">([^<]*)<\/script>/.exec(html);
  if (!m) throw new Error("no vramscope-data element");
  return m[1];
}

function checkDevice(report, dev, say) {
  const m = new M.DeviceModel(report, dev, 0);
  const E = m.E, N = m.N, a = m.a;
  const C = report.categories.length;
  const G = dev.lod.groups.owner.series.length;
  // ev_alloc / ev_sign against start / end.
  let evBad = 0, evFirst = "";
  const claimed = new Int32Array(E).fill(-1);
  for (let i = 0; i < N; i++) {
    if (a.end[i] < a.start[i]) say("allocation " + i + " ends (" + a.end[i] + ") before it starts (" + a.start[i] + ")");
    if (a.start[i] >= 0 && a.end[i] > a.start[i]) claimed[a.start[i]] = i;
    if (a.end[i] < E && a.end[i] > a.start[i] && a.end[i] >= 0) claimed[a.end[i]] = i;
    if (m.blockEnd[i] < a.end[i]) say("allocation " + i + ": free_completed " + m.blockEnd[i] + " before end " + a.end[i]);
  }
  for (let e = 0; e < E; e++) {
    const x = dev.ev_alloc[e], s = dev.ev_sign[e];
    if (x < 0 && s === 0) continue;
    const ok = x >= 0 && ((s === 1 && a.start[x] === e) || (s === -1 && a.end[x] === e));
    if (!ok) {
      if (!evBad) evFirst = "event " + e + ": ev_alloc " + x + ", ev_sign " + s + (x >= 0 ? " (start " + a.start[x] + ", end " + a.end[x] + ")" : "");
      evBad++;
    }
  }
  for (let i = 0; i < N; i++) {
    if (a.start[i] >= 0 && a.start[i] < E && a.end[i] > a.start[i] && dev.ev_alloc[a.start[i]] !== i) {
      if (!evBad) evFirst = "allocation " + i + "'s start event " + a.start[i] + " names allocation " + dev.ev_alloc[a.start[i]];
      evBad++;
    }
  }
  if (evBad) say(evBad + " events disagree with the allocations; first: " + evFirst);

  // Exact per-event values by replaying the allocations (not ev_alloc): sweep starts and ends.
  const startsAt = new Map(), endsAt = new Map();
  const cat = new Float64Array(C), own = new Float64Array(G);
  for (let i = 0; i < N; i++) {
    if (a.start[i] < 0) {
      if (a.end[i] >= 0) {
        cat[a.category[i]] += a.size[i];
        own[a.owner_group[i]] += a.size[i];
      }
    } else (startsAt.get(a.start[i]) || startsAt.set(a.start[i], []).get(a.start[i])).push(i);
    if (a.end[i] < E && a.end[i] >= 0 && a.end[i] > a.start[i]) (endsAt.get(a.end[i]) || endsAt.set(a.end[i], []).get(a.end[i])).push(i);
  }
  const totals = new Float64Array(E);
  const catAt = new Float64Array(E * C), ownAt = new Float64Array(E * G);
  const catBefore = new Float64Array((E + 1) * C), ownBefore = new Float64Array((E + 1) * G);
  let total = 0;
  for (let k = 0; k < C; k++) total += cat[k];
  const startTotal = total;
  for (let e = 0; e < E; e++) {
    catBefore.set(cat, e * C);
    ownBefore.set(own, e * G);
    for (const i of startsAt.get(e) || []) {
      if (a.end[i] <= e) continue; // zero-length
      cat[a.category[i]] += a.size[i];
      own[a.owner_group[i]] += a.size[i];
      total += a.size[i];
    }
    for (const i of endsAt.get(e) || []) {
      cat[a.category[i]] -= a.size[i];
      own[a.owner_group[i]] -= a.size[i];
      total -= a.size[i];
    }
    totals[e] = total;
    catAt.set(cat, e * C);
    ownAt.set(own, e * G);
  }
  // Levels.
  dev.lod.levels.forEach((L, li) => {
    let bad = 0, first = "";
    const note = (msg) => {
      if (!bad) first = msg;
      bad++;
    };
    for (let j = 0; j < L.count; j++) {
      const e0 = j * L.bucket, e1 = Math.min(E, e0 + L.bucket) - 1;
      const p = L.peak_event[j];
      if (p < e0 || p > e1) note("bucket " + j + ": peak_event " + p + " outside " + e0 + ".." + e1);
      let best = -Infinity, rmax = -Infinity;
      for (let e = e0; e <= e1; e++) {
        best = Math.max(best, totals[e]);
        rmax = Math.max(rmax, m.reserved.at(e));
      }
      if (L.allocated[j] !== best) note("bucket " + j + ": allocated " + L.allocated[j] + ", highest total in the bucket " + best);
      if (totals[p] !== L.allocated[j]) note("bucket " + j + ": allocated " + L.allocated[j] + " but the total at its peak_event " + p + " is " + totals[p]);
      if (L.reserved[j] !== rmax) note("bucket " + j + ": reserved " + L.reserved[j] + ", highest reserved in the bucket " + rmax);
      for (let k = 0; k < C; k++) if (L.category[j * C + k] !== catAt[p * C + k]) { note("bucket " + j + ": category " + k + " is " + L.category[j * C + k] + ", exact " + catAt[p * C + k]); break; }
      for (let k = 0; k < G; k++) if (L.owner[j * G + k] !== ownAt[p * G + k]) { note("bucket " + j + ": owner series " + k + " is " + L.owner[j * G + k] + ", exact " + ownAt[p * G + k]); break; }
      if (L.category_start) for (let k = 0; k < C; k++) if (L.category_start[j * C + k] !== catBefore[e0 * C + k]) { note("bucket " + j + ": category_start " + k + " is " + L.category_start[j * C + k] + ", exact " + catBefore[e0 * C + k]); break; }
      if (L.owner_start) for (let k = 0; k < G; k++) if (L.owner_start[j * G + k] !== ownBefore[e0 * G + k]) { note("bucket " + j + ": owner_start " + k + " is " + L.owner_start[j * G + k] + ", exact " + ownBefore[e0 * G + k]); break; }
    }
    if (bad) say("level " + li + " (bucket " + L.bucket + "): " + bad + " findings; first: " + first);
  });
  // The page's exact replay against the sweep.
  for (let e = 0; e < E; e += Math.max(1, Math.floor(E / 500))) {
    const v = m.valuesAt(e, "category");
    for (let k = 0; k < C; k++) if (v[k] !== catAt[e * C + k]) { say("replay at event " + e + ": category " + k + " " + v[k] + ", exact " + catAt[e * C + k]); break; }
  }
  // Summary.
  const s = dev.summary;
  // The peak may be before the first event (event -1: what was live when the trace began).
  let peak = startTotal, peakEvent = -1;
  for (let e = 0; e < E; e++) if (totals[e] > peak) { peak = totals[e]; peakEvent = e; }
  if (E > 0) {
    if (s.peak_allocated !== peak) say("summary.peak_allocated " + s.peak_allocated + ", the allocations' peak " + peak + " (at event " + peakEvent + ")");
    if (s.peak_event === -1 && startTotal !== s.peak_allocated) say("summary.peak_event -1 (before the trace), where " + startTotal + " B are live, not peak_allocated " + s.peak_allocated);
    if (s.peak_event >= 0 && totals[s.peak_event] !== s.peak_allocated) say("summary.peak_event " + s.peak_event + " has total " + totals[s.peak_event] + ", not peak_allocated " + s.peak_allocated);
    if (s.allocated_at_end !== totals[E - 1]) say("summary.allocated_at_end " + s.allocated_at_end + ", the allocations give " + totals[E - 1]);
    if (s.reserved_at_end !== m.reserved.at(E - 1)) say("summary.reserved_at_end " + s.reserved_at_end + ", the reserved curve ends at " + m.reserved.at(E - 1));
    let rpeak = -Infinity;
    for (let e = 0; e < E; e++) rpeak = Math.max(rpeak, m.reserved.at(e));
    if (s.peak_reserved !== rpeak) {
      // Before the trace the curve has no point; the segments live then say what was reserved.
      let before = 0;
      for (let k = 0; k < dev.segments.count; k++) if (dev.segments.start[k] < 0 && dev.segments.end[k] >= 0) before += dev.segments.size[k];
      if (!(s.peak_reserved_event === -1 && s.peak_reserved === before)) say("summary.peak_reserved " + s.peak_reserved + " at event " + s.peak_reserved_event + ", the reserved curve's peak " + rpeak);
      else say("note: the reserved peak is before the first event (" + before + " B in the segments live then); the reserved curve has no point there");
    }
  }
  if (s.start_allocated !== undefined && s.start_allocated !== startTotal) say("summary.start_allocated " + s.start_allocated + ", the allocations before the trace " + startTotal);
  const t = s.peak_event;
  const b = A.breakdownAt(m, t);
  const want = new Map((s.categories_at_peak || []).map((c) => [c.category, c]));
  for (const c of b.categories) {
    const w = want.get(c.category) || { bytes: 0, count: 0 };
    if (w.bytes !== c.bytes || w.count !== c.count) say("categories_at_peak " + c.category + ": " + w.bytes + " B in " + w.count + ", the allocations live at " + t + " give " + c.bytes + " B in " + c.count);
  }
  const ownKey = (o) => o.owner + " [" + o.category + "]";
  const wantOwners = new Map((s.owners_at_peak || []).map((o) => [ownKey(o), o]));
  let ownerBad = 0, ownerFirst = "";
  for (const o of b.owners) {
    const w = wantOwners.get(ownKey(o));
    if (!w) continue; // the summary may list the largest owners only
    if (w.bytes !== o.bytes || w.count !== o.count) {
      if (!ownerBad) ownerFirst = ownKey(o) + ": " + w.bytes + " B in " + w.count + " vs " + o.bytes + " B in " + o.count;
      ownerBad++;
    }
  }
  for (const k of wantOwners.keys()) if (!b.owners.some((o) => ownKey(o) === k)) { if (!ownerBad) ownerFirst = k + " is not live at the peak"; ownerBad++; }
  if (ownerBad) say(ownerBad + " owners_at_peak disagree with the allocations; first: " + ownerFirst);
  // Allocator state at the peak and at sampled events.
  const samples = new Set([t, s.peak_reserved_event, E - 1]);
  for (let e = 0; e < E; e += Math.max(1, Math.floor(E / 50))) samples.add(e);
  let stateBad = 0, stateFirst = "";
  for (const e of samples) {
    if (!(e >= 0 && e < E)) continue;
    const st = A.allocatorState(m, e);
    const problems = st.problems.slice();
    if (st.source !== "none" && st.totals.reserved !== m.reserved.at(e)) problems.push("segments total " + st.totals.reserved + " B, the reserved curve " + m.reserved.at(e) + " B");
    if (st.totals.allocated !== totals[e]) problems.push("blocks allocated " + st.totals.allocated + " B, the allocated total " + totals[e] + " B");
    if (problems.length) {
      if (!stateBad) stateFirst = "event " + e + ": " + problems.join("; ");
      stateBad++;
    }
  }
  if (stateBad) say("allocator state disagrees at " + stateBad + " of " + samples.size + " sampled events; first: " + stateFirst);
  const tree = A.buildIcicle(m, m.liveAt(t));
  if (E > 0 && tree.total[0] !== s.peak_allocated) say("icicle total " + tree.total[0] + " != peak_allocated " + s.peak_allocated);
  let frameZero = 0;
  for (let n = 1; n < report.stacks.frame.length; n++) if (report.stacks.frame[n] === 0) frameZero++;
  if (frameZero) say(frameZero + " stack nodes other than node 0 have frame 0 (the empty frame)");
  return { E, N, segments: dev.segments.count, source: dev.segments.source, levels: dev.lod.levels.map((l) => l.bucket), peak: s.peak_allocated };
}

async function checkPage(path) {
  const data = await D.decodeBase64(blobOf(fs.readFileSync(path, "utf8")));
  const findings = [];
  data.reports.forEach((r, ri) => {
    if (!r.frames.some((f) => f[3])) findings.push("report " + ri + ": no frame is marked as a project file");
    r.devices.forEach((dev) => {
      const info = checkDevice(r, dev, (msg) => findings.push("report " + ri + ", device " + dev.device + ": " + msg));
      console.log(path + ": report " + ri + " device " + dev.device + ": " + JSON.stringify(info));
    });
  });
  for (const f of findings) console.log("  " + f);
  return findings.length;
}

async function main() {
  let bad = 0;
  for (const p of process.argv.slice(2)) {
    try {
      bad += await checkPage(p);
    } catch (e) {
      console.log(p + ": " + (e.name === "DataError" ? "decode error: " : "") + e.message);
      bad++;
    }
  }
  process.exit(bad ? 1 : 0);
}

module.exports = { checkPage, checkDevice };
if (require.main === module) main();
