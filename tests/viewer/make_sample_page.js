#!/usr/bin/env node
// Writes a viewer page with a synthetic training trace, assembled exactly as the C++ side does it
// (cmake/BundleViewer.cmake, then report::RenderHtmlViewer), to try the page in a browser before
// (or without) the CLI:
//
//   node tests/viewer/make_sample_page.js OUT.html [--compare] [--predicted] [--no-time]
//        [--segments recorded|model|none] [--allocs N] [--steps N] [--title TEXT] [--devices N]
//   node tests/viewer/make_sample_page.js OUT.html --from PAGE.html   (a page vramscope wrote,
//        its data re-wrapped in the current template)
//
// The trace: a small network trained with Adam. Weights are made first and kept (two of them
// before the trace starts), activations are made in forward and freed in backward, gradients
// are made in backward and freed by the next step's zero_grad, Adam's state is made in the first
// optimizer step and kept, a cuBLAS workspace is made on the first matmul and kept, and the input
// batch's free is requested before it completes (record_stream), so the allocator view shows a
// pending free. Blocks are placed in segments by a small caching allocator (512-byte rounding,
// 2 MiB small-pool and 20 MiB large-pool segments, first fit with splitting and coalescing).
// --allocs N repeats steps until about N allocations (1,000,000 makes ~2M events).
"use strict";

const fs = require("node:fs");
const path = require("node:path");
const B = require("./blob_builder.js");

const VIEWER_DIR = path.join(__dirname, "..", "..", "src", "report", "viewer");
const MiB = 1024 * 1024, KiB = 1024;

// ---- a small caching allocator -------------------------------------------------------------------

class Allocator {
  constructor(trace) {
    this.trace = trace;
    this.segments = []; // {address, size, start, end, stream, pool, free: [{offset, size}]}
    this.nextAddress = 0x7f0000000000;
  }
  round(bytes) {
    return Math.max(512, Math.ceil(bytes / 512) * 512);
  }
  place(size, before) {
    const pool = size <= MiB ? 1 : 0;
    for (let s = 0; s < this.segments.length; s++) {
      const seg = this.segments[s];
      if (seg.pool !== pool) continue;
      for (let f = 0; f < seg.free.length; f++) {
        const fr = seg.free[f];
        if (fr.size >= size) {
          const offset = fr.offset;
          fr.offset += size;
          fr.size -= size;
          if (fr.size === 0) seg.free.splice(f, 1);
          return { segment: s, address: seg.address + offset };
        }
      }
    }
    // A new segment: its own event (segment_alloc) just before the allocation's.
    const segSize = pool === 1 ? 2 * MiB : size < 10 * MiB ? 20 * MiB : Math.ceil(size / (2 * MiB)) * 2 * MiB;
    const seg = { address: this.nextAddress, size: segSize, start: before ? -1 : this.trace.other(), end: Infinity, stream: 0, pool, free: [{ offset: size, size: segSize - size }] };
    if (seg.free[0].size === 0) seg.free = [];
    this.nextAddress += Math.ceil(segSize / (2 * MiB)) * 2 * MiB + 2 * MiB;
    this.segments.push(seg);
    return { segment: this.segments.length - 1, address: seg.address };
  }
  release(segment, address, size) {
    const seg = this.segments[segment];
    const offset = address - seg.address;
    const free = seg.free;
    let i = 0;
    while (i < free.length && free[i].offset < offset) i++;
    free.splice(i, 0, { offset, size });
    // Coalesce with the neighbours.
    if (i + 1 < free.length && free[i].offset + free[i].size === free[i + 1].offset) {
      free[i].size += free[i + 1].size;
      free.splice(i + 1, 1);
    }
    if (i > 0 && free[i - 1].offset + free[i - 1].size === free[i].offset) {
      free[i - 1].size += free[i].size;
      free.splice(i, 1);
    }
  }
}

// ---- the trace -------------------------------------------------------------------------------------

