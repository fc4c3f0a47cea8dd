#include "model/oom_message.h"

namespace vramscope::model {

const std::vector<OomMessageFigure>& OomMessageFigures() {
  static const std::vector<OomMessageFigure> figures = {
      {"tried_to_allocate", "tried to allocate", &OomMessage::tried_to_allocate},
      {"total_capacity", "total capacity", &OomMessage::total_capacity},
      {"free", "free", &OomMessage::free},
      {"allowed", "allowed (memory fraction)", &OomMessage::allowed},
      {"this_process_in_use", "this process in use", &OomMessage::this_process_in_use},
      {"allocated_by_pytorch", "allocated by PyTorch", &OomMessage::allocated_by_pytorch},
      {"private_pools", "in private pools", &OomMessage::private_pools},
      {"reserved_unallocated", "reserved but unallocated", &OomMessage::reserved_unallocated},
      {"already_allocated", "already allocated", &OomMessage::already_allocated},
      {"reserved_total", "reserved in total", &OomMessage::reserved_total},
      {"cached", "cached", &OomMessage::cached},
      {"inactive", "inactive", &OomMessage::inactive},
      {"other_allocations", "other allocations", &OomMessage::other_allocations},
      {"pool_limit", "BFC pool limit", &OomMessage::pool_limit},
      {"pool_in_use", "BFC pool in use", &OomMessage::pool_in_use},
      {"pool_peak_in_use", "BFC pool peak in use", &OomMessage::pool_peak_in_use},
      {"largest_free_block", "largest free block", &OomMessage::largest_free_block},
      {"program_parameters", "program parameters", &OomMessage::program_parameters},
      {"program_constants", "program constants", &OomMessage::program_constants},
      {"program_outputs", "program outputs", &OomMessage::program_outputs},
      {"program_temp", "program temporaries", &OomMessage::program_temp},
      {"program_total", "program total", &OomMessage::program_total},
  };
  return figures;
}

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
    case OomMessageKind::kXla:
      return "xla";
    case OomMessageKind::kTensorflow:
      return "tensorflow";
  }
  return "allocator";
}

}  // namespace vramscope::model
