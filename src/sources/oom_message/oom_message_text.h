// Finds and reads out-of-memory messages in text a user pasted: the bare message, a whole
// traceback or a training log (several messages, other ranks' lines, ANSI colours, wrapped lines).
// Knows every generation of PyTorch's caching-allocator message (1.x "... reserved in total by
// PyTorch", the oldest "... cached", 2.1+ "GPU 0 has a total capacity of ..." with processes,
// private pools and a memory fraction's cap), ROCm's "HIP out of memory", and the errors that come
// from outside the caching allocator ("CUDA error: out of memory", CUBLAS_STATUS_ALLOC_FAILED).
// The formats, with the PyTorch versions that print them: docs/design/explain.md.
//
// Contract: linear in the text's size (every search is bounded by a message's window), never
// fails; text that holds no message gives an empty list.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

#include "model/oom_message.h"

namespace vramscope::sources {

// A message's figure ("79.11 GiB", "512 bytes", "6.94 MiB") as the bytes it can stand for under
// PyTorch's format_size rounding; nullopt when `text` is not such a figure.
std::optional<model::PrintedBytes> ParsePrintedBytes(std::string_view text);

// Every message in `text`, in the order they appear; at most `max_messages` (the rest are left
// out; `*left_out` counts them when given).
std::vector<model::OomMessage> FindOomMessages(std::string_view text, size_t max_messages = 1000,
                                               size_t* left_out = nullptr);

}  // namespace vramscope::sources