class Trace {
  constructor(opts) {
    this.E = 0;
    this.deltas = [];
    this.allocs = [];
    this.allocator = new Allocator(this);
    this.phase = 0;
    this.step = -1;
    this.rng = mulberry32(opts.seed || 1);
    this.frames = [["", 0, "", false]];
    this.frameIds = new Map();
    this.parent = [0];
    this.frame = [0];
    this.nodeIds = new Map();
    this.strings = [""];
    this.owners = [""];
  }
  tick(us) {
    this.deltas.push(this.E === 0 ? 0 : Math.round(us));
    return this.E++;
  }
  other() {
    return this.tick(5 + this.rng() * 20);
  }
  intern(list, value) {
    let i = list.indexOf(value);
    if (i < 0) {
      list.push(value);
      i = list.length - 1;
    }
    return i;
  }
  // frames outermost first: [[file, line, function, project], ...] -> stack node
  stack(frames) {
    let node = 0;
    for (const f of frames) {
      const key = f.join("\u0000");
      let fid = this.frameIds.get(key);
      if (fid === undefined) {
        fid = this.frames.length;
        this.frames.push(f);
        this.frameIds.set(key, fid);
      }
      const nk = node + ":" + fid;
      let n = this.nodeIds.get(nk);
      if (n === undefined) {
        n = this.parent.length;
        this.parent.push(node);
        this.frame.push(fid);
        this.nodeIds.set(nk, n);
      }
      node = n;
    }
    return node;
  }
  // before: made before the trace (start -1).
  alloc(bytes, category, owner, op, frames, before) {
    // Tensors of activations and temporaries are rarely whole blocks: some rounding waste.
    if (category === "activation" || category === "temporary") bytes -= Math.floor(this.rng() * 480);
    const size = this.allocator.round(bytes);
    const { segment, address } = this.allocator.place(size, before);
    const start = before ? -1 : this.tick(20 + this.rng() * 200);
    this.allocs.push({
      start, end: Infinity, size, requested: bytes, address, segment, category,
      owner: this.intern(this.owners, owner), op: this.intern(this.strings, op),
      stack: this.stack(frames), phase: this.phase, step: this.step,
    });
    return this.allocs.length - 1;
  }
  // The free request ends the allocation (allocated drops); with pendingEvents, the block returns
  // to the allocator that many events later (free_completed), as after record_stream.
  free(id, pendingEvents) {
    const a = this.allocs[id];
    a.end = this.tick(10 + this.rng() * 50);
    if (pendingEvents) {
      for (let i = 0; i < pendingEvents; i++) this.other();
      a.freeCompleted = this.tick(10);
    }
    this.allocator.release(a.segment, a.address, a.size);
  }
}

