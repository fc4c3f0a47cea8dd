// Reads the tensor stream the Python tracer writes (python/vramscope/tracer/; the format is in
// docs/design/tracer.md): JSON Lines, a header, then alloc/free/set/phase/matmul/conv events and
// an "end" line.
#pragma once

#include <string_view>

#include "common/status.h"
#include "predict/tensor_stream.h"

namespace vramscope::predict {

// True when `path` looks like a tracer file (its first line names the format).
bool IsTracerStreamFile(std::string_view path);

Result<TensorStream> ReadTracerStream(std::string_view path);
// The same from text (tests, fuzzing); `where` names the source in errors.
Result<TensorStream> ParseTracerStream(std::string_view text, std::string_view where);

// Writes `stream` in the same format (what `vramscope predict --emit-stream` gives): a family's
// prediction can then be compared with the tracer's stream of the same model, tensor by tensor.
Status WriteTensorStream(const TensorStream& stream, const std::string& path, bool overwrite);

}  // namespace vramscope::predict
