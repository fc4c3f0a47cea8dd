"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const zlib = require("node:zlib");
const B = require("./blob_builder.js");
const D = require("../../src/report/viewer/decode.js");
const { randomTrace } = require("./helpers.js");

function smallHeader(overrides) {
  const allocs = [
    { start: -1, end: 6, size: 4096, requested: 4000, address: 0x1000, category: "weight", owner: 1, segment: 0 },
    { start: 1, end: 3, size: 1024, address: 0x2000, category: "activation", owner: 2, segment: 0, stack: 2 },
    { start: 2, end: 6, size: 512, address: 0x2400, category: "gradient", owner: 1, segment: 0 },
  ];
  const dev = B.buildDevice({
    events: 6, allocations: allocs, timeDeltas: [0, 5, 7, 11, 13, 17],
    segments: { source: "recorded", list: [{ address: 0x1000, size: 1 << 16, start: -1, end: 6, stream: 0, pool: 1 }] },
    ownerSeries: ["a", "other owners"], owners: ["", "a", "b"],
  });
  Object.assign(dev, overrides || {});
  return B.buildHeader([B.buildReport({
    owners: ["", "a", "b"], devices: [dev],
    frames: [["", 0, "", false], ["model.py", 10, "forward", true], ["torch/nn/linear.py", 116, "forward", false]],
    parent: [0, 0, 1], frame: [0, 1, 2],
  })]);
}

test("a blob decodes to the same columns, with the right types", async () => {
  const data = await D.decodeBase64(B.encodeBase64(smallHeader()));
  assert.equal(data.format, 1);
  const r = data.reports[0];
  const d = r.devices[0];
  assert.ok(d.ev_alloc instanceof Int32Array);
  assert.deepEqual(Array.from(d.ev_alloc), [-1, 1, 2, 1, -1, -1]);
  assert.ok(d.ev_sign instanceof Int8Array);
  assert.deepEqual(Array.from(d.ev_sign), [0, 1, 1, -1, 0, 0]);
  assert.ok(d.time_us instanceof Uint32Array);
  assert.deepEqual(Array.from(d.time_us), [0, 5, 7, 11, 13, 17]);
  assert.ok(d.allocations.size instanceof Float64Array);
  assert.deepEqual(Array.from(d.allocations.size), [4096, 1024, 512]);
  assert.deepEqual(Array.from(d.allocations.requested), [4000, 1024, 512]);
  assert.deepEqual(Array.from(d.allocations.start), [-1, 1, 2]);
  assert.ok(d.allocations.category instanceof Uint8Array);
  assert.deepEqual(Array.from(d.allocations.category), [0, 3, 1]);
  assert.ok(r.stacks.parent instanceof Uint32Array);
  assert.deepEqual(Array.from(r.stacks.frame), [0, 1, 2]);
  assert.equal(d.segments.source, "recorded");
  assert.equal(d.segments.address[0], 0x1000);
  // E = 6 fits one level of bucket 1: every value exact.
  assert.equal(d.lod.levels.length, 1);
  assert.equal(d.lod.levels[0].bucket, 1);
  assert.deepEqual(Array.from(d.lod.levels[0].allocated), [4096, 5120, 5632, 4608, 4608, 4608]);
  assert.equal(d.summary.peak_allocated, 5632);
  assert.equal(d.summary.peak_event, 2);
});

test("large addresses and sizes survive exactly (f64 up to 2^53)", async () => {
  const h = smallHeader();
  h.reports[0].devices[0].allocations.address = B.col("f64", [2 ** 47 + 512, 0x7fffffffe000, 2 ** 53 - 1]);
  const data = await D.decodeBase64(B.encodeBase64(h));
  assert.deepEqual(Array.from(data.reports[0].devices[0].allocations.address), [2 ** 47 + 512, 0x7fffffffe000, 2 ** 53 - 1]);
});

test("columns are views on the decompressed buffer, 8-aligned", async () => {
  const raw = B.encodeRaw(smallHeader());
  const { header, columns } = D.parseBlob(new Uint8Array(raw));
  assert.equal(columns.length, header.columns.length);
  for (const c of columns) assert.equal(c.byteOffset % 8, 0);
  // Through an unaligned Uint8Array too (the decoder copies then).
  const shifted = new Uint8Array(raw.length + 3);
  shifted.set(raw, 3);
  const again = D.parseBlob(shifted.subarray(3));
  assert.deepEqual(Array.from(again.columns[0]), Array.from(columns[0]));
});

async function decodeError(fn) {
  try {
    await fn();
  } catch (e) {
    assert.equal(e.name, "DataError", "expected a DataError, got " + e.stack);
    return e.message;
  }
  assert.fail("no error");
}

