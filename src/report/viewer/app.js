// vramscope viewer: the page's entry point. Decodes the embedded blob, builds the views, wires
// the controls and the keyboard, and publishes window.vramscopeApp, the hook the browser tests and
// the benchmark drive:
//   ready, firstRenderMs (performance.now() when the first render finished), lastFrameMs,
//   frameTimes (recent timeline frame durations, ms), error (the message shown, or null),
//   timings (the first render's stages: base64, gunzip, parse, model, timeline, allocator,
//   peak, compare, in ms),
//   zoomTo(e0, e1), selectEvent(t), hoverAt(clientX, clientY) -> tooltip data or null,
//   setGroup("category"|"owner"), setAxis("events"|"time"), setReport(i), setDevice(i),
//   setPeakUsesSelection(on), and data (the decoded header), model (the shown device's
//   DeviceModel), device (its header object), events, timeline.
(function (root) {
  "use strict";
  const ns = (root.vramscope = root.vramscope || {});
  if (typeof document === "undefined") return; // Node: nothing to start

  const F = ns.format;
  const $ = (sel) => document.querySelector(sel);

  const app = {
    ready: false,
    firstRenderMs: null,
    error: null,
    data: null,
    model: null,
    timeline: null,
    get lastFrameMs() {
      return this.timeline ? this.timeline.lastFrameMs : null;
    },
    get frameTimes() {
      return this.timeline ? this.timeline.frameTimes : [];
    },
    // The device shown (its decoded header object: events, summary, columns) and its events.
    get device() {
      return this.model ? this.model.dev : null;
    },
    get events() {
      return this.model ? this.model.E : 0;
    },
  };
  root.vramscopeApp = app;

  function showError(message) {
    app.error = message;
    const el = $("#error");
    el.innerHTML = "<strong>This vramscope page cannot show its report.</strong> " + F.escapeHtml(message);
    el.hidden = false;
    const loading = $("#loading");
    if (loading) loading.hidden = true;
    if (!app.ready) $("#app").hidden = true;
  }

  const state = {
    report: 0,
    device: 0,
    models: new Map(), // "r/d" -> DeviceModel
    selected: new Map(), // "r/d" -> selected event
    peakUsesSelection: false,
    compare: null,
  };

  function modelFor(r, d) {
    const key = r + "/" + d;
    let m = state.models.get(key);
    if (!m) {
      const report = app.data.reports[r];
      m = new ns.model.DeviceModel(report, report.devices[d], r);
      state.models.set(key, m);
    }
    return m;
  }

  // "cuda:0", or "cpu:0" for memory a framework recorded on the host (the report's device_type).
  function deviceName(dev) {
    const report = app.data.reports[state.report];
    return (report && report.device_type === "cpu" ? "cpu:" : "cuda:") + dev.device;
  }

  function peakEvent(m) {
    const e = m.summary.peak_event;
    return Number.isInteger(e) ? Math.max(-1, Math.min(e, m.E - 1)) : m.E - 1;
  }

  // ---- header -----------------------------------------------------------------------------------

  function renderHeader() {
    const reports = app.data.reports;
    const report = reports[state.report];
    const m = app.model;
    // The heading is the page's title (the CLI's --title, else the inputs' names), filled in by
    // the C++ side; only a template without one gets the reports' titles.
    const heading = $("#title");
    if (!heading.textContent.trim() || heading.textContent.includes("{{")) {
      heading.textContent = reports.length === 2 ? reports[0].title + " vs " + reports[1].title : report.title;
    }
    const picker = $("#report-picker");
    if (reports.length > 1) {
      picker.hidden = false;
      picker.innerHTML = reports.map((r, i) => '<button type="button" data-report="' + i + '" class="' + (i === state.report ? "on" : "") + '">' + (i === 0 ? "A" : "B") + ": " + F.escapeHtml(r.title) + " <span class=\"muted\">(" + F.escapeHtml(r.kind) + ")</span></button>").join("");
    } else picker.hidden = true;
    const sel = $("#device-select");
    if (report.devices.length > 1) {
      $("#device-picker").hidden = false;
      sel.innerHTML = report.devices.map((d, i) => '<option value="' + i + '"' + (i === state.device ? " selected" : "") + ">" + deviceName(d) + "</option>").join("");
    } else $("#device-picker").hidden = true;
    // A prediction (vramscope predict) measured nothing: it says so first, with what it predicted.
    const predicted = report.predicted === true || report.kind === "predicted";
    const prediction = predicted && report.prediction && typeof report.prediction === "object" ? report.prediction : null;
    const badges = [];
    if (predicted) {
      badges.push('<span class="badge kind-predicted" title="made by vramscope predict: no GPU was measured"><strong>Predicted</strong></span>');
      if (prediction) {
        for (const [label, key] of [["model", "model"], ["setup", "setup"], ["GPU", "gpu"]]) {
          if (prediction[key]) badges.push('<span class="badge kind-predicted">' + label + ": " + F.escapeHtml(String(prediction[key])) + "</span>");
        }
      }
    } else badges.push('<span class="badge kind-' + F.escapeHtml(report.kind) + '">' + F.escapeHtml(report.kind) + "</span>");
    if (report.source) badges.push('<span class="badge">' + F.escapeHtml(report.source) + "</span>");
    if (m) badges.push('<span class="badge">' + deviceName(m.dev) + "</span>");
    $("#badges").innerHTML = badges.join("");
    $("#badges").style.flexWrap = predicted ? "wrap" : "";
    const fig = (name) => (predicted ? "predicted " + name : name);
    const predictionItems = [];
    if (prediction) {
      const facts = [];
      if (prediction.torch_version) facts.push("torch " + F.escapeHtml(String(prediction.torch_version)));
      if (Number.isFinite(prediction.parameters)) facts.push(F.formatCount(prediction.parameters) + " parameters" + (Number.isFinite(prediction.trainable_parameters) ? " (" + F.formatCount(prediction.trainable_parameters) + " trainable)" : ""));
      if (Number.isFinite(prediction.parameter_bytes)) facts.push(F.formatBytes(prediction.parameter_bytes) + " of parameters");
      if (Number.isFinite(prediction.buffer_bytes) && prediction.buffer_bytes > 0) facts.push(F.formatBytes(prediction.buffer_bytes) + " of buffers");
      for (const kv of Array.isArray(prediction.facts) ? prediction.facts : []) {
        if (Array.isArray(kv) && kv.length === 2) facts.push(F.escapeHtml(String(kv[0])) + ": " + F.escapeHtml(String(kv[1])));
      }
      // The verdict the report database holds (fits, needed_bytes, oom_*), as the summary says it.
      const capacity = prediction.capacity_bytes;
      if (Number.isFinite(capacity) && capacity > 0 && typeof prediction.fits === "boolean") {
        const peak = prediction.peak_reserved_bytes;
        if (prediction.fits) facts.push("fits: yes, peak reserved " + F.formatBytes(peak) + " of " + F.formatBytes(capacity) + " (" + F.formatPercent(prediction.headroom_bytes / capacity) + " headroom)");
        else if (Number.isFinite(prediction.oom_event)) facts.push("<strong>fits: NO</strong> — out of memory at event " + F.formatCount(prediction.oom_event) + " (a request of " + F.formatBytes(prediction.oom_requested_bytes) + "), more than the " + F.formatBytes(capacity) + " the GPU has for the allocator");
        else facts.push("<strong>fits: NO</strong> — needs " + F.formatBytes(prediction.needed_bytes) + ", the GPU has " + F.formatBytes(capacity) + " for the allocator");
      }
      if (facts.length) predictionItems.push('<div class="stat wide"><div class="stat-label">predicted, no GPU measured</div><div class="stat-value iterations">' + facts.join(" · ") + "</div></div>");
    }
    if (!m) {
      $("#summary-line").innerHTML = predictionItems.join("") + '<span class="muted">this report holds no device with memory</span>';
    } else {
      const s = m.summary;
      const at = (e) => ' <span class="muted">' + (e >= 0 ? "at event " + F.formatCount(e) + (m.timeOf(e) !== null ? ", " + F.formatTimeUs(m.timeOf(e)) : "") : "before the first event") + "</span>";
      const items = [
        '<div class="stat"><div class="stat-label">' + fig("peak allocated") + '</div><div class="stat-value"><button type="button" class="link" data-goto="' + s.peak_event + '">' + F.formatBytes(s.peak_allocated) + "</button>" + at(s.peak_event) + "</div></div>",
        '<div class="stat"><div class="stat-label">' + fig("peak reserved") + '</div><div class="stat-value"><button type="button" class="link" data-goto="' + s.peak_reserved_event + '">' + F.formatBytes(s.peak_reserved) + "</button>" + at(s.peak_reserved_event) + "</div></div>",
        '<div class="stat"><div class="stat-label">at the end</div><div class="stat-value">' + F.formatBytes(s.allocated_at_end) + ' <span class="muted">allocated, ' + F.formatBytes(s.reserved_at_end) + " reserved</span></div></div>",
        '<div class="stat"><div class="stat-label">trace</div><div class="stat-value">' + F.formatCount(m.N) + ' <span class="muted">allocations, ' + F.formatCount(m.E) + " events, " + F.formatCount(m.dev.segments.count) + " segments</span></div></div>",
      ];
      const its = Array.isArray(s.iterations) ? s.iterations : [];
      if (its.length) {
        const list = its.slice(0, 12).map((it) => '<button type="button" class="link" data-goto="' + it.peak_event + '">step ' + F.escapeHtml(String(it.step)) + "</button> " + F.formatBytes(it.peak_allocated) + (it.peak_phase ? ' <span class="muted">' + F.escapeHtml(it.peak_phase) + "</span>" : ""));
        items.push('<div class="stat wide"><div class="stat-label">every iteration\'s peak</div><div class="stat-value iterations">' + list.join(" · ") + (its.length > 12 ? ' <span class="muted">… ' + (its.length - 12) + " more</span>" : "") + "</div></div>");
      }
      $("#summary-line").innerHTML = predictionItems.concat(items).join("");
    }
    // What the prediction assumed leads the notes.
    const assumed = prediction && Array.isArray(prediction.assumptions) ? prediction.assumptions.map((a) => "assumed: " + a) : [];
    const notes = assumed.concat(report.notes || []);
    $("#notes").innerHTML = notes.map((n) => "<li>" + F.escapeHtml(n) + "</li>").join("");
    $("#notes-wrap").hidden = notes.length === 0;
  }

  // ---- views ------------------------------------------------------------------------------------

  let timeline, allocView, peakView;

  function showModel() {
    const report = app.data.reports[state.report];
    if (!report.devices.length) {
      app.model = null;
      renderHeader();
      $("#views").hidden = true;
      return;
    }
    $("#views").hidden = false;
    state.device = Math.min(state.device, report.devices.length - 1);
    const clock = () => root.performance.now();
    let t = clock();
    const lap = (name) => {
      const now = clock();
      if (app.timings && !app.ready) app.timings[name] = (app.timings[name] || 0) + now - t;
      t = now;
    };
    const m = modelFor(state.report, state.device);
    app.model = m;
    lap("model");
    timeline.setModel(m);
    syncToolbar();
    renderHeader();
    timeline.render();
    lap("timeline");
    const key = state.report + "/" + state.device;
    if (!state.selected.has(key)) state.selected.set(key, peakEvent(m));
    applySelection(state.selected.get(key), lap);
    timeline.render();
  }

  function applySelection(t, lap) {
    const m = app.model;
    if (!m) return;
    state.selected.set(state.report + "/" + state.device, t);
    timeline.select(t);
    allocView.show(m, t);
    if (lap) lap("allocator");
    renderPeak();
    if (lap) lap("peak");
  }

  function renderPeak() {
    const m = app.model;
    const key = state.report + "/" + state.device;
    const useSel = state.peakUsesSelection && state.selected.has(key);
    const t = useSel ? state.selected.get(key) : peakEvent(m);
    const atPeak = !useSel || t === m.summary.peak_event;
    $("#peak-heading").textContent = atPeak ? "At the peak" : "At the selected moment";
    peakView.show(m, t, atPeak);
  }

  function syncToolbar() {
    document.querySelectorAll("[data-group]").forEach((b) => b.classList.toggle("on", b.dataset.group === timeline.group));
    document.querySelectorAll("[data-axis]").forEach((b) => {
      b.classList.toggle("on", b.dataset.axis === timeline.mode);
      if (b.dataset.axis === "time") {
        b.disabled = !(app.model && app.model.hasTime);
        b.title = b.disabled ? "this trace records no times" : "time since the first event";
      }
    });
  }

  // The ranks of a capture folder (the shown report's), side by side.
  function renderRanks() {
    const html = ns.ranks.ranksHtml(app.data.reports[state.report].ranks);
    $("#ranks-body").innerHTML = html;
    $("#ranks-view").hidden = html === "";
    $("#nav-ranks").hidden = html === "";
  }

  function renderCompare() {
    const reports = app.data.reports;
    const view = $("#compare-view");
    if (reports.length !== 2) {
      view.hidden = true;
      $("#nav-compare").hidden = true;
      return;
    }
    view.hidden = false;
    $("#nav-compare").hidden = false;
    const devOf = (r) => {
      const devs = reports[r].devices;
      if (!devs.length) return -1;
      const want = reports[state.report].devices[state.device];
      const i = want ? devs.findIndex((d) => d.device === want.device) : -1;
      return i >= 0 ? i : 0;
    };
    const sides = [0, 1].map((r) => ({ r, d: devOf(r) }));
    if (!state.compare) {
      state.compare = sides.map((side, i) => {
        const canvas = $(i === 0 ? "#compare-canvas-a" : "#compare-canvas-b");
        return new ns.timeline.Timeline(canvas, { height: 220, compact: true, tooltip: $("#tooltip"), yMaxFloor: () => state.compareScale || 0 });
      });
    }
    // One scale for both: the higher of the two reports' peaks.
    state.compareScale = 0;
    for (const side of sides) {
      if (side.d < 0) continue;
      const m = modelFor(side.r, side.d);
      state.compareScale = Math.max(state.compareScale, m.summary.peak_allocated || 0, m.summary.peak_reserved || 0, m.predicted ? Math.max(m.predicted.allocated.max(), m.predicted.reserved.max()) : 0);
    }
    sides.forEach((side, i) => {
      const head = $(i === 0 ? "#compare-head-a" : "#compare-head-b");
      const r = reports[side.r];
      if (side.d < 0) {
        head.innerHTML = "<strong>" + (i ? "B" : "A") + ": " + F.escapeHtml(r.title) + '</strong> <span class="muted">no device with memory</span>';
        return;
      }
      const m = modelFor(side.r, side.d);
      const s = m.summary;
      head.innerHTML = "<strong>" + (i ? "B" : "A") + ": " + F.escapeHtml(r.title) + '</strong> <span class="badge kind-' + F.escapeHtml(r.kind) + '">' + F.escapeHtml(r.kind) + "</span> " +
        '<span class="muted">' + deviceName(m.dev) + " · peak</span> " + F.formatBytes(s.peak_allocated) + ' <span class="muted">at event ' + F.formatCount(s.peak_event) + " · reserved</span> " + F.formatBytes(s.peak_reserved);
      const tl = state.compare[i];
      if (tl.model !== m) tl.setModel(m);
      tl.render();
    });
    const mA = sides[0].d >= 0 ? modelFor(0, sides[0].d) : null;
    const mB = sides[1].d >= 0 ? modelFor(1, sides[1].d) : null;
    const rows = ns.analysis.compareRows(mA && mA.summary, mB && mB.summary, reports[0].categories, reports[1].categories);
    $("#compare-table").innerHTML = ns.views.compareTableHtml(rows, reports[0].title, reports[1].title, reports[0].categories);
  }

  // ---- controls ---------------------------------------------------------------------------------

  function wire() {
    document.querySelectorAll("[data-group]").forEach((b) =>
      b.addEventListener("click", () => {
        timeline.setGroup(b.dataset.group);
        syncToolbar();
      })
    );
    document.querySelectorAll("[data-axis]").forEach((b) =>
      b.addEventListener("click", () => {
        timeline.setMode(b.dataset.axis);
        syncToolbar();
      })
    );
    $("#zoom-in").addEventListener("click", () => timeline.zoomBy(0.5));
    $("#zoom-out").addEventListener("click", () => timeline.zoomBy(2));
    $("#zoom-reset").addEventListener("click", () => timeline.resetView());
    $("#device-select").addEventListener("change", (ev) => {
      state.device = Number(ev.target.value);
      showModel();
      renderCompare();
    });
    $("#report-picker").addEventListener("click", (ev) => {
      const b = ev.target.closest("[data-report]");
      if (!b) return;
      app.setReport(Number(b.dataset.report));
    });
    $("#header").addEventListener("click", (ev) => {
      const b = ev.target.closest("[data-goto]");
      if (!b || !app.model) return;
      const t = Number(b.dataset.goto);
      app.selectEvent(t);
      const half = Math.max(20, Math.round((timeline.eventRange()[1] - timeline.eventRange()[0]) / 2));
      if (t < timeline.eventRange()[0] || t >= timeline.eventRange()[1]) timeline.zoomTo(t - half, t + half);
    });
    $("#alloc-peak").addEventListener("click", () => app.model && app.selectEvent(peakEvent(app.model)));
    $("#alloc-prev").addEventListener("click", () => step(-1));
    $("#alloc-next").addEventListener("click", () => step(1));
    document.addEventListener("keydown", (ev) => {
      if (!app.ready || ev.ctrlKey || ev.metaKey || ev.altKey) return;
      const tag = (ev.target && ev.target.tagName) || "";
      if (tag === "INPUT" || tag === "SELECT" || tag === "TEXTAREA") return;
      const k = ev.key;
      if (k === "ArrowLeft") timeline.panBy(-0.1);
      else if (k === "ArrowRight") timeline.panBy(0.1);
      else if (k === "+" || k === "=") timeline.zoomBy(0.5);
      else if (k === "-" || k === "_") timeline.zoomBy(2);
      else if (k === "0") timeline.resetView();
      else return;
      ev.preventDefault();
    });
  }

  function step(delta) {
    const m = app.model;
    if (!m || m.E === 0) return;
    const cur = state.selected.get(state.report + "/" + state.device);
    app.selectEvent(Math.max(-1, Math.min(m.E - 1, (cur === undefined ? 0 : cur) + delta)));
  }

  // ---- the API ----------------------------------------------------------------------------------

  app.zoomTo = function (e0, e1) {
    timeline.zoomTo(e0, e1);
    timeline.render();
    return timeline.eventRange();
  };
  app.selectEvent = function (t) {
    if (!app.model) return;
    const m = app.model;
    // -1 is the state before the first event (the summary's peak can be there).
    t = Math.max(-1, Math.min(m.E - 1, Math.round(t)));
    applySelection(t);
    timeline.render();
    return t;
  };
  app.hoverAt = function (clientX, clientY) {
    return timeline.hoverAt(clientX, clientY);
  };
  app.setGroup = function (g) {
    timeline.setGroup(g);
    syncToolbar();
    timeline.render();
  };
  app.setAxis = function (mode) {
    timeline.setMode(mode);
    syncToolbar();
    timeline.render();
  };
  app.setReport = function (r) {
    if (r === state.report || r < 0 || r >= app.data.reports.length) return;
    state.report = r;
    state.device = 0;
    showModel();
    renderRanks();
    renderCompare();
  };
  app.setDevice = function (d) {
    state.device = d;
    showModel();
    renderCompare();
  };
  app.setPeakUsesSelection = function (on) {
    state.peakUsesSelection = !!on;
    $("#peak-use-selected").checked = !!on;
    renderPeak();
  };
  app.state = state;

  async function start() {
    try {
      const el = document.getElementById("vramscope-data");
      if (!el || !el.textContent.trim()) throw new ns.decode.DataError("the page holds no report data (the vramscope-data element is missing or empty)");
      const t0 = root.performance.now();
      const text = el.textContent;
      const gz = ns.decode.base64ToBytes(text);
      const t1 = root.performance.now();
      const raw = await ns.decode.gunzip(gz);
      const t2 = root.performance.now();
      app.data = ns.decode.decodeBytes(raw);
      const t3 = root.performance.now();
      // Where the first render's time goes (ms; `start` is when the script began).
      app.timings = { start: t0, base64: t1 - t0, gunzip: t2 - t1, parse: t3 - t2 };
      const tooltip = $("#tooltip");
      timeline = new ns.timeline.Timeline($("#timeline-canvas"), {
        height: 380,
        legend: $("#timeline-legend"),
        tooltip,
        onSelect: (t) => {
          applySelection(t);
        },
      });
      app.timeline = timeline;
      allocView = new ns.views.AllocatorView($("#allocator-view"), tooltip);
      peakView = new ns.views.PeakView($("#peak-view"), tooltip, (on) => app.setPeakUsesSelection(on));
      wire();
      $("#loading").hidden = true;
      $("#app").hidden = false;
      showModel();
      renderRanks();
      const t4 = root.performance.now();
      renderCompare();
      app.timings.compare = root.performance.now() - t4;
      app.ready = true;
      app.firstRenderMs = root.performance.now();
      document.documentElement.dataset.ready = "true";
    } catch (e) {
      const msg = e && e.name === "DataError" ? e.message : "unexpected error while reading the report: " + ((e && e.message) || e);
      showError(msg);
      if (!(e && e.name === "DataError")) throw e;
    }
  }

  // Errors after the first render leave the page up and say what broke.
  root.addEventListener("error", (ev) => {
    if (app.ready && ev && ev.message) {
      const el = $("#error");
      el.innerHTML = "<strong>Something went wrong in the viewer:</strong> " + F.escapeHtml(ev.message);
      el.hidden = false;
    }
  });

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})(typeof globalThis !== "undefined" ? globalThis : this);
