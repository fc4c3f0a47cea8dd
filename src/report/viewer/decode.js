// vramscope viewer: decoding the embedded blob (docs/design/viewer.md, "The blob (format 1)").
//
//   base64 text -> gzip bytes -> "VSV1" | u32 LE header length H | header JSON | zero padding to
//   a multiple of 8 | binary columns (each at a multiple of 8 from the start of the binary part)
//
// Columns become typed arrays that view the decompressed buffer directly (no copy) on
// little-endian hosts. Every `{"col": K}` in the header is replaced by column K's typed array,
// and `validate` checks every length and index the page relies on, so a damaged or mismatched
// blob fails here with one sentence instead of drawing garbage later.
(function (root) {
  "use strict";
  const ns = (root.vramscope = root.vramscope || {});

  class DataError extends Error {
    constructor(message) {
      super(message);
      this.name = "DataError";
    }
  }

  const TYPES = {
    f64: Float64Array,
    i32: Int32Array,
    u32: Uint32Array,
    u8: Uint8Array,
    i8: Int8Array,
  };

  const LITTLE_ENDIAN = new Uint8Array(new Uint16Array([1]).buffer)[0] === 1;

  function base64ToBytes(text) {
    let binary;
    try {
      binary = atob(text.trim()); // forgiving base64: ASCII whitespace is ignored
    } catch (e) {
      throw new DataError("the embedded data is not valid base64 (the file was cut or edited)");
    }
    const out = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) out[i] = binary.charCodeAt(i);
    return out;
  }

  async function gunzip(bytes) {
    if (typeof DecompressionStream === "undefined") {
      throw new DataError(
        "this browser cannot decompress the embedded data (no DecompressionStream); " +
          "open the page in a current Chrome, Edge, Firefox or Safari"
      );
    }
    try {
      const ds = new DecompressionStream("gzip");
      const writer = ds.writable.getWriter();
      // A damaged stream rejects these too; the reader reports it, so they must not go unhandled
      // (an unhandled rejection is a console error).
      writer.write(bytes).catch(() => {});
      writer.close().catch(() => {});
      const reader = ds.readable.getReader();
      const chunks = [];
      let length = 0;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        chunks.push(value);
        length += value.length;
      }
      if (chunks.length === 1) return chunks[0];
      const out = new Uint8Array(length);
      let at = 0;
      for (const c of chunks) {
        out.set(c, at);
        at += c.length;
      }
      return out;
    } catch (e) {
      // The stream's own message says nothing more useful (Chrome: "Failed to fetch").
      throw new DataError("the embedded data is not valid gzip (the file was cut or edited)");
    }
  }

  // Splits the decompressed blob into its header (JSON, not yet resolved) and its columns.
  function parseBlob(bytes) {
    if (bytes.byteOffset % 8 !== 0) bytes = bytes.slice(); // typed views need aligned offsets
    if (bytes.length < 8) throw new DataError("the embedded data is too short to be a vramscope blob");
    const magic = String.fromCharCode(bytes[0], bytes[1], bytes[2], bytes[3]);
    if (magic !== "VSV1") {
      throw new DataError('the embedded data does not start with "VSV1" (found "' + magic.replace(/[^ -~]/g, "?") + '")');
    }
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const headerLength = view.getUint32(4, true);
    if (8 + headerLength > bytes.length) {
      throw new DataError("the blob's header length (" + headerLength + " bytes) runs past its end (" + bytes.length + " bytes)");
    }
    let header;
    try {
      header = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes.subarray(8, 8 + headerLength)));
    } catch (e) {
      throw new DataError("the blob's header is not valid JSON: " + e.message);
    }
    if (!header || typeof header !== "object") throw new DataError("the blob's header is not a JSON object");
    if (header.format !== 1) {
      throw new DataError("this page reads blob format 1, the data is format " + JSON.stringify(header.format) + " (page and data from different vramscope versions?)");
    }
    const binaryStart = Math.ceil((8 + headerLength) / 8) * 8;
    const binaryLength = Math.max(0, bytes.length - binaryStart);
    const specs = header.columns;
    if (!Array.isArray(specs)) throw new DataError("the blob's header has no column list");
    const columns = specs.map((spec, k) => {
      const name = spec && spec.name ? '"' + spec.name + '"' : "#" + k;
      const Type = spec && TYPES[spec.type];
      if (!Type) throw new DataError("column " + name + " has an unknown type " + JSON.stringify(spec && spec.type));
      const offset = spec.offset, length = spec.length;
      if (!Number.isInteger(offset) || !Number.isInteger(length) || offset < 0 || length < 0) {
        throw new DataError("column " + name + " has an invalid offset or length");
      }
      if (offset % 8 !== 0) throw new DataError("column " + name + " is not 8-byte aligned (offset " + offset + ")");
      const byteLength = length * Type.BYTES_PER_ELEMENT;
      if (offset + byteLength > binaryLength) {
        throw new DataError("column " + name + " (" + byteLength + " bytes at " + offset + ") runs past the end of the data (" + binaryLength + " bytes)");
      }
      const start = bytes.byteOffset + binaryStart + offset;
      if (LITTLE_ENDIAN || Type.BYTES_PER_ELEMENT === 1) return new Type(bytes.buffer, start, length);
      // Big-endian host: copy through a DataView.
      const out = new Type(length);
      const dv = new DataView(bytes.buffer, start, byteLength);
      const getter = { f64: "getFloat64", i32: "getInt32", u32: "getUint32" }[spec.type];
      for (let i = 0; i < length; i++) out[i] = dv[getter](i * Type.BYTES_PER_ELEMENT, true);
      return out;
    });
    return { header, columns };
  }

  function isColumnRef(v) {
    if (!v || typeof v !== "object" || Array.isArray(v)) return false;
    const keys = Object.keys(v);
    return keys.length === 1 && keys[0] === "col";
  }

  // A copy of `value` with every {"col": K} replaced by columns[K].
  function resolveColumns(value, columns) {
    if (Array.isArray(value)) {
      // Large plain arrays (frames, strings) hold no references below strings; skip them fast.
      const out = new Array(value.length);
      for (let i = 0; i < value.length; i++) {
        const v = value[i];
        out[i] = v !== null && typeof v === "object" ? resolveColumns(v, columns) : v;
      }
      return out;
    }
    if (value !== null && typeof value === "object") {
      if (isColumnRef(value)) {
        const k = value.col;
        if (!Number.isInteger(k) || k < 0 || k >= columns.length) {
          throw new DataError("the header refers to column " + JSON.stringify(k) + ", which does not exist");
        }
        return columns[k];
      }
      const out = {};
      for (const key of Object.keys(value)) out[key] = resolveColumns(value[key], columns);
      return out;
    }
    return value;
  }

  // ---- validation -------------------------------------------------------------------------

  function isTyped(v) {
    return ArrayBuffer.isView(v) && !(v instanceof DataView);
  }

  function maxOf(arr) {
    let m = -Infinity;
    for (let i = 0; i < arr.length; i++) if (arr[i] > m) m = arr[i];
    return m;
  }
  function minOf(arr) {
    let m = Infinity;
    for (let i = 0; i < arr.length; i++) if (arr[i] < m) m = arr[i];
    return m;
  }

  function validateReport(report, r) {
    const where = "report " + r + (report && report.title ? ' ("' + report.title + '")' : "");
    const fail = (msg) => {
      throw new DataError(where + ": " + msg);
    };
    if (!report || typeof report !== "object") fail("is not an object");
    for (const key of ["categories", "phases", "strings", "owners", "frames", "devices"]) {
      if (!Array.isArray(report[key])) fail('has no "' + key + '" list');
    }
    if (!Array.isArray(report.notes)) report.notes = [];
    const st = report.stacks;
    if (!st || !isTyped(st.parent) || !isTyped(st.frame)) fail("has no stack columns");
    const nodes = st.parent.length;
    if (nodes < 1 || st.frame.length !== nodes) fail("its stack columns disagree in length or are empty");
    if (maxOf(st.parent) >= nodes) fail("a stack node's parent is out of range");
    if (maxOf(st.frame) >= report.frames.length) fail("a stack node's frame is out of range");
    const C = report.categories.length;
    report.devices.forEach((dev, d) => validateDevice(dev, report, (msg) => fail("device " + (dev && dev.device !== undefined ? dev.device : d) + ": " + msg), C, nodes));
  }

  function validateDevice(dev, report, fail, C, nodes) {
    const need = (arr, length, name) => {
      if (!isTyped(arr)) fail(name + " is missing");
      if (length !== undefined && arr.length !== length) fail(name + " has " + arr.length + " values, expected " + length);
      return arr;
    };
    const E = dev.events;
    if (!Number.isInteger(E) || E < 0) fail("has no valid event count");
    need(dev.ev_alloc, E, "ev_alloc");
    need(dev.ev_sign, E, "ev_sign");
    if (dev.has_time) need(dev.time_us, E, "time_us");
    if (!dev.reserved) fail("has no reserved curve");
    need(dev.reserved.event, undefined, "reserved.event");
    need(dev.reserved.bytes, dev.reserved.event.length, "reserved.bytes");
    if (dev.predicted) {
      // Two step curves: reserved at `event`, allocated at `allocated_event` (or `event`).
      need(dev.predicted.event, undefined, "predicted.event");
      need(dev.predicted.reserved, dev.predicted.event.length, "predicted.reserved");
      const allocatedEvent = dev.predicted.allocated_event || dev.predicted.event;
      need(allocatedEvent, undefined, "predicted.allocated_event");
      need(dev.predicted.allocated, allocatedEvent.length, "predicted.allocated");
    }
    const A = dev.allocations;
    if (!A || !Number.isInteger(A.count)) fail("has no allocations");
    const N = A.count;
    for (const key of ["start", "end", "size", "requested", "address", "category", "owner", "op", "stack", "phase", "step", "segment", "owner_group"]) {
      need(A[key], N, "allocations." + key);
    }
    if (A.free_completed !== undefined) need(A.free_completed, N, "allocations.free_completed");
    if (N > 0) {
      if (maxOf(dev.ev_alloc) >= N) fail("ev_alloc names an allocation beyond the " + N + " there are");
      if (maxOf(A.category) >= C) fail("an allocation's category is out of range");
      if (maxOf(A.owner) >= report.owners.length) fail("an allocation's owner is out of range");
      if (maxOf(A.op) >= report.strings.length) fail("an allocation's operation is out of range");
      if (maxOf(A.stack) >= nodes) fail("an allocation's stack node is out of range");
      if (maxOf(A.phase) >= report.phases.length) fail("an allocation's phase is out of range");
      for (let i = 1; i < N; i++) {
        if (A.start[i] < A.start[i - 1]) fail("allocations are not sorted by start (at " + i + ")");
      }
    }
    const S = dev.segments;
    if (!S) fail("has no segments object");
    if (!Number.isInteger(S.count)) S.count = 0;
    if (S.count > 0) {
      for (const key of ["address", "size", "start", "end", "stream", "pool"]) need(S[key], S.count, "segments." + key);
    }
    if (N > 0 && maxOf(A.segment) >= S.count) fail("an allocation's segment is out of range");
    if (S.private_pool !== undefined) {
      need(S.private_pool, S.count, "segments.private_pool");
      if (!Array.isArray(S.private_pools)) fail("names no private pools for segments.private_pool");
      if (S.count > 0 && maxOf(S.private_pool) > S.private_pools.length) fail("a segment's private pool is out of range");
    }
    if (!Array.isArray(dev.phases)) dev.phases = [];
    // Region bands: pages from reports without them draw none; a damaged band is dropped.
    dev.regions = (Array.isArray(dev.regions) ? dev.regions : []).filter(
      (b) => b && typeof b === "object" && Number.isInteger(b.first_event) && Number.isInteger(b.last_event) && Number.isInteger(b.row) && b.row >= 0 && b.row < 16 && b.first_event <= b.last_event,
    );
    if (!dev.summary || typeof dev.summary !== "object") fail("has no summary");
    const lod = dev.lod;
    if (!lod || !lod.groups || !Array.isArray(lod.levels)) fail("has no level-of-detail pyramid");
    const K = { category: C, owner: 0 };
    for (const g of ["category", "owner"]) {
      if (!lod.groups[g] || !Array.isArray(lod.groups[g].series)) fail('has no "' + g + '" grouping');
    }
    K.owner = lod.groups.owner.series.length;
    if (lod.groups.category.series.length !== C) fail("its category grouping has " + lod.groups.category.series.length + " series for " + C + " categories");
    if (N > 0 && K.owner > 0 && maxOf(A.owner_group) >= K.owner) fail("an allocation's owner group is out of range");
    if (E > 0 && lod.levels.length === 0) fail("has events but no level of detail");
    lod.levels.forEach((level, i) => {
      const name = "level " + i;
      if (!Number.isInteger(level.bucket) || level.bucket < 1) fail(name + " has an invalid bucket size");
      const B = level.count;
      if (B !== Math.ceil(E / level.bucket)) fail(name + " has " + B + " buckets, expected " + Math.ceil(E / level.bucket) + " (" + E + " events / " + level.bucket + ")");
      need(level.peak_event, B, name + ".peak_event");
      need(level.allocated, B, name + ".allocated");
      need(level.reserved, B, name + ".reserved");
      need(level.category, B * C, name + ".category");
      need(level.owner, B * K.owner, name + ".owner");
      if (level.category_start !== undefined) need(level.category_start, B * C, name + ".category_start");
      if (level.owner_start !== undefined) need(level.owner_start, B * K.owner, name + ".owner_start");
      if (B > 0 && (minOf(level.peak_event) < 0 || maxOf(level.peak_event) >= E)) fail(name + " has a peak event out of range");
      if (i > 0 && level.bucket !== 4 * lod.levels[i - 1].bucket) fail(name + "'s bucket is not 4 times the previous level's");
    });
  }

  // The header with its columns resolved, checked.
  function decodeBytes(bytes) {
    const { header, columns } = parseBlob(bytes);
    const resolved = resolveColumns(header, columns);
    if (!Array.isArray(resolved.reports) || resolved.reports.length === 0) {
      throw new DataError("the blob holds no report");
    }
    resolved.reports.forEach(validateReport);
    return resolved;
  }

  async function decodeBase64(text) {
    return decodeBytes(await gunzip(base64ToBytes(text)));
  }

  const api = { DataError, TYPES, base64ToBytes, gunzip, parseBlob, resolveColumns, validateReport, decodeBytes, decodeBase64 };
  ns.decode = api;
  if (typeof module !== "undefined") module.exports = api;
})(typeof globalThis !== "undefined" ? globalThis : this);
