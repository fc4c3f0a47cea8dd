// vramscope viewer: the ranks of a capture folder side by side (pure: HTML from the report's
// `ranks`, which is what `vramscope report FOLDER --json` gives as "ranks" and "ranks_compared":
// {table: [...], compared: {by_step, by_phase, bounding} | null}, docs/design/viewer.md).
//   ranksHtml(ranks)  one row per rank with its peaks drawn to one scale, each step's peak as a
//                     heat cell (the highest rank of each step outlined), and why the bounding rank
//                     bounds the job; "" when there are no ranks
(function (root) {
  "use strict";
  const ns = (root.vramscope = root.vramscope || {});
  const F = ns.format || (typeof require !== "undefined" ? require("./format.js") : null);

  function h(text) {
    return F.escapeHtml(String(text === null || text === undefined ? "" : text));
  }
  function num(x) {
    return Number.isFinite(x) ? x : 0;
  }
  // Heat of a cell: its share of the highest step peak of any rank, as a blue of that strength.
  function heat(fraction) {
    const f = Math.max(0, Math.min(1, fraction));
    return "rgba(37, 99, 235, " + (0.08 + 0.82 * f).toFixed(3) + ")";
  }

  const MAX_STEP_CELLS = 64;

  function ranksHtml(ranks) {
    if (!ranks || !Array.isArray(ranks.table) || ranks.table.length === 0) return "";
    const rows = ranks.table;
    const compared = ranks.compared && typeof ranks.compared === "object" ? ranks.compared : null;
    const scale = Math.max(1, ...rows.map((r) => Math.max(num(r.peak_reserved_bytes), num(r.peak_allocated_bytes))));
    const allSteps = Array.from(new Set(rows.flatMap((r) => (Array.isArray(r.steps_peaks) ? r.steps_peaks : []).map((s) => s.step)))).sort((a, b) => a - b);
    // A cell per step up to MAX_STEP_CELLS; a longer run shows its first ones and says so.
    const steps = allSteps.slice(0, MAX_STEP_CELLS);
    const stepMax = Math.max(1, ...rows.flatMap((r) => (r.steps_peaks || []).map((s) => num(s.peak_allocated_bytes))));
    // The rank holding each step's highest peak (the terminal's "highest on").
    const highestOf = new Map();
    for (const s of compared && Array.isArray(compared.by_step) ? compared.by_step : []) highestOf.set(s.step, s.highest_label);

    let html = '<table class="data ranks"><thead><tr><th>rank</th><th>host:device</th><th class="bars-head">peak reserved / allocated (one scale)</th>' +
      '<th class="num">allocated</th><th class="num">reserved</th><th>peak in</th><th>ended</th>';
    if (steps.length) {
      html += '<th class="steps-head">peak allocated of each step' + (allSteps.length > steps.length ? " (the first " + steps.length + " of " + allSteps.length + ")" : "") +
        "<br>" + steps.map((s) => '<span class="step-label">' + h(s) + "</span>").join("") + "</th>";
    }
    html += "</tr></thead><tbody>";
    for (const r of rows) {
      const reserved = num(r.peak_reserved_bytes), allocated = num(r.peak_allocated_bytes);
      const where = (r.host ? r.host + ":" : "") + "cuda:" + h(r.device);
      const peakIn = r.peak_step ? "step " + r.peak_step + (r.peak_phase ? " " + r.peak_phase : "") : (r.peak_phase || "—");
      html += '<tr class="' + (r.reported ? "bounding" : "") + '" data-label="' + h(r.label) + '"><td>' + h(r.label) + (r.reported ? ' <span class="badge bound">bounds the job</span>' : "") + "</td>" +
        "<td>" + h(where) + "</td>" +
        '<td class="bars"><div class="bar reserved" style="width:' + (100 * reserved / scale).toFixed(2) + '%" title="peak reserved ' + h(F.formatBytes(reserved)) + '"></div>' +
        '<div class="bar allocated" style="width:' + (100 * allocated / scale).toFixed(2) + '%" title="peak allocated ' + h(F.formatBytes(allocated)) + '"></div></td>' +
        '<td class="num">' + h(F.formatBytes(allocated)) + '</td><td class="num">' + h(F.formatBytes(reserved)) + "</td>" +
        "<td>" + h(peakIn) + "</td><td>" + h(r.oom ? "out of memory" : r.end_reason || "") + "</td>";
      if (steps.length) {
        const byStep = new Map((r.steps_peaks || []).map((s) => [s.step, s]));
        html += '<td class="steps">' + steps.map((step) => {
          const s = byStep.get(step);
          if (!s) return '<span class="cell empty" title="step ' + h(step) + ': not recorded on this rank"></span>';
          const top = highestOf.get(step) === r.label;
          return '<span class="cell' + (top ? " top" : "") + '" style="background:' + heat(num(s.peak_allocated_bytes) / stepMax) + '" title="' +
            h(r.label + ", step " + step + ": " + F.formatBytes(num(s.peak_allocated_bytes)) + (s.peak_phase ? " in " + s.peak_phase : "") + (top ? " (the highest of the ranks)" : "")) + '"></span>';
        }).join("") + "</td>";
      }
      html += "</tr>";
    }
    html += "</tbody></table>";

    const b = compared && compared.bounding;
    if (b && b.label && rows.length > 1) {
      const above = num(b.peak_allocated_bytes) - num(b.others_median_peak_allocated_bytes);
      html += '<div class="why"><h3>Why ' + h(b.label) + " bounds the job</h3><p>its peak allocated, " + h(F.formatBytes(num(b.peak_allocated_bytes))) + ", is " +
        h(F.formatBytes(above)) + " above the median of the " + h(b.others) + " other rank(s) (" + h(F.formatBytes(num(b.others_median_peak_allocated_bytes))) + ").</p>";
      const excess = Object.entries(b.category_excess_bytes || {}).filter(([, v]) => num(v) > 0).sort((x, y) => y[1] - x[1]);
      if (excess.length) {
        html += "<p>At its peak, more than their median at theirs: " + excess.map(([c, v]) => h(c) + " +" + h(F.formatBytes(v))).join(", ") + ".</p>";
      }
      const alone = Array.isArray(b.held_alone) ? b.held_alone : [];
      if (alone.length) {
        html += "<p>Live at its peak and among no other rank's " + h(b.owners_compared_per_rank) + " largest owners at theirs:</p>" +
          '<table class="data held-alone"><tbody>' + alone.map((o) => '<tr><td class="num">' + h(F.formatBytes(num(o.bytes))) + "</td><td>" + h(o.category) + "</td><td>" + h(o.owner) + "</td></tr>").join("") + "</tbody></table>";
      } else {
        html += "<p>Every owner live at its peak is among another rank's largest too: it holds the same tensors, more of them or larger.</p>";
      }
      html += "</div>";
    }
    return html;
  }

  const api = { ranksHtml, MAX_STEP_CELLS };
  ns.ranks = api;
  if (typeof module !== "undefined") module.exports = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
