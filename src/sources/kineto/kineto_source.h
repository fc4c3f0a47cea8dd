// Source: PyTorch profiler traces (Chrome / Kineto JSON written by
// torch.profiler.profile(profile_memory=True).export_chrome_trace, plain or gzipped).
//
// What becomes of the trace:
// - `[memory]` instant events of CUDA (Device Type 1) and ROCm/HIP (Device Type 6) devices
//   become events: positive Bytes an alloc, negative Bytes a free_requested followed by a
//   free_completed at the same time. Bytes are the caching allocator's block sizes. Per device
//   they are ordered by `ts` (exact: microseconds with up to nanosecond digits are parsed as
//   decimals, not doubles), equal times in file order; time_us is `ts` rounded to whole
//   microseconds. CPU memory events (type 0) and other device types are counted in the notes and
//   skipped, as are 0-byte events.
// - Frees pair with allocations by "Addr". The torch 1.9 schema has no Addr: allocations get
//   synthetic addresses (from 2^56, 512 B apart) and each free takes the most recent open
//   allocation of the same size on its device; a free that finds none freed memory allocated
//   before the trace (alive at the start).
// - Levels: with "Total Allocated", the device's start level is chosen so that the allocated
//   curve equals the profiler's counter after every event; with "Total Reserved", each change
//   between consecutive memory events becomes a synthetic segment_alloc / segment_free (address
//   0) just before the event that shows it, so the reserved curve equals the counter. Without
//   totals (torch 1.9) the curve counts only what the trace shows and reserved is 0 (noted).
// - Stacks: the complete ("X") events on the same pid/tid that enclose the memory event:
//   python_function events become Python frames ("file.py(12): f" parsed; "<built-in ...>" keep
//   their text without the object address; "nn.Module: Linear_0" is the frame
//   ("nn.Module", "Linear_0")); cpu_op / "Operator" / user_annotation events become native frames
//   named exactly as recorded ("aten::addmm", empty file). Torch 1.9 operators' "Call stack"
//   arg supplies their Python callers when the trace has no python_function events.
// - `ProfilerStep#N` events become annotations START and END on every device, with fields
//   {("stage", "START"|"END"), ("name", "ProfilerStep#N")}, as snapshots store theirs.
#pragma once

#include <string>
#include <string_view>

#include "common/json_sax.h"
#include "common/status.h"
#include "model/trace.h"

namespace vramscope::kineto {

// Converts the JSON text of a trace (an object with "traceEvents", or Chrome's bare list of
// events). `path` prefixes error messages and names the source. Errors (InvalidInput, one line:
// "PATH: what is wrong, where, what to do") cover malformed JSON (with nlohmann's byte
// position), a missing or mistyped "traceEvents", a [memory] event with a missing, mistyped or
// absurd field (with its index in the event list), a mix of memory schemas, and a trace without
// GPU [memory] events. Operator and Python events with an unusable ts/dur are noted, not fatal.
// Never throws. `options.progress` hears how much of the text is read (a mapped file releases
// those pages: the reader keeps nothing of the text behind it).
Result<model::Trace> TraceFromKinetoJson(std::string_view json, const std::string& path,
                                         const json_sax::ParseOptions& options = {});

// The same, the text pulled from `source` as it is read (a gzip inflated on another thread,
// sources/inflate_stream.h). Where the source failed, the caller says why (the parse then ends
// early and this returns an error of its own).
Result<model::Trace> TraceFromKinetoStream(json_sax::Source& source, const std::string& path);

}  // namespace vramscope::kineto
