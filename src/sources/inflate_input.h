// Streaming decompression of gzipped inputs, bounded by the input's size.
//
// Contract: the input is inflated as a stream, never whole into memory. The first inflated bytes
// are shown to the caller (to recognise the content) before anything else is inflated, so a file
// that holds no format vramscope reads costs one chunk whatever its size. What is kept lives in
// memory while small and in an unlinked temporary file (in $TMPDIR) past 64 KiB, mapped like
// any input file: a gzipped input costs the memory of the plain one, plus a disk copy that
// vanishes with the process. The inflated size is bounded by InputLimits::max_inflate_ratio
// times the compressed size (at least its inflate_allowance_bytes); past it the input is refused
// with one line naming the file, the limit and the flag that raises it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "common/gzip.h"
#include "common/mapped_file.h"
#include "common/status.h"
#include "sources/input_limits.h"

namespace vramscope::sources {

// The most a gzip of `compressed` bytes may inflate to: InputLimits::max_inflate_ratio times its
// size, at least inflate_allowance_bytes. TooMuchInflated is the one line past it.
uint64_t InflatedBound(uint64_t compressed, const InputLimits& limits);
Status TooMuchInflated(const std::string& what, uint64_t compressed, const InputLimits& limits);

// How many inflated bytes `recognise` sees (fewer when the whole content is shorter).
inline constexpr size_t kInflatedHeadBytes = 64;

// Inflates `file` (gzip). `recognise` gets the first kInflatedHeadBytes inflated bytes; an error
// from it is returned at once. The result is named like `file`. A cut-off deflate stream is an
// error, unless `cut` is given: then the result holds what was inflated before the cut, and `cut`
// says where it was (GunzipChunks).
Result<std::unique_ptr<MappedFile>> InflateInput(
    const MappedFile& file, const InputLimits& limits,
    const std::function<Status(std::span<const uint8_t> head)>& recognise, GzipCut* cut = nullptr);

}  // namespace vramscope::sources
