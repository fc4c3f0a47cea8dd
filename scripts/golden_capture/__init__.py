"""What the golden-capture scripts (scripts/capture_*.py) share; stdlib only at import (torch is
imported inside the functions that need it), so that listing cases works anywhere.

  common   the small pieces: the stage lines a child prints (@@stage), atomic and compact JSON,
           gzip with a fixed mtime, the repository's commit, package versions, the GPU and torch
           metadata, case selection by name or shell pattern
  driver   the parent side: a child process under a time-out (its whole session killed past it),
           the suites' driver (cases in fresh Pythons, --jobs at a time, one line per case, the
           logs of failures, metadata.json rewritten after every case), the common flags, the
           size of a suite's files and its budget
  measure  the child side with torch: phase hooks with PyTorch's counters and marks, the tensor
           inventory, the optimizer's description, the allocator history, the snapshot's dump,
           summary and gzip, the sidecar's shared fields
  hf       what capture_hf_goldens.py's child adds: the attention kernels, the compact counts
  modern   capture_modern_goldens.py's cases (compiled training, CUDA graphs, memory pools), the
           features of this torch and the per-pool bookkeeping

Each script keeps its suite, its child's flow and sidecar, and its own metadata keys; file formats
(format/version strings) are the scripts', unchanged by this package.
"""