test("damaged data fails with one clear message", async () => {
  assert.match(await decodeError(() => D.decodeBase64("%%%not base64%%%")), /not valid base64/);
  assert.match(await decodeError(() => D.decodeBase64(Buffer.from("hello, world").toString("base64"))), /not valid gzip/);
  const gz = (buf) => zlib.gzipSync(buf).toString("base64");
  assert.match(await decodeError(() => D.decodeBase64(gz(Buffer.from("VSV2\0\0\0\0")))), /does not start with "VSV1"/);
  assert.match(await decodeError(() => D.decodeBase64(gz(Buffer.from("VS")))), /too short/);
  const bad = Buffer.alloc(12);
  bad.write("VSV1");
  bad.writeUInt32LE(1000, 4);
  assert.match(await decodeError(() => D.decodeBase64(gz(bad))), /header length \(1000 bytes\) runs past its end/);
  const notJson = Buffer.concat([Buffer.from("VSV1"), Buffer.from([5, 0, 0, 0]), Buffer.from("{oops")]);
  assert.match(await decodeError(() => D.decodeBase64(gz(notJson))), /header is not valid JSON/);
  const raw = B.encodeRaw(smallHeader());
  const cut = raw.subarray(0, raw.length - 16);
  assert.match(await decodeError(() => D.decodeBase64(gz(cut))), /runs past the end of the data/);
  // gzip cut short
  const z = zlib.gzipSync(raw);
  assert.match(await decodeError(() => D.decodeBase64(z.subarray(0, z.length - 30).toString("base64"))), /not valid gzip/);
});

test("a header that breaks the contract is refused, naming what is wrong", async () => {
  const future = smallHeader();
  future.format = 2;
  assert.match(await decodeError(() => D.decodeBase64(B.encodeBase64(future))), /reads blob format 1, the data is format 2/);
  assert.match(await decodeError(() => D.decodeBase64(B.encodeBase64(smallHeader(), { misalign: true }))), /not 8-byte aligned/);
  const badRef = smallHeader();
  badRef.reports[0].devices[0].ev_sign = { col: 9999 };
  assert.match(await decodeError(() => D.decodeBase64(B.encodeBase64(badRef))), /refers to column 9999/);
  const short = smallHeader();
  short.reports[0].devices[0].allocations.size = B.col("f64", [1, 2]);
  assert.match(await decodeError(() => D.decodeBase64(B.encodeBase64(short))), /allocations\.size has 2 values, expected 3/);
  const badCat = smallHeader();
  badCat.reports[0].devices[0].allocations.category = B.col("u8", [0, 8, 1]);
  assert.match(await decodeError(() => D.decodeBase64(B.encodeBase64(badCat))), /category is out of range/);
  const unsorted = smallHeader();
  unsorted.reports[0].devices[0].allocations.start = B.col("i32", [1, -1, 2]);
  assert.match(await decodeError(() => D.decodeBase64(B.encodeBase64(unsorted))), /not sorted by start/);
  const badEv = smallHeader();
  badEv.reports[0].devices[0].ev_alloc = B.col("i32", [-1, 1, 2, 7, -1, -1]);
  assert.match(await decodeError(() => D.decodeBase64(B.encodeBase64(badEv))), /ev_alloc names an allocation beyond/);
  const badLevel = smallHeader();
  badLevel.reports[0].devices[0].lod.levels[0].count = 2;
  assert.match(await decodeError(() => D.decodeBase64(B.encodeBase64(badLevel))), /level 0 has 2 buckets, expected 6/);
  const badStack = smallHeader();
  badStack.reports[0].stacks.parent = B.col("u32", [0, 0, 5]);
  assert.match(await decodeError(() => D.decodeBase64(B.encodeBase64(badStack))), /parent is out of range/);
  const none = B.buildHeader([]);
  assert.match(await decodeError(() => D.decodeBase64(B.encodeBase64(none))), /holds no report/);
});

test("multi-level pyramids decode with the contract's bucket sizes", async () => {
  const E = 20000;
  const allocs = randomTrace(3, E);
  const dev = B.buildDevice({ events: E, allocations: allocs, ownerSeries: ["a", "b", "c", "d", "other owners"] });
  const data = await D.decodeBase64(B.encodeBase64(B.buildHeader([B.buildReport({ devices: [dev], owners: ["", "1", "2", "3", "4", "5", "6"] })])));
  const levels = data.reports[0].devices[0].lod.levels;
  // 20,000 events > 16,384: finest bucket 4 (5,000 buckets), then 16 (1,250), then 64 (313).
  assert.deepEqual(levels.map((l) => l.bucket), [4, 16, 64]);
  assert.deepEqual(levels.map((l) => l.count), [5000, 1250, 313]);
  assert.equal(levels[0].category_start.length, 5000 * 8);
  assert.equal(levels[0].owner_start.length, 5000 * 5);
  assert.equal(levels[1].category_start, undefined);
});
