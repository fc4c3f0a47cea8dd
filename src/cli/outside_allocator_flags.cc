#include "cli/outside_allocator_flags.h"

namespace vramscope::cli {

void AddOutsideAllocatorFlags(CLI::App& cmd, pipeline::OutsideOverrides& flags,
                              const std::string& nccl_default) {
  const auto mib = CLI::Range(uint64_t{0}, uint64_t{1} << 20);
  cmd.add_option("--cuda-context", flags.cuda_context_mib,
                 "MiB the CUDA context takes outside the allocator (default: the GPU's, from "
                 "docs/design/non-pytorch-memory.md: 426 MiB measured on A100, 610 MiB on "
                 "H100/H200, ...)")
      ->check(mib);
  cmd.add_option("--library-memory", flags.library_memory_mib,
                 "MiB the libraries' kernels (cuBLAS, cuDNN, Triton) take in the context "
                 "(default: 76, measured on an H100: cuBLAS 66 + cuDNN 10; assumed elsewhere)")
      ->check(mib);
  cmd.add_option("--nccl-memory", flags.nccl_memory_mib,
                 "MiB NCCL's buffers take (default: " + nccl_default + ")")
      ->check(mib);
}

}  // namespace vramscope::cli
