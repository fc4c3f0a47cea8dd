"""The capture bootstrap that ``vramscope run`` injects into every Python process it starts.

The contract is docs/design/capture.md. In short: inactive unless ``VRAMSCOPE_CAPTURE_DIR`` is set;
it never imports torch itself, but watches for the program's own ``import torch``; then it asks
PyTorch to call it when CUDA initializes (``torch.cuda._lazy_call``), turns on the allocator's
history, marks phases (forward, backward, optimizer, between), names parameters, gradients and
optimizer state, and writes ``<label>.pickle`` (the snapshot) and ``<label>.sidecar.json`` once:
after ``VRAMSCOPE_STEPS`` optimizer steps, at exit, on an uncaught exception (``oom`` for a CUDA
out-of-memory error) or on SIGTERM/SIGHUP. When pynvml (nvidia-ml-py) imports, it also samples
NVML at CUDA's start and at every phase boundary (the sidecar's "nvml").

Nothing here may raise into the user's program: a failure of the bootstrap prints one
``vramscope: ...`` line on stderr and disables it. Only the standard library is imported at
start-up, so a program that never imports torch runs as if the bootstrap were not there.

One module per job, all sharing one state (``state._state``):

- ``state``: that state, the small helpers every module uses, the sidecar's format;
- ``import_hook``: ``install()`` (what the injected sitecustomize calls) and the wait for torch;
- ``phases``: starting and stopping the recording, the phase boundaries and the hooks that mark
  them (modules' forwards, optimizers' steps, backward);
- ``naming``: naming parameters, buffers, gradients and optimizer state (the sidecar's "tensors");
- ``nvml``: NVML's samples (the sidecar's "nvml");
- ``oom``: the out-of-memory observer and PyTorch's out-of-memory message (the sidecar's "oom");
- ``writing``: the end: exit, exception and signal handlers, writing the snapshot and the sidecar.

The phase names and the bounds on what is kept are the one vocabulary's (``vramscope.vocabulary``,
src/model/vocabulary.h), which the sidecar's reader checks against too.
"""

from .import_hook import install

__all__ = ["install"]
