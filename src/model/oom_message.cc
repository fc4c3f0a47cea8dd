#include "model/oom_message.h"

namespace vramscope::model {

const char* OomMessageKindName(OomMessageKind kind) {
  switch (kind) {
    case OomMessageKind::kAllocator:
      return "allocator";
    case OomMessageKind::kAllocatorLegacy:
      return "allocator_legacy";
    case OomMessageKind::kAllocatorBare:
      return "allocator_bare";
    case OomMessageKind::kDriverError:
      return "driver_error";
    case OomMessageKind::kLibraryError:
      return "library_error";
    case OomMessageKind::kAsyncAllocator:
      return "async_allocator";
    case OomMessageKind::kMps:
      return "mps";
  }
  return "allocator";
}

}  // namespace vramscope::model