function mulberry32(seed) {
  return function () {
    seed |= 0;
    seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// ---- a training run -----------------------------------------------------------------------------------

const PHASES = ["none", "forward", "backward", "optimizer"];

function train(opts) {
  const trace = new Trace(opts);
  const layers = opts.layers || [
    { name: "conv1", w: 1.5 * MiB, act: 12 * MiB, op: "aten::convolution", file: "torch/nn/modules/conv.py", line: 456 },
    { name: "conv2", w: 4.5 * MiB, act: 9 * MiB, op: "aten::convolution", file: "torch/nn/modules/conv.py", line: 456 },
    { name: "conv3", w: 9 * MiB, act: 6 * MiB, op: "aten::convolution", file: "torch/nn/modules/conv.py", line: 456 },
    { name: "fc1", w: 16 * MiB, act: 2 * MiB, op: "aten::addmm", file: "torch/nn/modules/linear.py", line: 116 },
    { name: "fc2", w: 4 * MiB, act: 512 * KiB, op: "aten::addmm", file: "torch/nn/modules/linear.py", line: 116 },
    { name: "head", w: 40 * KiB, act: 40 * KiB, op: "aten::addmm", file: "torch/nn/modules/linear.py", line: 116 },
  ];
  const scale = opts.batchScale || 1;
  const main = ["examples/train.py", 88, "main", true];
  const trainStep = ["examples/train.py", 61, "train_step", true];
  const modelFwd = (l, i) => [main, trainStep, ["examples/model.py", 40 + i, "forward", true], ["torch/nn/modules/module.py", 1527, "_call_impl", false], [l.file, l.line, "forward", false]];
  const backwardFrames = (l) => [main, trainStep, ["examples/train.py", 64, "train_step", true], ["torch/_tensor.py", 522, "backward", false], ["torch/autograd/__init__.py", 266, "backward", false], ["torch/csrc/autograd/engine.cpp", 1196, "torch::autograd::Engine::execute", false], ["torch/csrc/autograd/generated/Functions.cpp", 120, l.op + "_backward", false]];
  const optFrames = [main, trainStep, ["examples/train.py", 66, "train_step", true], ["torch/optim/optimizer.py", 385, "wrapper", false], ["torch/optim/adam.py", 166, "step", false], ["torch/optim/adam.py", 520, "_multi_tensor_adam", false]];
  const initFrames = (l, i) => [main, ["examples/model.py", 20 + i, "__init__", true], [l.file, l.line - 20, "__init__", false]];

  // Weights first, kept to the end; the first two were made before the trace started.
  const weights = layers.map((l, i) => trace.alloc(l.w, "weight", l.name + " @ examples/model.py:" + (20 + i) + " __init__", "aten::empty", initFrames(l, i), i < 2));
  let grads = [];
  let adam = null;
  let workspace = -1;
  const phases = [];
  const steps = opts.steps || 8;
  const target = opts.allocs || 0;
  for (let s = 1; s <= steps || (target && trace.allocs.length < target); s++) {
    trace.step = s;
    // zero_grad(set_to_none=True): last step's gradients go.
    trace.phase = 0;
    for (const g of grads) trace.free(g);
    grads = [];
    const x = trace.alloc(6 * MiB * scale, "input", "batch @ examples/train.py:58 main", "aten::_to_copy", [main, ["examples/train.py", 58, "main", true]]);
    const y = trace.alloc(2 * KiB, "input", "labels @ examples/train.py:59 main", "aten::_to_copy", [main, ["examples/train.py", 59, "main", true]]);
    // forward
    let first = trace.E;
    trace.phase = 1;
    const acts = layers.map((l, i) => {
      if (workspace < 0 && l.op === "aten::addmm") {
        workspace = trace.alloc(8 * MiB + 8 * KiB, "workspace", "cuBLAS workspace", "aten::addmm", modelFwd(l, i).concat([["aten/src/ATen/cuda/CublasHandlePool.cpp", 148, "at::cuda::getCurrentCUDABlasHandle", false]]));
      }
      const a = trace.alloc(l.act * scale, "activation", l.name + " @ examples/model.py:" + (40 + i) + " forward", l.op, modelFwd(l, i));
      const t = trace.alloc(l.act * scale * 0.5, "temporary", "relu @ examples/model.py:" + (40 + i) + " forward", "aten::relu", modelFwd(l, i));
      trace.free(t);
      return a;
    });
    const loss = trace.alloc(512, "temporary", "loss @ examples/train.py:62 train_step", "aten::mean", [main, ["examples/train.py", 62, "train_step", true]]);
    phases.push({ step: s, phase: "forward", first_event: first, last_event: trace.E - 1 });
    // backward: gradients made, activations freed
    first = trace.E;
    trace.phase = 2;
    let gin = -1;
    for (let i = layers.length - 1; i >= 0; i--) {
      const l = layers[i];
      const g = trace.alloc(l.act * scale, "temporary", l.name + " grad_input", l.op + "_backward", backwardFrames(l));
      if (gin >= 0) trace.free(gin);
      gin = g;
      grads[i] = trace.alloc(l.w, "gradient", l.name + " @ examples/model.py:" + (20 + i) + " __init__", "AccumulateGrad", backwardFrames(l));
      trace.free(acts[i]);
    }
    trace.free(gin);
    trace.free(loss);
    phases.push({ step: s, phase: "backward", first_event: first, last_event: trace.E - 1 });
    // optimizer (Adam): state on the first step, temporaries every step
    first = trace.E;
    trace.phase = 3;
    if (!adam) {
      adam = [];
      layers.forEach((l, i) => {
        adam.push(trace.alloc(l.w, "optimizer_state", "Adam exp_avg @ examples/train.py:66 train_step", "aten::zeros_like", optFrames));
        adam.push(trace.alloc(l.w, "optimizer_state", "Adam exp_avg_sq @ examples/train.py:66 train_step", "aten::zeros_like", optFrames));
      });
    }
    const temps = layers.map((l) => trace.alloc(l.w, "temporary", "Adam _foreach_sqrt @ examples/train.py:66 train_step", "aten::_foreach_sqrt", optFrames));
    for (const t of temps) trace.free(t);
    phases.push({ step: s, phase: "optimizer", first_event: first, last_event: trace.E - 1 });
    trace.phase = 0;
    trace.free(y);
    trace.free(x, 2); // record_stream: the free completes two events later
    for (let k = 0; k < 2; k++) trace.other(); // e.g. snapshot markers
  }
  return { trace, phases, weights };
}

// ---- the report ----------------------------------------------------------------------------------------

function sampleReport(opts) {
  opts = opts || {};
  const { trace, phases } = train(opts);
  const E = trace.E;
  const allocs = trace.allocs.map((a) => Object.assign({}, a, { end: a.end === Infinity ? E : a.end }, a.freeCompleted === undefined ? {} : { freeCompleted: a.freeCompleted }));
  const segments = trace.allocator.segments.map((s) => ({ address: s.address, size: s.size, start: s.start, end: s.end === Infinity ? E : s.end, stream: s.stream, pool: s.pool }));
  const segSource = opts.segments || "recorded";

  // Owner series: the 15 owners with the most bytes live at the peak, then "other owners".
  const probe = B.buildDevice({ events: E, allocations: allocs, owners: trace.owners, segments: { source: "none", list: segments } });
  const peakOwners = probe.summary.owners_at_peak.map((o) => o.owner);
  const ranked = [];
  for (const name of peakOwners) if (!ranked.includes(name)) ranked.push(name);
  const top = ranked.slice(0, 15);
  const ownerSeries = top.concat(["other owners"]);
  for (const a of allocs) {
    const k = top.indexOf(trace.owners[a.owner]);
    a.ownerGroup = k >= 0 ? k : top.length;
  }
  let predicted = null;
  if (opts.predicted) {
    // The allocator model's curves: allocated exact, reserved from a slightly different segment policy.
    const ev = [], pa = [], pr = [];
    const resv = probe.reserved;
    let total = allocs.filter((a) => a.start < 0).reduce((x, a) => x + a.size, 0);
    const evAlloc = probe.ev_alloc.data, evSign = probe.ev_sign.data;
    let ri = -1;
    for (let t = 0; t < E; t++) {
      if (evAlloc[t] >= 0) total += evSign[t] * allocs[evAlloc[t]].size;
      while (ri + 1 < resv.event.data.length && resv.event.data[ri + 1] <= t) ri++;
      const r = ri >= 0 ? resv.bytes.data[ri] : 0;
      ev.push(t);
      pa.push(total);
      pr.push(Math.max(total, r + (t > E / 3 ? 2 * MiB : 0)));
    }
    predicted = { label: "allocator model", event: ev, allocated: pa, reserved: pr };
  }
  const iterations = [];
  const dev = B.buildDevice({
    device: opts.device || 0,
    events: E,
    allocations: allocs,
    timeDeltas: opts.noTime ? null : trace.deltas,
    segments: { source: segSource, list: segSource === "none" ? [] : segments },
    reserved: segSource === "none" ? probe.reserved && { event: Array.from(probe.reserved.event.data), bytes: Array.from(probe.reserved.bytes.data) } : undefined,
    predicted,
    phases,
    ownerSeries,
    owners: trace.owners,
    iterations,
    maxBuckets: opts.maxBuckets,
    coarsestMax: opts.coarsestMax,
  });
  if (segSource === "none") for (const k of ["segment"]) dev.allocations[k] = B.col("i32", allocs.map(() => -1));
  // Every step's peak, from the phases.
  const steps = new Map();
  for (const p of phases) {
    const s = steps.get(p.step) || { step: p.step, first: p.first_event, last: p.last_event };
    s.first = Math.min(s.first, p.first_event);
    s.last = Math.max(s.last, p.last_event);
    steps.set(p.step, s);
  }
  {
    const evAlloc = dev.ev_alloc.data, evSign = dev.ev_sign.data;
    let total = dev.summary.start_allocated;
    const at = new Float64Array(E);
    for (let t = 0; t < E; t++) {
      if (evAlloc[t] >= 0) total += evSign[t] * allocs[evAlloc[t]].size;
      at[t] = total;
    }
    for (const s of steps.values()) {
      let best = s.first;
      for (let t = s.first; t <= s.last; t++) if (at[t] > at[best]) best = t;
      const ph = phases.find((p) => p.step === s.step && p.first_event <= best && best <= p.last_event);
      iterations.push({ step: s.step, peak_allocated: at[best], peak_event: best, peak_phase: ph ? ph.phase : "none" });
    }
  }
  return B.buildReport({
    title: opts.title || "sample_training_step.pickle",
    kind: opts.kind || "measured",
    source: "snapshot",
    phases: PHASES,
    strings: trace.strings,
    owners: trace.owners,
    frames: trace.frames,
    parent: trace.parent,
    frame: trace.frame,
    notes: opts.notes || ["synthetic sample trace written by tests/viewer/make_sample_page.js", "phases found from the stacks (C++ autograd frames, nn.Module calls, torch.optim)"],
    devices: [dev],
  });
}

function sampleHeader(opts) {
  opts = opts || {};
  const reports = [sampleReport(opts)];
  if (opts.devices > 1) {
    // More devices: the same run at other batch sizes, as devices 1, 2, ... (data parallel
    // ranks are alike; these differ so the device selector visibly changes something).
    for (let d = 1; d < opts.devices; d++) {
      const other = sampleReport(Object.assign({}, opts, { device: d, batchScale: 1 + d * 0.5, seed: 11 + d }));
      // The same code path interns the same frames, owners and operations in the same order.
      for (const k of ["frames", "owners", "strings"]) {
        if (JSON.stringify(other[k]) !== JSON.stringify(reports[0][k])) throw new Error("device " + d + ": " + k + " differ");
      }
      reports[0].devices.push(other.devices[0]);
    }
  }
  if (opts.compare) {
    reports.push(sampleReport(Object.assign({}, opts, { title: opts.compareTitle || "sample_half_batch.pickle", batchScale: 0.5, seed: 7, predicted: false })));
  }
  return B.buildHeader(reports);
}

// ---- the page, as the C++ side assembles it -----------------------------------------------------------------

function escapeHtml(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}

// cmake/BundleViewer.cmake: the stylesheet and the scripts listed in SCRIPTS go in at build time.
function bundleTemplate(dir) {
  dir = dir || VIEWER_DIR;
  let page = fs.readFileSync(path.join(dir, "page.html"), "utf8");
  const style = fs.readFileSync(path.join(dir, "viewer.css"), "utf8");
  let scripts = "";
  for (let name of fs.readFileSync(path.join(dir, "SCRIPTS"), "utf8").split("\n")) {
    name = name.trim();
    if (!name || name.startsWith("#")) continue;
    const code = fs.readFileSync(path.join(dir, name), "utf8");
    if (code.includes("</script")) throw new Error(name + " contains '</script'");
    scripts += "<script>\n// " + name + "\n" + code + "\n</script>\n";
  }
  for (const m of ["STYLE", "SCRIPTS", "DATA"]) {
    if (!page.includes("<!--VRAMSCOPE_" + m + "-->")) throw new Error("page.html lacks the " + m + " marker");
  }
  page = page.split("<!--VRAMSCOPE_STYLE-->").join("<style>\n" + style + "\n</style>");
  page = page.split("<!--VRAMSCOPE_SCRIPTS-->").join(scripts);
  return page;
}

// report::RenderHtmlViewer: the data first (once), then every {{TITLE}}.
function assemblePage(base64, title, dir) {
  let html = bundleTemplate(dir);
  const at = html.indexOf("<!--VRAMSCOPE_DATA-->");
  html = html.slice(0, at) + '<script type="application/octet-stream" id="vramscope-data">' + base64 + "</script>" + html.slice(at + "<!--VRAMSCOPE_DATA-->".length);
  return html.split("{{TITLE}}").join(escapeHtml(title));
}

function main(argv) {
  const args = argv.slice(2);
  const out = args.find((a) => !a.startsWith("--") && !/^\d+$/.test(a));
  if (!out) {
    console.error("usage: make_sample_page.js OUT.html [--compare] [--predicted] [--no-time] [--segments recorded|model|none] [--allocs N] [--steps N] [--title T] [--from PAGE.html]");
    process.exit(2);
  }
  const value = (name) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : undefined;
  };
  const opts = {
    compare: args.includes("--compare"),
    predicted: args.includes("--predicted"),
    noTime: args.includes("--no-time"),
    segments: value("--segments"),
    allocs: value("--allocs") ? Number(value("--allocs")) : 0,
    steps: value("--steps") ? Number(value("--steps")) : undefined,
    title: value("--title"),
    devices: value("--devices") ? Number(value("--devices")) : 1,
  };
  if (opts.allocs) opts.steps = 1;
  const from = value("--from");
  if (from) {
    // Re-wrap the data of a page vramscope wrote in the current template (try a changed front
    // end on real data without rebuilding the binary).
    const html = fs.readFileSync(from, "utf8");
    const m = /<script type="application\/octet-stream" id="vramscope-data">([^<]*)<\/script>/.exec(html);
    if (!m) throw new Error(from + ": no vramscope-data element");
    const t = /<title>([^<]*)<\/title>/.exec(html);
    const title = opts.title || (t ? t[1].replace(/ · vramscope$/, "").replace(/&amp;/g, "&").replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"').replace(/&#39;/g, "'") : from);
    fs.writeFileSync(out, assemblePage(m[1], title));
    console.log(out + ": the data of " + from + " in the current template");
    return;
  }
  const t0 = Date.now();
  const header = sampleHeader(opts);
  const base64 = B.encodeBase64(header);
  const title = opts.title || header.reports.map((r) => r.title).join(" vs ");
  fs.writeFileSync(out, assemblePage(base64, title));
  const d = header.reports[0].devices[0];
  console.log(out + ": " + d.allocations.count + " allocations, " + d.events + " events, " + d.segments.count + " segments, blob " + (base64.length / 1024).toFixed(0) + " KiB base64, " + (Date.now() - t0) + " ms");
}

module.exports = { sampleReport, sampleHeader, bundleTemplate, assemblePage, train, escapeHtml, VIEWER_DIR };

if (require.main === module) main(process.argv);
