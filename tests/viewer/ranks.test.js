"use strict";
// The ranks view (src/report/viewer/ranks.js) on the figures `vramscope report FOLDER --json`
// gives for three real H200 goldens laid out as ranks (tests/e2e/test_viewer_browser.py checks the
// page against the binary's own output; these check the HTML's rules).
const test = require("node:test");
const assert = require("node:assert/strict");
const R = require("../../src/report/viewer/ranks.js");

const MiB = 1024 * 1024;

function rank(label, allocated, reserved, steps, extra) {
  return Object.assign({
    label, rank: Number(label.slice(4)), local_rank: null, host: "h200-node", device: 0,
    device_name: "NVIDIA H200", file: label + ".pickle.gz", peak_allocated_bytes: allocated,
    peak_reserved_bytes: reserved, peak_step: 1, peak_phase: "backward", steps: steps.length,
    end_reason: "exit", oom: false, reported: false,
    steps_peaks: steps.map((b, i) => ({ step: i + 1, peak_allocated_bytes: b, peak_phase: "backward" })),
    at_peak_by_category: {}, owners_at_peak: [],
  }, extra || {});
}

function threeRanks() {
  const table = [
    rank("rank0", 137_408_512, 140_509_184, [137_408_512, 137_408_512, 137_408_512]),
    rank("rank1", 237_080_576, 241_172_480, [237_080_576, 237_080_576, 237_080_576], { reported: true, peak_phase: "optimizer" }),
    rank("rank2", 137_408_512, 140_509_184, [137_408_512, 137_408_512]),
  ];
  const by_step = [1, 2, 3].map((step) => ({ step, ranks: step === 3 ? 2 : 3, lowest_bytes: 137_408_512, median_bytes: 137_408_512, highest_bytes: 237_080_576, highest_label: "rank1", highest_phase: "optimizer" }));
  const bounding = {
    label: "rank1", peak_allocated_bytes: 237_080_576, others: 2, others_median_peak_allocated_bytes: 137_408_512,
    category_excess_bytes: { optimizer_state: 67_150_848, temporary: 33_046_528, weight: 0 },
    held_alone: [{ category: "optimizer_state", owner: "fc1.weight.exp_avg", bytes: 16 * MiB }],
    owners_compared_per_rank: 32,
  };
  return { table, compared: { by_step, by_phase: [], bounding } };
}

test("no ranks: nothing to show", () => {
  assert.equal(R.ranksHtml(null), "");
  assert.equal(R.ranksHtml({ table: [], compared: null }), "");
});

test("a row per rank on one scale, the bounding rank marked, each step a cell", () => {
  const html = R.ranksHtml(threeRanks());
  assert.equal((html.match(/<tr class="[^"]*" data-label=/g) || []).length, 3);
  assert.match(html, /<tr class="bounding" data-label="rank1">/);
  // The highest reserved peak spans the whole scale; the others in proportion.
  assert.match(html, /class="bar reserved" style="width:100\.00%"/);
  assert.match(html, /class="bar reserved" style="width:58\.26%"/);
  // rank1 holds the highest of every step; rank2 recorded no step 3.
  assert.equal((html.match(/class="cell top"/g) || []).length, 3);
  assert.equal((html.match(/class="cell empty" title="step 3: not recorded on this rank"/g) || []).length, 1);
  assert.match(html, /Why rank1 bounds the job/);
  assert.match(html, /95\.05 MiB above the median of the 2 other rank\(s\) \(131\.04 MiB\)/);
  // Categories where it holds no more than the others are not listed.
  assert.match(html, /optimizer_state \+64\.04 MiB, temporary \+31\.52 MiB\./);
  assert.doesNotMatch(html, /weight \+/);
  assert.match(html, /fc1\.weight\.exp_avg/);
});

test("labels and owners are text, never markup", () => {
  const ranks = threeRanks();
  ranks.table[0].label = "<img src=x onerror=alert(1)>";
  ranks.compared.bounding.held_alone[0].owner = "<script>alert(1)</script>";
  const html = R.ranksHtml(ranks);
  assert.doesNotMatch(html, /<img src=x/);
  assert.doesNotMatch(html, /<script>/);
  assert.match(html, /&lt;script&gt;alert\(1\)&lt;\/script&gt;/);
});

test("a long run shows its first steps and says how many there are", () => {
  const ranks = threeRanks();
  const many = Array.from({ length: 500 }, (_, i) => 100 * MiB + i);
  ranks.table = [rank("rank0", 200 * MiB, 210 * MiB, many, { reported: true })];
  ranks.compared = null;
  const html = R.ranksHtml(ranks);
  assert.match(html, new RegExp("the first " + R.MAX_STEP_CELLS + " of 500"));
  assert.equal((html.match(/class="cell/g) || []).length, R.MAX_STEP_CELLS);
  assert.doesNotMatch(html, /Why /);  // one rank: nothing to contrast
});
