"""The tracer's constants, its one-line errors, and torch (None when it is not installed:
the command line still parses, and says how to install it)."""

from __future__ import annotations

import contextlib

from ..vocabulary import TRACER_PHASES

try:
    import torch
except ImportError:  # reported by main() as a one-line error
    torch = None

if torch is not None:
    from torch.utils._python_dispatch import TorchDispatchMode
else:  # lets the module import (and --help work) without torch
    TorchDispatchMode = object

PROG = "vramscope tracer"
FORMAT = "vramscope-tensor-stream"
VERSION = 1           # an eager trace
VERSION_COMPILED = 2  # --compile/--cuda-graphs: allocs may carry "graph", "node" and "pool"
VERSION_STREAMS = 3   # --world-size: allocs may also carry "stream"
# The CUDA stream allocations are made on now: 0 the default stream, else the number of one the
# traced code made (``torch.cuda.Stream`` under --world-size, distributed.py), set while its
# ``torch.cuda.stream(...)`` context is open. The caching allocator keeps each stream's blocks
# apart, so the allocator model must know.
CURRENT_CUDA_STREAM = [0]
DEVICE = "cuda"  # the device whose allocations are traced (faked)

# The phases the stream may carry: the tracer's spellings of src/model/vocabulary.h's table.
PHASES = tuple(TRACER_PHASES)
CATEGORIES = ("weight", "input", "gradient", "activation", "optimizer_state", "temporary")

# cuBLAS users: the C++ side inserts one workspace per thread at the first of these.
MATMUL_OPS = frozenset({
    "mm", "addmm", "_addmm_activation", "bmm", "baddbmm", "addbmm", "mv", "addmv", "dot", "vdot",
    "matmul", "linear", "_scaled_mm", "_int_mm",
})
# cuDNN convolutions: each call may take a workspace of its own.
CONV_OPS = frozenset({
    "convolution", "_convolution", "convolution_backward", "cudnn_convolution",
    "cudnn_convolution_transpose", "cudnn_convolution_relu", "cudnn_convolution_add_relu",
})

# name -> (torch.optim class, hyperparameters given explicitly), as examples/training/train.py.
OPTIMIZERS = {
    "sgd": ("SGD", {"lr": 0.01}),
    "momentum": ("SGD", {"lr": 0.01, "momentum": 0.9, "weight_decay": 5e-4}),  # train.py sgdm
    "adam": ("Adam", {"lr": 1e-3}),
    "adamw": ("AdamW", {"lr": 1e-4, "weight_decay": 0.01}),
}
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}

SDPA_CHOICES = ("auto", "cudnn", "flash", "efficient", "math")


class TracerError(Exception):
    """A bad input or an unsupported model: reported as one line and exit status 1."""

    def __init__(self, what: str, where: str, todo: str):
        super().__init__(what)
        self.what, self.where, self.todo = what, where, todo

    def line(self) -> str:
        return f"{PROG}: error: {self.what}, {self.where}, {self.todo}"


class DataDependentError(TracerError):
    """The step reads the values of a tensor that has none (a fake tensor)."""


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


@contextlib.contextmanager
def patched(patches):
    """Set attributes for the duration, restored in reverse order; each (object, name, value)."""
    saved = []
    try:
        for obj, name, value in patches:
            saved.append((obj, name, getattr(obj, name)))
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


def local_shard(t):
    """A DTensor's local shard (what this rank holds, and whose storage is the DTensor's), else
    the tensor itself."""
    local = getattr(t, "_local_tensor", None)
    return local if local is not None else t
