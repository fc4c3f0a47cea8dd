// The template's contract with the C++ side (docs/design/viewer.md, cmake/BundleViewer.cmake,
// report::RenderHtmlViewer), and the scripts as classic <script>s sharing one global.
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const fs = require("node:fs");
const path = require("node:path");
const vm = require("node:vm");
const S = require("./make_sample_page.js");
const B = require("./blob_builder.js");

const DIR = S.VIEWER_DIR;
const scripts = () => fs.readFileSync(path.join(DIR, "SCRIPTS"), "utf8").split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));

test("page.html holds each marker once, alone on its line", () => {
  const page = fs.readFileSync(path.join(DIR, "page.html"), "utf8");
  const lines = page.split("\n");
  for (const marker of ["<!--VRAMSCOPE_STYLE-->", "<!--VRAMSCOPE_SCRIPTS-->", "<!--VRAMSCOPE_DATA-->"]) {
    assert.equal(page.split(marker).length - 1, 1, marker + " once");
    assert.equal(lines.filter((l) => l === marker).length, 1, marker + " on its own line");
  }
  assert.ok(page.includes("{{TITLE}}"));
  // The data comes before the scripts, so they can read it as they run.
  assert.ok(page.indexOf("<!--VRAMSCOPE_DATA-->") < page.indexOf("<!--VRAMSCOPE_SCRIPTS-->"));
  for (const id of ["timeline-canvas", "tooltip", "allocator-view", "peak-view", "icicle-canvas", "compare-view", "error"]) {
    assert.ok(page.includes('id="' + id + '"'), "#" + id);
  }
  // Nothing is fetched: no external script, stylesheet, link or URL anywhere in the template.
  assert.doesNotMatch(page, /<script[^>]*\ssrc=/i);
  assert.doesNotMatch(page, /<link[^>]*\shref=/i);
  assert.doesNotMatch(page, /(src|href)=["']?(https?:)?\/\//i);
});

test("the scripts and stylesheet cannot break out of their inline elements", () => {
  const names = scripts();
  assert.deepEqual(names, ["format.js", "decode.js", "model.js", "analysis.js", "timeline.js", "views.js", "ranks.js", "app.js"]);
  for (const name of names) {
    const code = fs.readFileSync(path.join(DIR, name), "utf8");
    assert.doesNotMatch(code, /<\/script/i, name);
    assert.doesNotMatch(code, /<!--/, name); // would switch the HTML parser to script-data-escaped
    // Markers in the code would be replaced when the page is assembled.
    assert.doesNotMatch(code, /\{\{TITLE\}\}|VRAMSCOPE_(STYLE|SCRIPTS|DATA)-->/, name);
    assert.doesNotMatch(code, /\bhttps?:\/\//, name + " refers to the network");
  }
  const css = fs.readFileSync(path.join(DIR, "viewer.css"), "utf8");
  assert.doesNotMatch(css, /<\/style/i);
  assert.doesNotMatch(css, /\{\{TITLE\}\}|@import|url\(\s*['"]?https?:/);
  // Every file of the folder but the template and stylesheet is listed (the bundler only inlines those).
  const listed = new Set(names.concat(["page.html", "viewer.css", "SCRIPTS"]));
  for (const f of fs.readdirSync(DIR)) assert.ok(listed.has(f), f + " is in the viewer folder but not in SCRIPTS");
});

test("the scripts run as classic scripts on one global and define the namespace", () => {
  // A browser-like global without a document: app.js must do nothing there.
  const sandbox = { console, atob, TextDecoder, Blob, Response, DecompressionStream };
  sandbox.globalThis = sandbox;
  vm.createContext(sandbox);
  for (const name of scripts()) vm.runInContext(fs.readFileSync(path.join(DIR, name), "utf8"), sandbox, { filename: name });
  const ns = sandbox.vramscope;
  for (const part of ["format", "decode", "model", "analysis", "timeline", "views"]) assert.ok(ns[part], "vramscope." + part);
  assert.equal(ns.format.formatBytes(1536), "1.50 KiB");
  assert.equal(typeof ns.model.DeviceModel, "function");
  assert.equal(sandbox.vramscopeApp, undefined);
});

test("an assembled page carries the data the decoder reads back", async () => {
  const header = S.sampleHeader({ predicted: true });
  const base64 = B.encodeBase64(header);
  const html = S.assemblePage(base64, 'run <1> & "two"');
  assert.ok(html.includes("<title>run &lt;1&gt; &amp; &quot;two&quot; · vramscope</title>"));
  assert.ok(!html.includes("<!--VRAMSCOPE_"));
  assert.ok(!html.includes("{{TITLE}}"));
  assert.equal((html.match(/<script>\n\/\/ [a-z]+\.js\n/g) || []).length, scripts().length);
  const m = /<script type="application\/octet-stream" id="vramscope-data">([A-Za-z0-9+/=]*)<\/script>/.exec(html);
  assert.ok(m, "the data element");
  const D = require("../../src/report/viewer/decode.js");
  const data = await D.decodeBase64(m[1]);
  const dev = data.reports[0].devices[0];
  assert.equal(dev.events, header.reports[0].devices[0].events);
  assert.equal(dev.allocations.count, header.reports[0].devices[0].allocations.count);
  assert.deepEqual(Array.from(dev.allocations.size), Array.from(header.reports[0].devices[0].allocations.size.data));
  assert.equal(dev.summary.peak_allocated, header.reports[0].devices[0].summary.peak_allocated);
  assert.ok(dev.predicted.allocated_event instanceof Int32Array);
});

test("the sample trace is shaped like a training step", async () => {
  const header = S.sampleHeader({});
  const r = header.reports[0];
  const d = r.devices[0];
  const n = d.allocations.count;
  assert.ok(n >= 200 && n <= 600, n + " allocations");
  assert.ok(d.segments.count >= 2);
  const cats = d.allocations.category.data;
  const start = d.allocations.start.data, end = d.allocations.end.data;
  const names = r.categories;
  const of = (c) => Array.from(cats).map((x, i) => i).filter((i) => names[cats[i]] === c);
  // Weights made first and kept to the end, two of them before the trace.
  const w = of("weight");
  assert.ok(w.every((i) => end[i] === d.events));
  assert.equal(w.filter((i) => start[i] === -1).length, 2);
  assert.deepEqual(w, w.map((_, k) => k)); // the first allocations
  // Activations are made in forward and freed in backward.
  const phaseOf = d.allocations.phase.data;
  const fwd = r.phases.indexOf("forward"), bwd = r.phases.indexOf("backward");
  const act = of("activation");
  assert.ok(act.length > 0 && act.every((i) => phaseOf[i] === fwd));
  const bwdRanges = d.phases.filter((p) => p.phase === "backward");
  assert.ok(act.every((i) => bwdRanges.some((p) => p.first_event <= end[i] && end[i] <= p.last_event)));
  assert.ok(of("gradient").every((i) => phaseOf[i] === bwd));
  assert.ok(of("optimizer_state").length > 0 && of("optimizer_state").every((i) => end[i] === d.events));
  assert.equal(of("workspace").length, 1);
});

test("the tests assemble the page exactly as cmake/BundleViewer.cmake does", (t) => {
  const { spawnSync } = require("node:child_process");
  const os = require("node:os");
  const script = path.join(DIR, "..", "..", "..", "cmake", "BundleViewer.cmake");
  if (!fs.existsSync(script) || spawnSync("cmake", ["--version"]).status !== 0) {
    t.skip("cmake or cmake/BundleViewer.cmake is not here");
    return;
  }
  const out = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "vramscope-viewer-")), "page.html");
  const run = spawnSync("cmake", ["-DDIR=" + DIR, "-DOUTPUT=" + out, "-P", script], { encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  assert.equal(fs.readFileSync(out, "utf8"), S.bundleTemplate());
  fs.rmSync(path.dirname(out), { recursive: true });
});
