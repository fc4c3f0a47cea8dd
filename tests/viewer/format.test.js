"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const F = require("../../src/report/viewer/format.js");

test("bytes are formatted like the terminal summary", () => {
  assert.equal(F.formatBytes(0), "0 B");
  assert.equal(F.formatBytes(512), "512 B");
  assert.equal(F.formatBytes(1023), "1023 B");
  assert.equal(F.formatBytes(1024), "1.00 KiB");
  assert.equal(F.formatBytes(20480), "20.00 KiB");
  assert.equal(F.formatBytes(185700864), "177.10 MiB");
  assert.equal(F.formatBytes(1.5 * 2 ** 30), "1.50 GiB");
  assert.equal(F.formatBytes(2 ** 40), "1.00 TiB");
  assert.equal(F.formatBytes(-512), "-512 B");
  // Just under a unit rounds up into the next one, not to "1024.00 MiB".
  assert.equal(F.formatBytes(2 ** 30 - 1), "1.00 GiB");
  assert.equal(F.formatBytes(NaN), "—");
  assert.equal(F.formatBytesDelta(3 * 2 ** 20), "+3.00 MiB");
  assert.equal(F.formatBytesDelta(-2048), "-2.00 KiB");
  assert.equal(F.formatBytesDelta(0), "0 B");
});

test("counts, times, ratios, addresses", () => {
  assert.equal(F.formatCount(185700864), "185,700,864");
  assert.equal(F.formatCount(999), "999");
  assert.equal(F.formatCount(-1234567), "-1,234,567");
  assert.equal(F.formatFixed(12345.5, 1), "12,345.5");
  assert.equal(F.formatTimeUs(850), "850 µs");
  assert.equal(F.formatTimeUs(12345), "12.35 ms");
  assert.equal(F.formatTimeUs(3141593), "3.142 s");
  assert.equal(F.formatRatio(1.25), "×1.25");
  assert.equal(F.formatRatio(null), "—");
  assert.equal(F.formatAddress(0x7f12_3400_0000), "0x7f1234000000");
  assert.equal(F.formatPercent(0.2534), "25.3%");
  assert.equal(F.escapeHtml(`<a href="x">&'</a>`), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
});

test("nice ticks", () => {
  const t = F.niceTicks(0, 100, 5);
  assert.equal(t.step, 20);
  assert.deepEqual(t.ticks, [0, 20, 40, 60, 80, 100]);
  assert.equal(F.niceTicks(0, 1, 4).decimals, 1);
  // Byte ticks stay in one binary unit and cover the range.
  const b = F.byteTicks(3 * 2 ** 30, 6);
  assert.deepEqual(b.map((x) => x.label), ["0", "0.5 GiB", "1.0 GiB", "1.5 GiB", "2.0 GiB", "2.5 GiB", "3.0 GiB"]);
  assert.equal(b[2].value, 2 ** 30);
  assert.deepEqual(F.byteTicks(100, 4).map((x) => x.label), ["0", "20 B", "40 B", "60 B", "80 B", "100 B"]);
  const time = F.timeTicks(0, 123456, 6);
  assert.equal(time.unit, "ms");
  assert.deepEqual(time.ticks.map((x) => x.label), ["0", "20", "40", "60", "80", "100", "120"]);
  assert.equal(time.ticks[1].value, 20000);
  const ev = F.eventTicks(0.5, 7.5, 10);
  assert.ok(ev.ticks.every((x) => Number.isInteger(x.value)));
  assert.deepEqual(ev.ticks.map((x) => x.value), [1, 2, 3, 4, 5, 6, 7]);
});

test("every category has its own fixed colour", () => {
  const names = ["weight", "gradient", "optimizer_state", "activation", "input", "workspace", "temporary", "unknown"];
  const colors = names.map((n, i) => F.categoryColor(n, i));
  assert.equal(new Set(colors).size, 8);
  assert.equal(F.categoryColor("weight", 5), F.categoryColor("weight", 0));
  assert.match(F.categoryColor("something new", 2), /^#[0-9a-f]{6}$/);
  assert.equal(F.ownerColor(15, 16, "other owners"), "#c9c9c9");
});
