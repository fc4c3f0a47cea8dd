// vramscope viewer: formatting, axis ticks and the colour palette (pure, no DOM).
// Loaded as a classic <script> (defines vramscope.format) and by Node's require() in the tests.
(function (root) {
  "use strict";
  const ns = (root.vramscope = root.vramscope || {});

  const BYTE_UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];

  // "512 B", "20.00 KiB", "1.50 GiB": the same style as the terminal summary.
  function formatBytes(bytes) {
    if (bytes === null || bytes === undefined || !isFinite(bytes)) return "—";
    const sign = bytes < 0 ? "-" : "";
    let v = Math.abs(bytes);
    if (v < 1024) return sign + Math.round(v) + " B";
    let unit = 0;
    while (v >= 1024 && unit < BYTE_UNITS.length - 1) {
      v /= 1024;
      unit++;
    }
    // 1023.999 MiB would print as "1024.00 MiB"; say "1.00 GiB" instead.
    if (v.toFixed(2) === "1024.00" && unit < BYTE_UNITS.length - 1) {
      v = 1;
      unit++;
    }
    return sign + v.toFixed(2) + " " + BYTE_UNITS[unit];
  }

  // A signed difference: "+1.50 GiB", "-512 B", "0 B".
  function formatBytesDelta(bytes) {
    if (!isFinite(bytes)) return "—";
    if (bytes === 0) return "0 B";
    return (bytes > 0 ? "+" : "") + formatBytes(bytes);
  }

  // 185700864 -> "185,700,864" (independent of the browser's locale, so tests are stable).
  function formatCount(n) {
    if (n === null || n === undefined || !isFinite(n)) return "—";
    const sign = n < 0 ? "-" : "";
    const s = String(Math.round(Math.abs(n)));
    return sign + s.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  // 12345.5 with 1 decimal -> "12,345.5".
  function formatFixed(v, decimals) {
    const text = Math.abs(v).toFixed(decimals);
    const dot = text.indexOf(".");
    const int = dot < 0 ? text : text.slice(0, dot);
    const sign = v < 0 && Number(text) !== 0 ? "-" : "";
    return sign + int.replace(/\B(?=(\d{3})+(?!\d))/g, ",") + (dot < 0 ? "" : text.slice(dot));
  }

  function formatPercent(fraction, digits) {
    if (!isFinite(fraction)) return "—";
    return (fraction * 100).toFixed(digits === undefined ? 1 : digits) + "%";
  }

  // Microseconds since the first event: "850 µs", "12.35 ms", "3.142 s".
  function formatTimeUs(us) {
    if (us === null || us === undefined || !isFinite(us)) return "—";
    const a = Math.abs(us);
    if (a < 1000) return Math.round(us) + " µs";
    if (a < 1e6) return (us / 1000).toFixed(a < 1e4 ? 3 : 2) + " ms";
    return (us / 1e6).toFixed(3) + " s";
  }

  // B/A as "×1.25"; null when A is 0 (no ratio).
  function formatRatio(ratio) {
    if (ratio === null || ratio === undefined || !isFinite(ratio)) return "—";
    return "×" + (ratio >= 100 ? ratio.toFixed(0) : ratio >= 10 ? ratio.toFixed(1) : ratio.toFixed(2));
  }

  // Device addresses are exact in f64 up to 2^53, and toString(16) is exact for integers.
  function formatAddress(address) {
    if (!isFinite(address) || address < 0) return "—";
    return "0x" + Math.round(address).toString(16);
  }

  function escapeHtml(text) {
    return String(text)
      .replace(/&/g, "&amp;")
      .replace(/</g, "&lt;")
      .replace(/>/g, "&gt;")
      .replace(/"/g, "&quot;")
      .replace(/'/g, "&#39;");
  }

  // The step of "nice" ticks (1, 2 or 5 times a power of ten) for about `target` ticks.
  function niceStep(span, target) {
    if (!(span > 0)) return 1;
    const raw = span / Math.max(1, target);
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / power;
    const mult = f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10;
    return mult * power;
  }

  function decimalsOf(step) {
    if (step >= 1) return 0;
    return Math.min(10, Math.ceil(-Math.log10(step) - 1e-9));
  }

  // Ticks in [lo, hi] on multiples of a nice step.
  function niceTicks(lo, hi, target) {
    const step = niceStep(hi - lo, target || 5);
    const first = Math.ceil(lo / step - 1e-9);
    const ticks = [];
    for (let i = first; i * step <= hi + step * 1e-9 && ticks.length < 1000; i++) {
      ticks.push(i * step || 0); // never -0
    }
    return { step, ticks, decimals: decimalsOf(step) };
  }

  // Byte ticks from 0 to max in one binary unit: [{value, label}], labels like "1.5 GiB".
  function byteTicks(max, target) {
    if (!(max > 0)) return [{ value: 0, label: "0 B" }];
    let unit = 0;
    while (unit < BYTE_UNITS.length - 1 && max / Math.pow(1024, unit + 1) >= 1) unit++;
    const scale = Math.pow(1024, unit);
    const t = niceTicks(0, max / scale, target || 5);
    return t.ticks.map((v) => ({
      value: v * scale,
      label: v === 0 ? "0" : (unit === 0 ? Math.round(v) : v.toFixed(t.decimals)) + " " + BYTE_UNITS[unit],
    }));
  }

  // Time ticks for a span in microseconds, in the unit that suits the span.
  function timeTicks(lo, hi, target) {
    const span = hi - lo;
    const unit = span < 2000 ? { name: "µs", scale: 1 } : span < 2e7 ? { name: "ms", scale: 1e3 } : { name: "s", scale: 1e6 };
    const t = niceTicks(lo / unit.scale, hi / unit.scale, target || 6);
    return {
      unit: unit.name,
      ticks: t.ticks.map((v) => ({ value: v * unit.scale, label: formatFixed(v, t.decimals) })),
    };
  }

  // Event-index ticks: integers only.
  function eventTicks(lo, hi, target) {
    const t = niceTicks(lo, hi, target || 6);
    const step = Math.max(1, t.step);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi && out.length < 1000; v += step) {
      out.push({ value: v, label: formatCount(v) });
    }
    return { unit: "event", ticks: out };
  }

  // One fixed colour per category (Tableau 10, muted); the page never reassigns them.
  const CATEGORY_COLORS = {
    weight: "#4e79a7",
    gradient: "#f28e2b",
    optimizer_state: "#59a14f",
    activation: "#e15759",
    input: "#b07aa1",
    workspace: "#edc948",
    temporary: "#76b7b2",
    unknown: "#bab0ac",
  };
  const EXTRA_COLORS = ["#9c755f", "#ff9da7", "#86bcb6", "#d4a6c8", "#8cd17d", "#a0cbe8"];

  function categoryColor(name, index) {
    if (Object.prototype.hasOwnProperty.call(CATEGORY_COLORS, name)) return CATEGORY_COLORS[name];
    return EXTRA_COLORS[(index || 0) % EXTRA_COLORS.length];
  }

  // Owner series: distinct hues; the last series ("other owners") is grey.
  const OWNER_COLORS = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#a0cbe8", "#ffbe7d", "#8cd17d", "#d4a6c8", "#86bcb6", "#f1ce63", "#d37295",
  ];
  function ownerColor(index, count, name) {
    if (index === count - 1 && /^other/i.test(name || "")) return "#c9c9c9";
    return OWNER_COLORS[index % OWNER_COLORS.length];
  }

  const PHASE_COLORS = {
    forward: "#9ecae1",
    backward: "#fdae6b",
    optimizer: "#a1d99b",
  };
  function phaseColor(name) {
    return PHASE_COLORS[name] || "#d9d9d9";
  }

  const api = {
    BYTE_UNITS, formatBytes, formatBytesDelta, formatCount, formatFixed, formatPercent, formatTimeUs,
    formatRatio, formatAddress, escapeHtml, niceStep, niceTicks, byteTicks, timeTicks, eventTicks,
    CATEGORY_COLORS, categoryColor, ownerColor, phaseColor,
  };
  ns.format = api;
  if (typeof module !== "undefined") module.exports = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
