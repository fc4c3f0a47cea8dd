"use strict";
// Mutation fuzzing of the page's decoder, with a fixed seed so every run is the same: damaged
// blobs (bytes flipped in the header and the columns, lengths and offsets changed, data cut short)
// must either decode into data every view can use or fail with the decoder's own DataError (the
// one clear message the page shows). Anything else (a TypeError, a RangeError, a hang) is a bug.
const test = require("node:test");
const assert = require("node:assert/strict");
const B = require("./blob_builder.js");
const D = require("../../src/report/viewer/decode.js");
const M = require("../../src/report/viewer/model.js");
const A = require("../../src/report/viewer/analysis.js");
const { rng, randomTrace } = require("./helpers.js");

function seedBlob() {
  const trace = randomTrace(7, 300, { groups: 4 });
  const dev = B.buildDevice({
    events: 300, allocations: trace,
    ownerSeries: ["a", "b", "c", "other owners"], owners: ["", "a", "b", "c", "d", "e", "f"],
    segments: { source: "none", list: [] },
  });
  return B.encodeRaw(B.buildHeader([B.buildReport({
    owners: ["", "a", "b", "c", "d", "e", "f"], devices: [dev],
    frames: [["", 0, "", false], ["model.py", 10, "forward", true]], parent: [0, 0], frame: [0, 1],
  })]));
}

// Uses the decoded data the way the page does: a model per device, its live set, the allocator
// state and the breakdown at a few moments, and the icicle graph.
function exercise(data) {
  for (const r of data.reports) {
    r.devices.forEach((dev, i) => {
      const m = new M.DeviceModel(r, dev, i);
      for (const t of [0, Math.floor(dev.events / 2), dev.events - 1]) {
        if (t < 0) continue;
        const live = m.liveAt(t);
        A.allocatorState(m, t);
        A.breakdownAt(m, t, live);
        A.layoutIcicle(A.buildIcicle(m, live));
      }
    });
  }
}

function mutate(raw, r) {
  const out = Buffer.from(raw);
  const kind = Math.floor(r() * 4);
  const headerLength = out.readUInt32LE(4);
  if (kind === 0) {
    // Flip a few bytes anywhere.
    for (let k = 0; k < 1 + Math.floor(r() * 4); k++) out[Math.floor(r() * out.length)] ^= 1 + Math.floor(r() * 255);
    return out;
  }
  if (kind === 1) {
    // Change a digit in the header JSON: counts, offsets, lengths, events.
    const digits = [];
    for (let i = 8; i < 8 + headerLength; i++) if (out[i] >= 0x30 && out[i] <= 0x39) digits.push(i);
    if (digits.length) out[digits[Math.floor(r() * digits.length)]] = 0x30 + Math.floor(r() * 10);
    return out;
  }
  if (kind === 2) {
    // Damage the columns: set a run of bytes to an extreme value.
    const start = 8 + headerLength + Math.floor(r() * Math.max(1, out.length - 8 - headerLength));
    const fill = [0x00, 0xff, 0x7f, 0x80][Math.floor(r() * 4)];
    for (let i = start; i < Math.min(out.length, start + 1 + Math.floor(r() * 16)); i++) out[i] = fill;
    return out;
  }
  return out.subarray(0, Math.floor(r() * out.length));  // cut short
}

test("damaged blobs decode into usable data or fail with one clear message", () => {
  const raw = seedBlob();
  exercise(D.decodeBytes(new Uint8Array(raw)));  // the seed itself is valid
  const r = rng(20261122);
  let refused = 0;
  let accepted = 0;
  for (let i = 0; i < 3000; i++) {
    const bytes = new Uint8Array(mutate(raw, r));
    let data;
    try {
      data = D.decodeBytes(bytes);
    } catch (e) {
      assert.ok(e instanceof D.DataError, `mutation ${i}: ${e && e.stack}`);
      assert.ok(e.message.length > 10);
      refused++;
      continue;
    }
    try {
      exercise(data);
    } catch (e) {
      assert.fail(`mutation ${i} decoded, then the views failed: ${e && e.stack}`);
    }
    accepted++;
  }
  assert.ok(refused > 100 && accepted > 100, `refused ${refused}, accepted ${accepted}`);
});
