"""Predict the GPU memory of a training step without a GPU: run the step on fake CUDA tensors and
write the tensor-level allocation stream that ``vramscope predict`` reads.

    PYTHONPATH=python python3 -m vramscope.tracer --model hf:config.json --batch 8 --seq 512 \\
        --amp bf16 --optimizer adamw -o trace.jsonl
    PYTHONPATH=python python3 -m vramscope.tracer --model my_model.py:build --inputs make_batch ...

The contract (docs/design/tracer.md has it in full):

- Nothing real-sized is allocated. The model is built on the ``meta`` device, then every parameter
  and buffer is re-created as a ``FakeTensor`` on device ``cuda`` (``FakeTensorMode`` fakes CUDA
  tensors on a CPU-only machine), so the step follows CUDA's autocast policy and the CUDA kernels'
  outputs and saved tensors. ``scaled_dot_product_attention`` is routed to the fused kernel
  PyTorch picks on an sm90 GPU (``SdpaRouting``, ``choose_sdpa_backend``).
- Every new *storage* on the fake device (a view is not one) is an allocation; it is freed when its
  storage object is garbage collected (a weakref callback, as torch.distributed._tools.mem_tracker
  does), which CPython's reference counting makes the moment PyTorch would free it.
- The backward pass is run by this module's own executor (``BackwardExecutor``): PyTorch's C++
  autograd engine cannot run CUDA fake tensors without a GPU (torch 2.11 and later: its stream
  bookkeeping asks the CUDA driver about device 0). The executor follows the engine: ready nodes by
  highest sequence number, gradient buffers summed in place when the engine would, gradients stolen
  by ``AccumulateGrad`` when the engine would, saved tensors released as each node runs.
- Small tensors whose values follow from the batch alone (position ids, masks) carry real CPU
  values beside the fake ones (``ValueShadows``), so code that reads them runs as on a GPU; reading
  a value computed from a parameter is an error: tracing needs shape-static code.
- Output: JSON Lines, one header, then ``phase``/``alloc``/``free``/``set``/``matmul``/``conv``
  events in order, then ``end``. Written to a temporary file beside ``-o`` and renamed at the end.
- Every bad input is one line on stderr, ``vramscope tracer: error: <what>, <where>, <what to do>``,
  and exit status 1.

Private PyTorch APIs relied upon (each listed in docs/design/tracer.md with what breaks without
it): ``torch._subclasses.fake_tensor``, ``torch.utils._python_dispatch`` (``TorchDispatchMode``,
``_disable_current_modes``), ``torch._C._autograd._get_sequence_nr``,
``torch._C._storage_Use_Count``, ``Tensor._use_count``, ``Node._input_metadata``,
``torch._prims_common``, and, replaced for the duration of the trace:
``torch._C._current_graph_task_id``, ``torch.cuda.amp.common.amp_definitely_not_available``,
``torch.cuda.is_bf16_supported``, transformers' ``utils.import_utils.is_fake_tensor``.
"""

from __future__ import annotations

import argparse
import contextlib
import fnmatch
import functools
import heapq
import importlib.util
import itertools
import json
import math
import os
import shutil
import sys
import tempfile
import traceback
import warnings
import weakref
from collections import defaultdict
from dataclasses import dataclass, field

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
VERSION = 1
DEVICE = "cuda"  # the device whose allocations are traced (faked)

PHASES = ("setup", "zero_grad", "inputs", "forward", "backward", "optimizer", "step_end")
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


# ------------------------------------------------------------------------------------------ errors


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


# ------------------------------------------------------------------------------------ command line


@dataclass
class Setup:
    model: str
    output: str
    inputs: str | None = None
    batch: int = 1
    seq: int = 512
    image_size: int | None = None
    dtype: str = "fp32"
    amp: str = "none"
    optimizer: str = "adamw"
    optimizer_impl: str = "foreach"
    zero_grad: str = "set-to-none"
    steps: int = 3
    grad_accum: int = 1
    checkpointing: bool = False
    lora: int | None = None
    freeze: list = field(default_factory=list)
    sdpa: str = "auto"

    def as_header(self) -> dict:
        d = dict(self.__dict__)
        d.pop("output")
        return d


class _ArgumentParser(argparse.ArgumentParser):
    def error(self, message):  # argparse's own exit status is 2 and a usage block; ours is one line
        raise TracerError(f"bad arguments: {message}", "the command line",
                          "see `python3 -m vramscope.tracer --help`")


def parse_args(argv=None) -> Setup:
    p = _ArgumentParser(prog="python3 -m vramscope.tracer",
                        description="Trace one training step's GPU allocations on fake CUDA "
                                    "tensors (no GPU needed) for `vramscope predict`.")
    p.add_argument("--model", required=True,
                   help="FILE.py:FUNCTION (returns an nn.Module) or hf:CONFIG.json (transformers)")
    p.add_argument("--inputs", metavar="FUNCTION",
                   help="function in the model file returning one CPU batch "
                        "(default: vramscope_inputs(batch_size, seq_len, image_size))")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=512, help="tokens per sample")
    p.add_argument("--image-size", type=int, default=None,
                   help="image side for vision models (default: the config's, else 224)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32", help="parameter dtype")
    p.add_argument("--amp", choices=("none", "bf16", "fp16"), default="none",
                   help="torch.autocast on CUDA for forward and loss (fp16 adds a GradScaler)")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS) + ["none"], default="adamw")
    impl = p.add_mutually_exclusive_group()
    impl.add_argument("--foreach", dest="optimizer_impl", action="store_const", const="foreach",
                      help="foreach optimizer kernels (PyTorch's default on CUDA; the default)")
    impl.add_argument("--fused", dest="optimizer_impl", action="store_const", const="fused")
    impl.add_argument("--for-loop", dest="optimizer_impl", action="store_const", const="for-loop")
    p.set_defaults(optimizer_impl="foreach")
    p.add_argument("--zero-grad", choices=("none", "set-to-none", "zero"), default="set-to-none")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--grad-accum", type=int, default=1, metavar="N",
                   help="micro-batches per optimizer step (forward+backward each)")
    p.add_argument("--checkpointing", action="store_true",
                   help="gradient checkpointing (transformers models: "
                        "gradient_checkpointing_enable())")
    p.add_argument("--lora", type=int, metavar="R", help="peft LoRA adapters of rank R")
    p.add_argument("--freeze", action="append", default=[], metavar="PATTERN",
                   help="requires_grad=False for parameters whose name matches this glob "
                        "(repeatable)")
    p.add_argument("--sdpa", choices=SDPA_CHOICES, default="auto",
                   help="scaled_dot_product_attention kernel (auto: what PyTorch picks on sm90)")
    p.add_argument("-o", "--output", required=True, help="the stream to write (JSON Lines)")
    a = p.parse_args(argv)
    for name in ("batch", "seq", "steps", "grad_accum"):
        if getattr(a, name) < 1:
            raise TracerError(f"--{name.replace('_', '-')} must be at least 1",
                              "the command line", "pass a positive number")
    if a.image_size is not None and a.image_size < 1:
        raise TracerError("--image-size must be at least 1", "the command line",
                          "pass a positive number")
    if a.lora is not None and a.lora < 1:
        raise TracerError("--lora must be at least 1", "the command line", "pass the LoRA rank")
    return Setup(model=a.model, output=a.output, inputs=a.inputs, batch=a.batch, seq=a.seq,
                 image_size=a.image_size, dtype=a.dtype, amp=a.amp, optimizer=a.optimizer,
                 optimizer_impl=a.optimizer_impl, zero_grad=a.zero_grad, steps=a.steps,
                 grad_accum=a.grad_accum, checkpointing=a.checkpointing, lora=a.lora,
                 freeze=list(a.freeze), sdpa=a.sdpa)


# ------------------------------------------------------------------------------------ event stream


class EventWriter:
    """Events, in order, to a file. The last event is held back so that relabelling the allocation
    just made (a parameter, an optimizer state) folds into its alloc line instead of a ``set``."""

    def __init__(self, path: str):
        self._file = open(path, "w", encoding="utf-8")
        self._held: dict | None = None
        self.allocs = 0
        self.frees = 0
        self.closed = False

    def _write(self, event: dict) -> None:
        self._file.write(json.dumps(event) + "\n")

    def emit(self, event: dict) -> None:
        if self.closed:
            return
        if self._held is not None:
            self._write(self._held)
        self._held = event
        if event["ev"] == "alloc":
            self.allocs += 1
        elif event["ev"] == "free":
            self.frees += 1

    def relabel(self, alloc_id: int, category: str, name: str) -> None:
        held = self._held
        if held is not None and held["ev"] == "alloc" and held["id"] == alloc_id:
            held["category"], held["name"] = category, name
            return
        self.emit({"ev": "set", "id": alloc_id, "category": category, "name": name})

    def close(self) -> None:
        if self.closed:
            return
        if self._held is not None:
            self._write(self._held)
            self._held = None
        self._write({"ev": "end", "allocs": self.allocs, "frees": self.frees,
                     "live_at_end": self.allocs - self.frees})
        self.closed = True
        self._file.close()

    def abandon(self) -> None:
        self.closed = True
        self._file.close()


# -------------------------------------------------------------------------------- storage tracking


class _Storage:
    __slots__ = ("id", "nbytes", "category", "name", "op")

    def __init__(self, alloc_id, nbytes, category, name, op):
        self.id, self.nbytes, self.category, self.name, self.op = (
            alloc_id, nbytes, category, name, op)


def _tensors_in(value):
    """The tensors of an op's result (a tensor, or tuples and lists of them, nested)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors_in(v)


def _op_name(func) -> str:
    schema = getattr(func, "_schema", None)
    return schema.name if schema is not None else str(func)


def _sequence_nr_fn():
    """The autograd sequence counter of this thread (what the next node's sequence number will
    be): lets module scopes and saved tensors be matched to autograd nodes."""
    return getattr(getattr(torch._C, "_autograd", None), "_get_sequence_nr", None)


class ModuleScope:
    """The module whose forward is running: global forward pre/post hooks keep a stack, and each
    module call's range of autograd sequence numbers is remembered so that the backward executor
    can attribute a node to the innermost module whose forward created it."""

    def __init__(self, model):
        # the model itself is named by its class ("" would read as "outside the model")
        self.root = type(model).__name__
        self.names = {id(m): name or self.root for name, m in model.named_modules()}
        self.stack: list[tuple[int, str, int | None]] = []
        self.seq_module: dict[int, str] = {}
        self._seq = _sequence_nr_fn()
        hooks = torch.nn.modules.module
        self._handles = [hooks.register_module_forward_pre_hook(self._pre),
                         hooks.register_module_forward_hook(self._post)]

    def _path(self, module) -> str:
        path = self.names.get(id(module))
        if path is None:  # not part of the model (a loss module, say): name it by its class
            parent = self.stack[-1][1] if self.stack else ""
            return f"{parent}.{type(module).__name__}" if parent else type(module).__name__
        return path

    def _pre(self, module, args):
        self.stack.append((id(module), self._path(module), self._seq() if self._seq else None))

    def _post(self, module, args, output):
        while self.stack:  # an exception may have skipped the post hooks of inner modules
            mid, path, start = self.stack.pop()
            if start is not None:
                for s in range(start, self._seq()):
                    self.seq_module.setdefault(s, path)  # inner modules finish first: they win
            if mid == id(module):
                break

    @property
    def current(self) -> str | None:
        return self.stack[-1][1] if self.stack else None

    def module_of_param(self, param_name: str) -> str:
        return param_name.rpartition(".")[0] or self.root

    def module_of_node(self, node) -> str | None:
        return self.seq_module.get(node._sequence_nr())

    def forget_nodes(self) -> None:
        self.seq_module.clear()

    def close(self) -> None:
        for h in self._handles:
            h.remove()


def _storage_key(t) -> int | None:
    try:
        return id(t.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return None


class ValueShadows:
    """Real CPU values for the small tensors whose values follow from the batch and from factory
    functions alone (position ids, causal-mask bookkeeping, label masks), computed op by op beside
    the fake ones, so that code reading them (``.item()``, ``bool()``, ``nonzero``, boolean-mask
    indexing) runs as it would on a GPU. Anything computed from a parameter has no shadow: reading
    its values stays an error, as it must."""

    LIMIT = 1 << 20  # elements: shadows are for index-like tensors, never activations

    def __init__(self):
        from torch.utils.weak import WeakTensorKeyDictionary
        self._values = WeakTensorKeyDictionary()      # fake -> (real, fake._version when set)
        self._by_storage: dict[int, dict] = {}         # storage -> {id: weakref to fake}
        self._written: dict = {}

    def get(self, t):
        entry = self._values.get(t)
        if entry is None or entry[1] != t._version:
            return None
        return entry[0]

    def set(self, t, real) -> None:
        if real.numel() > self.LIMIT:
            return
        self._values[t] = (real, t._version)
        key = _storage_key(t)
        if key is not None:
            self._by_storage.setdefault(key, {})[id(t)] = weakref.ref(t)

    def _aliases(self, t):
        key = _storage_key(t)
        refs = self._by_storage.get(key) if key is not None else None
        if not refs:
            return
        for ident, ref in list(refs.items()):
            alias = ref()
            if alias is None:
                del refs[ident]  # a dead view; its storage's id may be reused only once all die
            else:
                yield alias
        if not refs:
            del self._by_storage[key]

    def _after_write(self, t, shadowed: bool) -> None:
        """``t`` was written in place: its aliases' shadows were written too (``shadowed``), or
        are stale now. The version counter (shared by all views of a storage) is bumped by the
        ADInplaceOrView kernel after this dispatch returns: hence the + 1."""
        for alias in self._aliases(t):
            entry = self._values.get(alias)
            if entry is None:
                continue
            if shadowed:
                self._values[alias] = (entry[0], alias._version + 1)
            else:
                del self._values[alias]

    def _written_args(self, func, args, kwargs) -> list:
        positions = self._written.get(func)
        if positions is None:
            schema = getattr(func, "_schema", None)
            positions = [(i, a.name) for i, a in enumerate(schema.arguments)
                         if a.alias_info is not None and a.alias_info.is_write] if schema else []
            self._written[func] = positions
        out = []
        for i, name in positions:
            value = args[i] if i < len(args) else kwargs.get(name)
            out.extend(_tensors_in(value))
        return out

    def _run_real(self, func, args, kwargs):
        from torch.utils._pytree import tree_map

        def real(x):
            if isinstance(x, torch.Tensor):
                return self.get(x)
            if isinstance(x, torch.device) and x.type != "cpu":
                return torch.device("cpu")
            return x
        rargs, rkwargs = tree_map(real, args), tree_map(real, kwargs)
        if "device" in rkwargs:
            rkwargs["device"] = torch.device("cpu")
        with _all_modes_off():
            return func(*rargs, **rkwargs)

    def _all_shadowed(self, args, kwargs) -> bool:
        from torch.utils._pytree import tree_leaves
        for x in tree_leaves((args, kwargs)):
            if isinstance(x, torch.Tensor) and self.get(x) is None:
                return False
        return True

    def propagate(self, func, args, kwargs, out) -> None:
        """After an op ran on fake tensors: run it on the shadows too, when all its inputs have
        one and its outputs are small."""
        written = self._written_args(func, args, kwargs)
        outs = list(_tensors_in(out))
        if not outs and not written:
            return
        ok = all(o.numel() <= self.LIMIT for o in outs) and self._all_shadowed(args, kwargs)
        real_out = None
        if ok:
            try:
                real_out = self._run_real(func, args, kwargs)
            except Exception:
                ok = False
        for w in written:
            self._after_write(w, ok)
        if not ok:
            return
        written_ids = {id(w) for w in written}
        for fake, real in zip(outs, _tensors_in(real_out)):
            if id(fake) not in written_ids:
                self.set(fake, real)

    def answer(self, func, args, kwargs, device):
        """A value-dependent op fake tensors refused: computed on the shadows, with fake tensors
        of the right shapes for tensor results. Returns (answered, result)."""
        if not self._all_shadowed(args, kwargs):
            return False, None
        try:
            real = self._run_real(func, args, kwargs)
        except Exception:
            return False, None

        def fake_of(r):
            if not isinstance(r, torch.Tensor):
                return r
            fake = torch.empty_strided(tuple(r.shape), tuple(r.stride()), dtype=r.dtype,
                                       device=device)
            self.set(fake, r)
            return fake
        if isinstance(real, (tuple, list)):
            return True, type(real)(fake_of(r) for r in real)
        return True, fake_of(real)

    def integer_indices(self, func, args, make_index):
        """Boolean-mask indexing with a shadowed mask becomes indexing with the mask's nonzero
        positions (what the CUDA kernel computes first), so that the result's shape is known."""
        if func not in _index_ops() or len(args) < 2 or not isinstance(args[1], (tuple, list)):
            return args
        indices = args[1]
        if not any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
                   for i in indices):
            return args
        new = []
        for index in indices:
            if isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8):
                real = self.get(index)
                if real is None:
                    return args
                with _all_modes_off():
                    columns = [c.contiguous() for c in real.nonzero().unbind(1)]
                new.extend(make_index(c, index.device) for c in columns)
            else:
                new.append(index)
        return (args[0], new, *args[2:])


@functools.lru_cache(maxsize=None)
def _index_ops():
    aten = torch.ops.aten
    return frozenset({aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                      aten._index_put_impl_.default})


def _all_modes_off():
    try:
        from torch.utils._python_dispatch import _disable_current_modes
        return _disable_current_modes()
    except ImportError:
        return torch._C._DisableTorchDispatch()


class StorageTracker(TorchDispatchMode):
    """Sees every aten op (below autograd, above the fake kernels) and turns each new storage on the
    fake device into an ``alloc`` event, and its garbage collection into a ``free``."""

    def __init__(self, writer: EventWriter):
        super().__init__()
        self.writer = writer
        self.recording = True
        self.live: dict[int, _Storage] = {}      # id(UntypedStorage) -> record
        self._weakrefs: dict[int, weakref.ref] = {}
        self._next_id = 1
        self._labels: list[tuple[str, str, str | None]] = []
        self._op_names: dict = {}
        self.scope: ModuleScope | None = None
        self.thread = "forward"                  # "backward" inside the autograd executor
        self.backward_module: str | None = None  # module of the node being executed
        self._matmul_threads: set[str] = set()   # threads with a matmul marker in this phase
        self.step, self.phase = 0, None
        self.current_bytes = 0
        self.peak_bytes, self.peak_at = 0, None
        self.failure: tuple | None = None        # (op, module, step, phase) of the first failure
        self.shadows = ValueShadows()

    # -- context
    def set_phase(self, step: int, phase: str) -> None:
        self.step, self.phase = step, phase
        self._matmul_threads.clear()
        self.writer.emit({"ev": "phase", "step": step, "phase": phase})

    @contextlib.contextmanager
    def label(self, category: str, name: str, module: str | None = None):
        """Allocations made inside get this category and name (and module, if given)."""
        self._labels.append((category, name, module))
        try:
            yield
        finally:
            self._labels.pop()

    def current_module(self) -> str:
        if self._labels and self._labels[-1][2] is not None:
            return self._labels[-1][2]
        if self.scope is not None and self.scope.current is not None:
            return self.scope.current
        if self.thread == "backward":
            return self.backward_module or "backward"
        return ""

    # -- dispatch
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torch._subclasses.fake_tensor import (DataDependentOutputException,
                                                   DynamicOutputShapeException)
        kwargs = kwargs or {}
        args = self.shadows.integer_indices(func, args, self._index_tensor)
        try:
            out = func(*args, **kwargs)
        except (DataDependentOutputException, DynamicOutputShapeException):
            device = next((t.device for t in _tensors_in(list(args))), torch.device(DEVICE))
            answered, out = self.shadows.answer(func, args, kwargs, device)
            if not answered:
                self._note_failure(func)
                raise
        except Exception:
            self._note_failure(func)
            raise
        if self.recording:
            self._record(func, out)
        if self.phase != "setup":  # parameters and buffers must never have values
            self.shadows.propagate(func, args, kwargs, out)
        return out

    def _note_failure(self, func) -> None:
        if self.failure is None:
            self.failure = (func, self.current_module(), self.step, self.phase)

    def _index_tensor(self, real, device):
        """A fake int64 index tensor for a mask's nonzero positions (a real allocation on CUDA)."""
        fake = torch.empty(tuple(real.shape), dtype=real.dtype, device=device)
        if self.recording and fake.device.type == DEVICE:
            self.track(fake, "aten::nonzero")
        self.shadows.set(fake, real)
        return fake

    def _record(self, func, out) -> None:
        op = self._op_names.get(func)
        if op is None:
            op = self._op_names[func] = _op_name(func)
        for t in _tensors_in(out):
            if t.device.type == DEVICE:
                self.track(t, op)
        packet = getattr(getattr(func, "_overloadpacket", None), "__name__", "")
        if packet in MATMUL_OPS and self.thread not in self._matmul_threads:
            # thinned: the first per thread per phase (cuBLAS keeps its workspace per thread)
            self._matmul_threads.add(self.thread)
            self.writer.emit({"ev": "matmul", "thread": self.thread})
        elif packet in CONV_OPS:
            self.writer.emit({"ev": "conv", "thread": self.thread})

    def track(self, t, op: str) -> None:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # no storage (sparse, nested): not traced
            return
        key = id(st)
        nbytes = st.nbytes()
        rec = self.live.get(key)
        if rec is not None:
            if rec.nbytes != nbytes:  # resized in place: the allocator frees and allocates
                self._emit_free(rec)
                if nbytes > 0:
                    self.live[key] = self._emit_alloc(nbytes, rec.category, rec.name, op)
                else:
                    del self.live[key]
            return
        if nbytes == 0:
            return
        category, name = self._labels[-1][:2] if self._labels else ("temporary", "")
        self.live[key] = self._emit_alloc(nbytes, category, name, op)
        if key not in self._weakrefs:
            self._weakrefs[key] = weakref.ref(st, functools.partial(self._on_collect, key))

    def _emit_alloc(self, nbytes, category, name, op) -> _Storage:
        rec = _Storage(self._next_id, nbytes, category, name, op)
        self._next_id += 1
        self.current_bytes += nbytes
        if self.current_bytes > self.peak_bytes:
            self.peak_bytes, self.peak_at = self.current_bytes, (self.step, self.phase)
        self.writer.emit({"ev": "alloc", "id": rec.id, "bytes": nbytes, "category": category,
                          "name": name, "op": op, "module": self.current_module()})
        return rec

    def _emit_free(self, rec: _Storage) -> None:
        self.current_bytes -= rec.nbytes
        self.writer.emit({"ev": "free", "id": rec.id})

    def _on_collect(self, key, _ref) -> None:
        self._weakrefs.pop(key, None)
        rec = self.live.pop(key, None)
        if rec is not None and self.recording:
            self._emit_free(rec)

    # -- labels
    def record_of(self, t) -> _Storage | None:
        if not isinstance(t, torch.Tensor) or t.device.type != DEVICE:
            return None
        try:
            return self.live.get(id(t.untyped_storage()))
        except (RuntimeError, NotImplementedError):
            return None

    def relabel(self, t, category: str, name: str, only_from: tuple | None = None) -> None:
        rec = self.record_of(t)
        if rec is None or (only_from is not None and rec.category not in only_from):
            return
        if (rec.category, rec.name) != (category, name):
            rec.category, rec.name = category, name
            self.writer.relabel(rec.id, category, name)


# ---------------------------------------------------------------------------------- saved tensors


class _Saved:
    """What a ``saved_tensors_hooks`` pack hook returns: holds the saved tensor until the tracer
    releases it (the engine's ``release_variables``)."""
    __slots__ = ("tensor", "__weakref__")

    def __init__(self, tensor):
        self.tensor = tensor


class SavedTensors:
    """Pack/unpack hooks for every tensor saved for backward: labels its storage ``activation``,
    and lets the executor release a node's saved tensors once the node has run.

    A node's tensors are saved while the node is being created, when the thread's autograd
    sequence counter stands at the node's sequence number + 1; that is how they are matched."""

    def __init__(self, tracker: StorageTracker):
        self.tracker = tracker
        self._seq = _sequence_nr_fn()
        self._by_seq: dict = defaultdict(list)   # counter at pack time -> weakrefs to _Saved
        self._unpacked: list[list] = []           # fallback without sequence numbers

    def pack(self, t):
        rec = self.tracker.record_of(t)
        if rec is not None and rec.category == "temporary":
            saver = self.tracker.current_module()
            self.tracker.relabel(t, "activation", f"{saver}:{rec.op}" if saver else rec.op)
        # detached: a saved *output* held by its own node would otherwise make a reference cycle
        holder = _Saved(t.detach())
        key = self._seq() if self._seq is not None else None
        self._by_seq[key].append(weakref.ref(holder))
        return holder

    def unpack(self, holder):
        if holder.tensor is None:
            raise RuntimeError("vramscope tracer: a saved tensor was used after its node had run "
                               "(retain_graph / double backward are not supported)")
        if self._unpacked:
            self._unpacked[-1].append(holder)
        return holder.tensor

    def hooks(self):
        return torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)

    @contextlib.contextmanager
    def running(self, node):
        """Around a node's apply: afterwards its saved tensors are released, as the engine does."""
        self._unpacked.append([])
        try:
            yield
        finally:
            used = self._unpacked.pop()
            if self._seq is not None:
                self._release(self._by_seq.pop(node._sequence_nr() + 1, ()))
            else:
                for holder in used:
                    holder.tensor = None

    def release_range(self, low: int, high: int) -> None:
        """At the end of a backward: what nodes of this graph saved and did not unpack."""
        for key in [k for k in self._by_seq if k is not None and low <= k <= high + 1]:
            self._release(self._by_seq.pop(key))

    @staticmethod
    def _release(refs) -> None:
        for ref in refs:
            holder = ref()
            if holder is not None:
                holder.tensor = None


# ----------------------------------------------------------------------------- backward executor


def _is_non_overlapping_and_dense(t) -> bool:
    try:
        from torch._prims_common import is_non_overlapping_and_dense_or_false
        return bool(is_non_overlapping_and_dense_or_false(t))
    except ImportError:
        return t.is_contiguous()


def _obeys_layout_contract(grad, var) -> bool:
    """The engine's ``utils::obeys_layout_contract``: may the parameter keep this gradient?"""
    if _is_non_overlapping_and_dense(var):
        for size, gs, vs in zip(grad.shape, grad.stride(), var.stride()):
            if size != 1:
                if gs != vs:
                    return False
            elif gs == 0 or vs == 0:
                return False
        return True
    return grad.is_contiguous()


def _clone_obey_contract(grad, var):
    if _is_non_overlapping_and_dense(var):
        return torch.empty_strided(var.shape, var.stride(), dtype=grad.dtype,
                                   device=grad.device).copy_(grad)
    return grad.clone(memory_format=torch.contiguous_format)


class BackwardExecutor:
    """``loss.backward()`` for fake CUDA tensors, in Python, after torch/csrc/autograd/engine.cpp:

    - dependencies counted from the roots; a node runs when all its inputs have arrived, the ready
      node with the highest sequence number first (AccumulateGrad has the highest possible);
    - gradient arriving twice at one input: summed in place into the buffered one when only the
      engine holds it and its storage (``InputBuffer::accumulate``), else out of place;
    - a node's inputs are released when it returns; its outputs are checked against the next
      nodes' input metadata (summed to shape, cast to dtype: ``validate_outputs``); then its saved
      tensors are released (``release_variables``; no ``retain_graph``);
    - ``AccumulateGrad``: the first gradient is stolen when nothing else holds it and its strides
      match the parameter's, else copied in the parameter's layout; later ones are added in place.

    Reuse is decided as the engine decides it for real tensors in a normal run (the C++ engine
    itself never reuses a fake tensor, nor any tensor under a Python dispatch mode).

    Module backward hooks and hooks registered on non-leaf tensors are not run (the engine keeps
    them in C++ where Python cannot read them); leaf tensor hooks and post-accumulate-grad hooks
    are."""

    def __init__(self, tracker: StorageTracker, saved: SavedTensors, param_names: dict):
        self.tracker = tracker
        self.saved = saved
        self.param_names = param_names          # id(parameter) -> qualified name
        self._graph_ids = itertools.count(1)
        self._graph_id = -1
        self._storage_baseline = None           # storage use count of a tensor nothing shares

    # what torch._C._current_graph_task_id answers during the trace (torch.utils.checkpoint keys
    # its recomputation by it)
    def current_graph_task_id(self) -> int:
        return self._graph_id

    def grad_unsupported(self, *args, **kwargs):
        raise TracerError("the traced code calls torch.autograd.grad",
                          f"step {self.tracker.step} {self.tracker.phase}",
                          "the tracer runs loss.backward() only; trace a step without "
                          "autograd.grad")

    def backward(self, tensors, grad_tensors=None, retain_graph=None, create_graph=False,
                 grad_variables=None, inputs=None):
        """Replaces torch.autograd.backward (and so Tensor.backward) during the trace."""
        if create_graph or inputs is not None:
            raise TracerError("backward(create_graph=True) or backward(inputs=...) is called",
                              f"step {self.tracker.step} {self.tracker.phase}",
                              "trace a plain loss.backward()")
        if grad_tensors is None:
            grad_tensors = grad_variables
        tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
        if grad_tensors is None:
            grads = [None] * len(tensors)
        elif isinstance(grad_tensors, torch.Tensor):
            grads = [grad_tensors]
        else:
            grads = list(grad_tensors)
        roots = []
        for i, (t, g) in enumerate(zip(tensors, grads)):
            if not t.requires_grad:
                raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                                   "have a grad_fn")
            if g is None:
                if t.numel() != 1:
                    raise RuntimeError("grad can be implicitly created only for scalar outputs")
                g = torch.ones_like(t, memory_format=torch.preserve_format)
            if t.grad_fn is not None:
                edge = (t.grad_fn, t.output_nr)
            else:  # a leaf: its AccumulateGrad node
                edge = (t.view_as(t).grad_fn.next_functions[0][0], 0)
            roots.append((edge, g))
        # torch.autograd.backward's frame holds the root gradients until the engine returns
        root_grads = [g for _, g in roots]
        self._run(roots, keep_graph=bool(retain_graph))
        del root_grads

    # -- the engine
    def _run(self, roots: list, keep_graph: bool) -> None:
        tracker = self.tracker
        saved_state = (self._graph_id, tracker.thread, tracker.backward_module)
        self._graph_id = next(self._graph_ids)
        tracker.thread = "backward"
        self._metadata: dict = {}
        low, high = None, None
        try:
            with torch.no_grad():
                deps = self._dependencies([fn for (fn, _), _ in roots])
                buffers: dict = {}
                heap: list = []
                order = itertools.count()
                while roots:
                    (fn, nr), g = roots.pop(0)
                    self._add(buffers, fn, nr, g)
                    del g
                    deps[fn] -= 1
                    if deps[fn] == 0:
                        heapq.heappush(heap, (-fn._sequence_nr(), next(order), fn))
                while heap:
                    _, _, fn = heapq.heappop(heap)
                    inputs = buffers.pop(fn)
                    seq = fn._sequence_nr()
                    if type(fn).__name__ != "AccumulateGrad":
                        low = seq if low is None else min(low, seq)
                        high = seq if high is None else max(high, seq)
                    edges = fn.next_functions
                    # call_function: the node, then validate_outputs; then release_variables
                    with (contextlib.nullcontext() if keep_graph else self.saved.running(fn)):
                        outputs = self._call(fn, inputs)
                        del inputs
                        for i, (nxt, nr) in enumerate(edges):
                            if i < len(outputs) and outputs[i] is not None and nxt is not None:
                                outputs[i] = self._validate(outputs[i], nxt, nr)
                    for i, (nxt, nr) in enumerate(edges):
                        g = outputs[i] if i < len(outputs) else None
                        if i < len(outputs):
                            outputs[i] = None
                        if nxt is None:
                            continue
                        self._add(buffers, nxt, nr, g)
                        g = None
                        deps[nxt] -= 1
                        if deps[nxt] == 0:
                            heapq.heappush(heap, (-nxt._sequence_nr(), next(order), nxt))
                    del outputs, fn
        finally:
            self._graph_id, tracker.thread, tracker.backward_module = saved_state
            self._metadata = {}
        if not keep_graph and low is not None:
            self.saved.release_range(low, high)

    @staticmethod
    def _dependencies(root_fns) -> dict:
        deps: dict = defaultdict(int)
        seen = set()
        stack = []
        for fn in root_fns:
            deps[fn] += 1
            if fn not in seen:
                seen.add(fn)
                stack.append(fn)
        while stack:
            fn = stack.pop()
            for nxt, _ in fn.next_functions:
                if nxt is None:
                    continue
                deps[nxt] += 1
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return deps

    def _input_metadata(self, fn) -> list:
        md = self._metadata.get(fn)
        if md is None:
            try:
                md = [(tuple(m.shape), m.dtype) for m in fn._input_metadata]
            except AttributeError as e:
                raise TracerError("this PyTorch has no Node._input_metadata",
                                  f"torch {torch.__version__}",
                                  "use torch 2.3 or newer") from e
            self._metadata[fn] = md
        return md

    def _validate(self, g, fn, nr):
        """The engine's ``validate_outputs``: shape reduced to, and dtype cast to, what ``fn``
        expects at input ``nr``."""
        shape, dtype = self._input_metadata(fn)[nr]
        if tuple(g.shape) != shape:
            g = g.sum_to_size(shape)
        if g.dtype != dtype:
            g = g.to(dtype)
        return g

    def _storage_use_baseline(self, t) -> int:
        if self._storage_baseline is None:
            recording, self.tracker.recording = self.tracker.recording, False
            try:  # a probe made like every other tensor of the trace, but not part of it
                probe = torch.empty(1, dtype=t.dtype, device=t.device)
                self._storage_baseline = torch._C._storage_Use_Count(
                    probe.untyped_storage()._cdata)
                del probe
            finally:
                self.tracker.recording = recording
        return self._storage_baseline

    def _sole_owner(self, t, python_refs: int, check_storage: bool) -> bool:
        """Does only the engine hold ``t``? ``python_refs``: the references the caller knows of
        (sys.getrefcount counts this function's own two in addition)."""
        if sys.getrefcount(t) - 2 > python_refs:
            return False
        use_count = getattr(t, "_use_count", None)
        if use_count is not None and use_count() != 1:
            return False
        if check_storage:
            if not _is_non_overlapping_and_dense(t):
                return False
            counter = getattr(torch._C, "_storage_Use_Count", None)
            if counter is not None and counter(t.untyped_storage()._cdata) != \
                    self._storage_use_baseline(t):
                return False
        return True

    def _add(self, buffers: dict, fn, nr: int, g) -> None:
        """``InputBuffer::add``: put gradient ``g`` at input ``nr`` of ``fn``."""
        buf = buffers.get(fn)
        if buf is None:
            buf = buffers[fn] = [None] * len(self._input_metadata(fn))
        if g is None:
            return
        old = buf[nr]
        if old is None:
            buf[nr] = g
            return
        buf[nr] = None
        if self._sole_owner(old, 1, True):  # (dense tensors: only the buffered one is reused)
            old.add_(g)
            buf[nr] = old
        else:
            buf[nr] = old + g

    def _call(self, fn, inputs: list) -> list:
        tracker = self.tracker
        if type(fn).__name__ == "AccumulateGrad":
            self._accumulate(fn, inputs)
            return []
        scope = tracker.scope
        tracker.backward_module = (scope.module_of_node(fn) if scope is not None else None)
        if hasattr(fn, "_forward_cls"):  # a torch.autograd.Function's node
            return self._call_python_node(fn, inputs)
        out = fn(*inputs)
        inputs.clear()
        if isinstance(out, torch.Tensor):
            return [out]
        return list(out) if out is not None else []

    def _call_python_node(self, fn, inputs: list) -> list:
        """What PyNode::apply does around ``backward``: undefined gradients become zeros, and the
        results for the forward's arguments are matched to the node's edges (the j-th argument
        that needs a gradient goes to the j-th defined edge)."""
        metadata = self._input_metadata(fn)
        grads = []
        for i, g in enumerate(inputs):
            if g is None and getattr(fn, "materialize_grads", True) is not False:
                shape, dtype = metadata[i]
                g = torch.zeros(shape, dtype=dtype, device=DEVICE)
            grads.append(g)
        inputs.clear()
        out = fn.apply(*grads)
        del grads
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        edges = fn.next_functions
        result = [None] * len(edges)
        edge_slots = [i for i, (n, _) in enumerate(edges) if n is not None]
        arg_slots = [i for i, needed in enumerate(fn.needs_input_grad) if needed]
        for arg, edge in zip(arg_slots, edge_slots):
            if arg < len(out):
                result[edge] = out[arg]
        return result

    def _accumulate(self, fn, inputs: list) -> None:
        var = fn.variable
        g = inputs[0] if inputs else None
        inputs.clear()
        if g is None:
            return
        name = self.param_names.get(id(var))
        scope = self.tracker.scope
        self.tracker.backward_module = (scope.module_of_param(name) if (name and scope is not None)
                                        else "backward")
        for hook in (getattr(var, "_backward_hooks", None) or {}).values():
            result = hook(g)
            if result is not None:
                g = result
        if var.grad is None:
            if self._sole_owner(g, 1, False) and _obeys_layout_contract(g, var):
                new = g.detach()  # stolen: no copy
            else:
                new = _clone_obey_contract(g, var)
            g = None
            var.grad = new
            del new
        else:
            var.grad.add_(g)
            g = None
        if name is not None:
            self.tracker.relabel(var.grad, "gradient", f"{name}.grad")
        for hook in (getattr(var, "_post_accumulate_grad_hooks", None) or {}).values():
            hook(var)


# ------------------------------------------------------------------------------ attention (SDPA)


def _torch_version() -> tuple:
    parts = torch.__version__.split("+")[0].split(".")
    out = []
    for p in parts[:2]:
        digits = "".join(itertools.takewhile(str.isdigit, p))
        out.append(int(digits) if digits else 0)
    return tuple(out)


def choose_sdpa_backend(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa) -> str:
    """The kernel ``F.scaled_dot_product_attention`` runs on an sm90 GPU (H100/H200), after
    aten/src/ATen/native/transformers/cuda/sdp_utils.cpp: priority cuDNN, flash, efficient, math
    from torch 2.9 (cuDNN first on sm90), flash, efficient, math, cuDNN before; each kernel taken
    only when its constraints hold (the ones that matter for training shapes are checked) and it
    is not switched off (``torch.backends.cuda.*_sdp_enabled``)."""
    backends = torch.backends.cuda
    if not all(t.dim() == 4 for t in (q, k, v)) or not (q.dtype == k.dtype == v.dtype):
        return "math"
    half = q.dtype in (torch.float16, torch.bfloat16)
    d, dv = q.size(-1), v.size(-1)
    same_heads = q.size(1) == k.size(1) == v.size(1)
    gqa_heads = enable_gqa and k.size(1) == v.size(1) and q.size(1) % k.size(1) == 0
    causal_square = not is_causal or q.size(-2) == k.size(-2)
    ok = {
        "cudnn": (backends.cudnn_sdp_enabled() if hasattr(backends, "cudnn_sdp_enabled")
                  else False) and half and d == k.size(-1) == dv and d % 8 == 0 and d <= 128
                 and same_heads and attn_mask is None and causal_square,
        "flash": backends.flash_sdp_enabled() and half and d == k.size(-1) == dv and d <= 256
                 and (same_heads or gqa_heads) and attn_mask is None and causal_square,
        "efficient": backends.mem_efficient_sdp_enabled()
                     and q.dtype in (torch.float16, torch.bfloat16, torch.float32)
                     and d % (8 if half else 4) == 0 and dv % (8 if half else 4) == 0
                     and same_heads,
    }
    order = (("cudnn", "flash", "efficient") if _torch_version() >= (2, 9)
             else ("flash", "efficient", "cudnn"))
    for name in order:
        if ok[name]:
            return name
    return "math"


class SdpaRouting:
    """Routes ``F.scaled_dot_product_attention`` on fake CUDA tensors to the fused kernel a GPU
    would run. Without a GPU, PyTorch's own choice (sdp_utils) cannot read the device's properties
    and falls back to the math path, whose memory is quite different (it materialises the
    attention matrix); calling the fused aten op gives its real outputs and the tensors its
    backward saves (logsumexp, RNG state).

    Done by registering a kernel for ``aten::scaled_dot_product_attention`` at the AutogradCUDA
    dispatch key for the duration of the trace: every caller is covered (however it imported the
    function), and CUDA autocast has already cast the inputs when the kernel runs, as it has for
    PyTorch's own composite kernel."""

    def __init__(self, policy: str):
        self.policy = policy
        self.used: dict[str, int] = defaultdict(int)
        self._lib = None

    def __enter__(self):
        self._lib = torch.library.Library("aten", "IMPL")
        self._lib.impl("scaled_dot_product_attention", self._sdpa, "AutogradCUDA")
        return self

    def __exit__(self, *exc):
        lib, self._lib = self._lib, None
        destroy = getattr(lib, "_destroy", None)
        if destroy is not None:
            destroy()
        del lib

    def _sdpa(self, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False,
              scale=None, enable_gqa=False):
        backend = self.policy if self.policy != "auto" else choose_sdpa_backend(
            query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
        self.used[backend] += 1
        if backend == "math":
            return _call_with_schema(torch.ops.aten._scaled_dot_product_attention_math.default,
                                     query=query, key=key, value=value, attn_mask=attn_mask,
                                     dropout_p=dropout_p, is_causal=is_causal, scale=scale,
                                     enable_gqa=enable_gqa)[0]
        if scale is None:
            scale = 1.0 / math.sqrt(query.size(-1))
        needs_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        if backend == "flash":
            return self._flash(query, key, value, dropout_p, is_causal, scale)
        bias = self._attn_bias(attn_mask) if attn_mask is not None else None
        if backend == "efficient":
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                query, key, value, bias, needs_lse, dropout_p, is_causal, scale=scale)[0]
        return torch.ops.aten._scaled_dot_product_cudnn_attention(
            query, key, value, bias, needs_lse, dropout_p, is_causal, False, scale=scale)[0]

    @staticmethod
    def _flash(q, k, v, dropout_p, is_causal, scale):
        # the kernel wants the head dimension a multiple of 8: padded, and the output sliced back
        d = v.size(-1)
        pad = (-q.size(-1)) % 8
        if pad:
            q, k, v = (torch.nn.functional.pad(t, (0, pad)) for t in (q, k, v))
        out = torch.ops.aten._scaled_dot_product_flash_attention(
            q, k, v, dropout_p, is_causal, False, scale=scale)[0]
        return out[..., :d] if pad else out

    @staticmethod
    def _attn_bias(mask):
        # preprocess_mask: a boolean mask becomes an additive float one; the last dimension is
        # padded to a multiple of 16 (the memory-efficient kernel's alignment) and sliced back
        if mask.dtype == torch.bool:
            mask = torch.where(mask.logical_not(), float("-inf"), 0.0)
        pad = (-mask.size(-1)) % 16
        if pad:
            mask = torch.nn.functional.pad(mask, (0, pad))[..., : mask.size(-1)]
        return mask


def _call_with_schema(op, **named):
    """Call an aten overload with the named arguments its schema (of this torch version) has."""
    args, kwargs = [], {}
    for arg in op._schema.arguments:
        if arg.name not in named:
            continue
        if arg.kwarg_only:
            kwargs[arg.name] = named[arg.name]
        elif len(args) == [a.name for a in op._schema.arguments].index(arg.name):
            args.append(named[arg.name])
        else:
            kwargs[arg.name] = named[arg.name]
    out = op(*args, **kwargs)
    return out if isinstance(out, (tuple, list)) else (out,)


# ----------------------------------------------------------------------------- environment patches


@contextlib.contextmanager
def _patched(patches):
    """Set attributes for the duration; each (object, name, value)."""
    saved = []
    try:
        for obj, name, value in patches:
            saved.append((obj, name, getattr(obj, name)))
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)


def emulation_patches(executor: BackwardExecutor, hf_sees_fakes: bool):
    """What the trace changes in torch for its duration, and why:

    - CUDA autocast refuses to switch on when ``torch.cuda.is_available()`` is False; only the AMP
      code's own checks are told otherwise (not ``torch.cuda.is_available`` itself, which would
      send code down paths that touch the driver);
    - ``torch.autograd.backward`` (hence ``Tensor.backward``) runs the tracer's executor, and
      ``torch.autograd.grad`` is refused;
    - ``torch._C._current_graph_task_id`` answers the executor's graph id, so that non-reentrant
      checkpointing recomputes once per backward rather than once per saved tensor;
    - transformers takes export-safe paths when it sees a FakeTensor (``is_tracing``): it then
      materialises the causal mask and passes it to SDPA instead of ``is_causal=True``, which a GPU
      run does not do. Unless ``hf_sees_fakes``, it is told the tensors are not fake; the values it
      then reads (position ids, masks) come from ``ValueShadows``."""
    import torch.cuda.amp.common as amp_common

    patches = [
        (amp_common, "amp_definitely_not_available", lambda: False),
        (torch.cuda, "is_bf16_supported", lambda *a, **k: True),
        (torch.autograd, "backward", executor.backward),
        (torch.autograd, "grad", executor.grad_unsupported),
        (torch._C, "_current_graph_task_id", executor.current_graph_task_id),
    ]
    hf_utils = sys.modules.get("transformers.utils.import_utils")
    if not hf_sees_fakes and hf_utils is not None and hasattr(hf_utils, "is_fake_tensor"):
        patches.append((hf_utils, "is_fake_tensor", lambda x: False))
    return _patched(patches)


class GradScalerEmulation:
    """``torch.amp.GradScaler`` for ``--amp fp16``, op for op, without its ``.item()`` (a fake
    tensor has no value): no step is ever skipped."""

    def __init__(self):
        self.scale = None
        self.growth_tracker = None

    def scale_loss(self, loss):
        if self.scale is None:
            self.scale = torch.full((), 2.0 ** 16, dtype=torch.float32, device=DEVICE)
            self.growth_tracker = torch.full((), 0, dtype=torch.int32, device=DEVICE)
        return loss * self.scale

    def unscale(self, params):
        inv_scale = self.scale.double().reciprocal().float()
        found_inf = torch.full((), 0.0, dtype=torch.float32, device=DEVICE)
        by_dtype = defaultdict(list)
        for p in params:
            if p.grad is not None:
                by_dtype[p.grad.dtype].append(p.grad)
        for grads in by_dtype.values():
            torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale)
        return found_inf

    def update(self, found_inf):
        torch._amp_update_scale_(self.scale, self.growth_tracker, found_inf, 2.0, 0.5, 2000)


# ------------------------------------------------------------------------------------ model specs


@dataclass
class ModelSpec:
    """A model built on the meta device and how to train it."""
    model: object
    model_class: str
    make_batch: object          # () -> dict | tuple | Tensor of real CPU tensors (one batch)
    forward: object             # (model, batch) -> output
    loss: object                # (output, batch) -> scalar tensor
    notes: list
    is_hf: bool = False


def _default_forward(model, batch):
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


def _first_tensor(output):
    if isinstance(output, torch.Tensor):
        return output
    for attr in ("logits", "last_hidden_state"):
        t = getattr(output, attr, None)
        if isinstance(t, torch.Tensor):
            return t
    values = output.values() if isinstance(output, dict) else (
        output if isinstance(output, (tuple, list)) else ())
    for t in values:
        if isinstance(t, torch.Tensor):
            return t
    raise TracerError("the model's output has no tensor to make a loss of", "the default loss",
                      "define vramscope_loss(output, inputs) in the model file")


def _default_loss(output, batch):
    loss = getattr(output, "loss", None)
    if isinstance(loss, torch.Tensor):
        return loss
    return _first_tensor(output).float().pow(2).mean()


def _load_python_file(path: str):
    if not os.path.isfile(path):
        raise TracerError(f"model file {path!r} does not exist", "--model",
                          "give FILE.py:FUNCTION with an existing file")
    directory = os.path.dirname(os.path.abspath(path))
    if directory not in sys.path:  # lets the file import its neighbours, as `python FILE.py` would
        sys.path.insert(0, directory)
    name = "vramscope_user_model_" + os.path.splitext(os.path.basename(path))[0]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise TracerError(f"{path!r} cannot be imported as Python", "--model",
                          "give a .py file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        raise TracerError(f"importing the model file failed: {type(e).__name__}: "
                          f"{_one_line(e)}", path, "fix the file so that it imports") from e
    return module


def load_file_model(setup: Setup) -> ModelSpec:
    path, sep, func_name = setup.model.rpartition(":")
    if not sep or not path or not func_name:
        raise TracerError(f"--model {setup.model!r} is neither FILE.py:FUNCTION nor hf:CONFIG.json",
                          "--model", "e.g. --model models.py:build or --model hf:config.json")
    module = _load_python_file(path)
    build = getattr(module, func_name, None)
    if not callable(build):
        raise TracerError(f"function {func_name!r} not found", path,
                          f"define {func_name}() returning an nn.Module, or name another function")
    inputs_name = setup.inputs or "vramscope_inputs"
    make_inputs = getattr(module, inputs_name, None)
    if not callable(make_inputs):
        raise TracerError(f"no inputs function {inputs_name!r}", path,
                          "define vramscope_inputs(batch_size, seq_len, image_size) returning one "
                          "CPU batch (a tuple or dict of tensors), or pass --inputs FUNCTION")
    notes = []
    with torch.device("meta"):
        try:
            model = build()
        except TracerError:
            raise
        except Exception as e:
            raise TracerError(f"building the model failed on the meta device: {type(e).__name__}: "
                              f"{_one_line(e)}", f"{path}:{func_name}",
                              "the model is built with torch.device('meta') as default device; "
                              "avoid reading tensor values in __init__") from e
    if not isinstance(model, torch.nn.Module):
        raise TracerError(f"{func_name}() returned {type(model).__name__}, not an nn.Module",
                          path, "return the model")
    if setup.checkpointing:
        notes.append("--checkpointing: a custom model checkpoints in its own forward (if it "
                     "does); nothing was switched on by the tracer")

    def make_batch():
        return make_inputs(setup.batch, setup.seq, setup.image_size or 224)

    return ModelSpec(model=model, model_class=type(model).__name__, make_batch=make_batch,
                     forward=getattr(module, "vramscope_forward", None) or _default_forward,
                     loss=getattr(module, "vramscope_loss", None) or _default_loss, notes=notes)


def _set_hf_offline() -> None:
    for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ[key] = "1"
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _hf_task(class_name: str) -> str:
    if class_name.endswith(("ForCausalLM", "LMHeadModel")):
        return "causal_lm"
    if class_name.endswith("ForMaskedLM"):
        return "masked_lm"
    if class_name.endswith("ForImageClassification"):
        return "image_classification"
    if class_name.endswith("ForSequenceClassification"):
        return "sequence_classification"
    return "other"


def load_hf_model(setup: Setup) -> ModelSpec:
    path = setup.model[len("hf:"):]
    if setup.inputs:
        raise TracerError("--inputs names a function of a FILE.py model", "--model hf:...",
                          "drop --inputs: a transformers model gets input_ids/labels (or images)")
    if not os.path.isfile(path):
        raise TracerError(f"config file {path!r} does not exist", "--model hf:...",
                          "give the path of a transformers config.json")
    _set_hf_offline()
    try:
        import transformers
    except ImportError as e:
        raise TracerError("transformers is not installed", "--model hf:...",
                          "install it with `pip install transformers`") from e
    transformers.logging.set_verbosity_error()  # its warnings are not the tracer's output
    try:
        with open(path, encoding="utf-8") as f:
            raw = json.load(f)
    except (OSError, ValueError) as e:
        raise TracerError(f"cannot read the config: {_one_line(e)}", path,
                          "give a valid JSON config") from e
    if not isinstance(raw, dict) or "model_type" not in raw:
        raise TracerError("the config has no \"model_type\"", path,
                          "add \"model_type\" (e.g. \"gpt2\", \"llama\") to the JSON")
    kwargs = dict(raw)
    model_type = kwargs.pop("model_type")
    try:
        config = transformers.AutoConfig.for_model(model_type, **kwargs)
    except Exception as e:
        raise TracerError(f"transformers cannot make a config of type {model_type!r}: "
                          f"{_one_line(e)}", path, "check model_type and the fields") from e
    if setup.image_size is not None and hasattr(config, "image_size"):
        config.image_size = setup.image_size  # position embeddings follow the image size
    architectures = getattr(config, "architectures", None) or []
    cls = getattr(transformers, architectures[0], None) if architectures else None
    notes = []
    with torch.device("meta"):
        try:
            if cls is not None:
                model = cls(config)
            else:
                model = transformers.AutoModelForCausalLM.from_config(config)
        except Exception as e:
            raise TracerError(f"building the model failed: {type(e).__name__}: {_one_line(e)}",
                              path, "check the config (random weights are built on the meta "
                                    "device; nothing is downloaded)") from e
    class_name = type(model).__name__
    task = _hf_task(class_name)
    notes.append(f"transformers {transformers.__version__}: {class_name} from the config, random "
                 f"weights, attn_implementation {getattr(config, '_attn_implementation', None)}")
    if setup.checkpointing:
        if not getattr(model, "supports_gradient_checkpointing", False):
            raise TracerError(f"{class_name} does not support gradient checkpointing", path,
                              "drop --checkpointing")
        # renamed activation_checkpointing_enable in transformers 5.x; the old name warns
        enable = (getattr(model, "activation_checkpointing_enable", None)
                  or model.gradient_checkpointing_enable)
        enable()
        notes.append(f"gradient checkpointing: model.{enable.__name__}() (transformers' "
                     "defaults)")
    forward_kwargs = {"use_cache": False} if task == "causal_lm" else {}
    vocab = getattr(config, "vocab_size", None)
    num_labels = getattr(config, "num_labels", 2)

    def make_batch():
        g = torch.Generator().manual_seed(1)
        b, s = setup.batch, setup.seq
        if task == "image_classification":
            side = getattr(config, "image_size", None) or setup.image_size or 224
            channels = getattr(config, "num_channels", 3)
            pixels = torch.randn(b, channels, side, side, generator=g)
            if setup.dtype != "fp32":  # the model's dtype: nothing else would convert them
                pixels = pixels.to(getattr(torch, DTYPES[setup.dtype]))
            labels = torch.randint(0, num_labels, (b,), generator=g)
            return {"pixel_values": pixels, "labels": labels}
        if vocab is None:
            raise TracerError(f"{class_name} takes neither input_ids with a vocab_size nor images",
                              path, "trace it as a FILE.py:FUNCTION model with vramscope_inputs")
        ids = torch.randint(0, vocab, (b, s), generator=g)
        if task in ("causal_lm", "masked_lm"):
            return {"input_ids": ids, "labels": ids.clone()}
        if task == "sequence_classification":
            return {"input_ids": ids, "labels": torch.randint(0, num_labels, (b,), generator=g)}
        return {"input_ids": ids}

    def forward(model, batch):
        return model(**batch, **forward_kwargs)

    inputs_note = {"causal_lm": "input_ids [b, s] int64 and labels (a copy)",
                   "masked_lm": "input_ids [b, s] int64 and labels (a copy: every position)",
                   "image_classification": "pixel_values [b, C, H, W] and labels [b]",
                   "sequence_classification": "input_ids [b, s] and labels [b]",
                   "other": "input_ids [b, s]"}[task]
    notes.append(f"inputs: {inputs_note}; loss: the model's own output.loss"
                 if task != "other" else f"inputs: {inputs_note}; loss: mean square of the output")
    return ModelSpec(model=model, model_class=class_name, make_batch=make_batch, forward=forward,
                     loss=_default_loss, notes=notes, is_hf=True)


def apply_lora(spec: ModelSpec, setup: Setup) -> None:
    try:
        import peft
    except ImportError as e:
        raise TracerError("--lora needs peft, which is not installed", "--lora",
                          "install it with `pip install peft`") from e
    kwargs = {"r": setup.lora}
    if spec.is_hf and _hf_task(spec.model_class) == "causal_lm":
        kwargs["task_type"] = "CAUSAL_LM"
    try:
        config = peft.LoraConfig(**kwargs)  # target modules: peft's defaults for the model type
        with torch.device("meta"):
            spec.model = peft.get_peft_model(spec.model, config)
    except Exception as e:
        raise TracerError(f"peft could not add LoRA adapters: {_one_line(e)}", "--lora",
                          "LoRA targets are peft's defaults for the model type (llama: q_proj, "
                          "v_proj; gpt2: c_attn): use a model type peft knows") from e
    targets = sorted(config.target_modules) if config.target_modules else []
    spec.notes.append(f"LoRA: peft {peft.__version__} get_peft_model(LoraConfig(r={setup.lora}, "
                      f"target_modules={targets or 'peft default'}))")


def apply_freeze(model, patterns: list) -> None:
    names = [n for n, _ in model.named_parameters()]
    for pattern in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise TracerError(f"--freeze {pattern!r} matches no parameter", "--freeze",
                              f"parameter names look like {names[0]!r}" if names else
                              "the model has no parameters")
    for name, p in model.named_parameters():
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns):
            p.requires_grad_(False)


# ------------------------------------------------------------------------------ the device (setup)


def materialize_on_device(model, tracker: StorageTracker, dtype) -> None:
    """Every parameter and buffer becomes a fake CUDA tensor (floating ones in ``dtype``, as
    ``model.to(dtype).to('cuda')`` would make them), tied ones staying tied. Done by hand:
    ``Module.to`` swaps FakeTensor parameters with ``torch.utils.swap_tensors``, which refuses
    tensors that fake mode holds weak references to."""
    param_names = {id(p): n for n, p in model.named_parameters()}
    buffer_names = {id(b): n for n, b in model.named_buffers()}
    memo: dict[int, object] = {}

    root = type(model).__name__

    def convert(t, category, name):
        target = dtype if (t.is_floating_point() and dtype is not None) else t.dtype
        with tracker.label(category, name, module=name.rpartition(".")[0] or root):
            return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=target,
                                       device=DEVICE)

    for module in model.modules():
        for key, p in list(module._parameters.items()):
            if p is None:
                continue
            if id(p) not in memo:
                new = convert(p, "weight", param_names.get(id(p), key))
                memo[id(p)] = torch.nn.Parameter(new, requires_grad=p.requires_grad)
            module._parameters[key] = memo[id(p)]
        for key, b in list(module._buffers.items()):
            if b is None:
                continue
            if id(b) not in memo:
                memo[id(b)] = convert(b, "weight", buffer_names.get(id(b), key))
            module._buffers[key] = memo[id(b)]
        for key, value in list(vars(module).items()):  # plain tensor attributes left on meta
            if isinstance(value, torch.Tensor) and value.device.type == "meta":
                if id(value) not in memo:
                    memo[id(value)] = convert(value, "weight", key)
                setattr(module, key, memo[id(value)])


def parameter_summary(model) -> dict:
    params = list(model.parameters())

    def storage_bytes(tensors) -> int:
        seen, total = set(), 0
        for t in tensors:
            st = t.untyped_storage()
            if id(st) not in seen:
                seen.add(id(st))
                total += st.nbytes()
        return total

    trainable = [p for p in params if p.requires_grad]
    return {"total": sum(p.numel() for p in params),
            "trainable": sum(p.numel() for p in trainable),
            "bytes": storage_bytes(params), "trainable_bytes": storage_bytes(trainable),
            "buffers_bytes": storage_bytes(list(model.buffers()))}


# ----------------------------------------------------------------------------------- the optimizer


class _ParamState(dict):
    """One parameter's optimizer state: a tensor stored in it is labelled at once."""

    def __init__(self, tracker, param_name):
        super().__init__()
        self._tracker, self._param_name = tracker, param_name

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if isinstance(value, torch.Tensor):
            self._tracker.relabel(value, "optimizer_state", f"{self._param_name}.{key}")


class _LabelledState(defaultdict):
    """Replaces ``optimizer.state`` (a ``defaultdict(dict)``)."""

    def __init__(self, tracker, param_names):
        super().__init__(None)
        self._tracker, self._param_names = tracker, param_names

    def __missing__(self, param):
        state = _ParamState(self._tracker, self._param_names.get(id(param), "?"))
        self[param] = state
        return state


def build_optimizer(setup: Setup, model, tracker, param_names):
    if setup.optimizer == "none":
        return None
    cls_name, hyper = OPTIMIZERS[setup.optimizer]
    impl = {"foreach": {"foreach": True}, "fused": {"fused": True},
            "for-loop": {"foreach": False}}[setup.optimizer_impl]
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise TracerError("no parameter requires a gradient", "the model after --freeze/--lora",
                          "freeze less, or pass --optimizer none")
    try:
        optimizer = getattr(torch.optim, cls_name)(params, **hyper, **impl)
    except (TypeError, RuntimeError, ValueError) as e:
        raise TracerError(f"torch.optim.{cls_name}({setup.optimizer_impl}) cannot be made: "
                          f"{_one_line(e)}", f"torch {torch.__version__}",
                          "choose another of --foreach/--fused/--for-loop") from e
    optimizer.state = _LabelledState(tracker, param_names)
    return optimizer


# -------------------------------------------------------------------------------------- the trace


def _to_device(batch, fake_mode, tracker):
    """The batch's real CPU tensors as fake CPU tensors, then moved to the device (labelled)."""
    def move(t, name):
        if not isinstance(t, torch.Tensor):
            return t
        fake = fake_mode.from_tensor(t)
        tracker.shadows.set(fake, t)
        with tracker.label("input", name):
            return fake.to(DEVICE)

    if isinstance(batch, dict):
        return {k: move(v, str(k)) for k, v in batch.items()}
    if isinstance(batch, (tuple, list)):
        moved = [move(v, f"input{i}") for i, v in enumerate(batch)]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return move(batch, "input")


def _validate_batch(batch, where) -> None:
    tensors = list(batch.values()) if isinstance(batch, dict) else (
        list(batch) if isinstance(batch, (tuple, list)) else [batch])
    if not tensors or not any(isinstance(t, torch.Tensor) for t in tensors):
        raise TracerError("the inputs function returned no tensors", where,
                          "return a tensor, a tuple or a dict of CPU tensors")
    for t in tensors:
        if isinstance(t, torch.Tensor) and t.device.type != "cpu":
            raise TracerError(f"the inputs function returned a tensor on {t.device}", where,
                              "return CPU tensors; the tracer moves them to the device")


def train(setup: Setup, spec: ModelSpec, tracker, fake_mode, optimizer, scope) -> None:
    """The loop of examples/training/train.py, per step: zero_grad, then per micro-batch the batch
    to the device, forward and loss (under autocast), backward; optimizer.step(); then the
    release of batch, output and loss. Earlier micro-batches' references are dropped at the end
    of their backward (as a function returning would)."""
    model = spec.model
    amp_dtype = {"none": None, "bf16": torch.bfloat16, "fp16": torch.float16}[setup.amp]
    scaler = GradScalerEmulation() if setup.amp == "fp16" else None
    try:
        with _all_modes_off():  # real CPU tensors: the inputs function may read and mask values
            cpu_batch = spec.make_batch()
    except TracerError:
        raise
    except Exception as e:
        raise TracerError(f"the inputs function failed: {type(e).__name__}: {_one_line(e)}",
                          setup.model, "fix it; it is called once, outside fake mode") from e
    _validate_batch(cpu_batch, setup.model)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    for step in range(1, setup.steps + 1):
        if setup.zero_grad != "none":
            tracker.set_phase(step, "zero_grad")
            set_to_none = setup.zero_grad == "set-to-none"
            (optimizer or model).zero_grad(set_to_none=set_to_none)
        for micro in range(setup.grad_accum):
            tracker.set_phase(step, "inputs")
            batch = _to_device(cpu_batch, fake_mode, tracker)
            tracker.set_phase(step, "forward")
            autocast = (torch.autocast(DEVICE, dtype=amp_dtype) if amp_dtype is not None
                        else contextlib.nullcontext())
            with autocast:
                out = spec.forward(model, batch)
                loss = spec.loss(out, batch)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise TracerError("the loss is not a scalar tensor", "the loss function",
                                  "return a scalar from vramscope_loss(output, inputs)")
            if setup.grad_accum > 1:
                loss = loss / setup.grad_accum
            tracker.set_phase(step, "backward")
            (scaler.scale_loss(loss) if scaler is not None else loss).backward()
            if micro < setup.grad_accum - 1:
                del batch, out, loss
        tracker.set_phase(step, "optimizer")
        if optimizer is not None:
            found_inf = scaler.unscale(trainable) if scaler is not None else None
            optimizer.step()
            if scaler is not None:
                scaler.update(found_inf)
                del found_inf
        tracker.set_phase(step, "step_end")
        del batch, out, loss
        scope.forget_nodes()


def _fake_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode
    # real tensors may meet fake ones (a CPU tensor a model keeps as an attribute): let fake mode
    # convert them rather than fail
    return FakeTensorMode(allow_non_fake_inputs=True)


def _data_dependent_error(e, tracker) -> TracerError:
    failure = tracker.failure or (getattr(e, "func", None), tracker.current_module(),
                                  tracker.step, tracker.phase)
    func, module, step, phase = failure
    op = _op_name(getattr(e, "func", None) or func) if (getattr(e, "func", None) or func) else "?"
    where = f"step {step} {phase}, module {module or '(outside the model)'}"
    return DataDependentError(f"the step calls {op}, whose result depends on tensor values that "
                              "fake tensors do not have", where,
                              "tracing needs shape-static code: the step must not read values "
                              "computed from parameters (.item(), .tolist(), bool(), nonzero() or "
                              "boolean-mask indexing of them)")


def trace(setup: Setup, events_path: str, hf_sees_fakes: bool = False) -> dict:
    """Run the trace; the events go to ``events_path``; returns the header. ``hf_sees_fakes``: let
    transformers know its tensors are fake (see ``emulation_patches``)."""
    from torch._subclasses import fake_tensor as ft

    spec = load_hf_model(setup) if setup.model.startswith("hf:") else load_file_model(setup)
    base_class = spec.model_class
    if setup.lora is not None:
        apply_lora(spec, setup)
    if setup.freeze:
        apply_freeze(spec.model, setup.freeze)
    model = spec.model
    param_names = {id(p): n for n, p in model.named_parameters()}

    writer = EventWriter(events_path)
    tracker = StorageTracker(writer)
    fake_mode = _fake_mode()
    sdpa = SdpaRouting(setup.sdpa)
    saved = SavedTensors(tracker)
    notes = [
        "tensors are FakeTensors on device cuda (torch._subclasses.FakeTensorMode): no GPU and no "
        "real memory; bytes are each storage's nbytes as PyTorch requests them (no allocator "
        "rounding, no caching)",
        "not in the stream: memory a kernel takes and returns within its call (cuBLAS/cuDNN "
        "workspaces: see the matmul and conv markers; sort buffers of embedding backward, "
        "reductions), the CUDA context, and anything the model allocates outside PyTorch",
        "backward runs in the tracer's own executor that follows PyTorch's autograd engine "
        "(its C++ engine cannot run fake CUDA tensors without a GPU); module backward hooks and "
        "hooks on non-leaf tensors are not run",
    ]
    notes.extend(spec.notes)
    if spec.is_hf and hf_sees_fakes:
        notes.append("transformers was let see fake tensors (its export-safe paths: causal masks "
                     "materialised), because the step read values the tracer does not have "
                     "otherwise; a GPU run may use less memory for attention masks")
    dtype = getattr(torch, DTYPES[setup.dtype]) if setup.dtype != "fp32" else None
    step_phase = "setup"
    try:
        with fake_mode, tracker, sdpa:
            tracker.set_phase(0, "setup")
            materialize_on_device(model, tracker, dtype)
            param_names = {id(p): n for n, p in model.named_parameters()}
            header_params = parameter_summary(model)
            optimizer = build_optimizer(setup, model, tracker, param_names)
            scope = ModuleScope(model)
            tracker.scope = scope
            executor = BackwardExecutor(tracker, saved, param_names)
            if any(m._backward_hooks or getattr(m, "_backward_pre_hooks", None)
                   for m in model.modules()):
                notes.append("the model registers module backward hooks: they were not run")
            step_phase = "training"
            try:
                with emulation_patches(executor, hf_sees_fakes), saved.hooks():
                    train(setup, spec, tracker, fake_mode, optimizer, scope)
            finally:
                scope.close()
            tracker.recording = False  # what follows (teardown) is not part of the step
    except TracerError:
        writer.abandon()
        raise
    except (ft.DataDependentOutputException, ft.DynamicOutputShapeException) as e:
        writer.abandon()
        raise _data_dependent_error(e, tracker) from e
    except ft.UnsupportedOperatorException as e:
        writer.abandon()
        func = getattr(e, "func", None) or (tracker.failure or [None])[0]
        raise TracerError(f"operator {_op_name(func) if func else e} has no fake-tensor "
                          f"implementation", f"step {tracker.step} {tracker.phase}, module "
                          f"{(tracker.failure or [None, tracker.current_module()])[1] or '-'}",
                          "trace a model made of standard PyTorch operators") from e
    except Exception as e:
        writer.abandon()
        if step_phase == "setup":
            where = "setting the model up on the fake device"
        else:
            module = (tracker.failure[1] if tracker.failure else tracker.current_module())
            where = f"step {tracker.step} {tracker.phase}, module {module or '(outside the model)'}"
        frame = traceback.extract_tb(e.__traceback__)[-1] if e.__traceback__ else None
        at = f" ({os.path.basename(frame.filename)}:{frame.lineno})" if frame else ""
        raise TracerError(f"{type(e).__name__}: {_one_line(e)}{at}", where,
                          "the step must run on fake CUDA tensors; if the model reads tensor "
                          "values or needs a real GPU, it cannot be traced") from e
    writer.close()

    if sdpa.used:
        counts = ", ".join(f"{name} x{count}" for name, count in sorted(sdpa.used.items()))
        how = (f"as torch {torch.__version__} picks on sm90" if setup.sdpa == "auto"
               else "forced")
        notes.append(f"scaled_dot_product_attention: {counts} (--sdpa {setup.sdpa}: {how})")
    if optimizer is not None:
        note = (f"optimizer: torch.optim.{type(optimizer).__name__} ({setup.optimizer_impl}) over "
                f"{len(optimizer.param_groups[0]['params'])} trainable parameter tensors")
        if setup.optimizer in ("adam", "adamw") and setup.optimizer_impl != "fused":
            note += "; its step counters are CPU tensors (not in the stream)"
        notes.append(note)
    if setup.amp == "fp16":
        notes.append("--amp fp16: GradScaler emulated op for op (scale, unscale_, update), "
                     "never skipping a step")
    if setup.grad_accum > 1:
        notes.append("grad-accum: each micro-batch's batch, output and loss are released at the "
                     "end of its backward; the last one's at step_end")
    notes.append(f"peak of the traced storages (no allocator): {tracker.peak_bytes:,} B at step "
                 f"{tracker.peak_at[0]} {tracker.peak_at[1]}" if tracker.peak_at else
                 "no allocation traced")
    producer = f"vramscope tracer (torch {torch.__version__})"
    return {
        "format": FORMAT, "version": VERSION, "producer": producer, "model": setup.model,
        "model_class": base_class, "setup": setup.as_header(),
        "device_emulation": "fake cuda", "parameters": header_params, "notes": notes,
        "summary": {"allocs": writer.allocs, "frees": writer.frees,
                    "peak_bytes": tracker.peak_bytes,
                    "peak_at": {"step": tracker.peak_at[0], "phase": tracker.peak_at[1]}
                    if tracker.peak_at else None},
    }


# ------------------------------------------------------------------------------------------- main


def _check_output(path: str) -> str:
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise TracerError(f"the output directory {directory!r} does not exist", "-o",
                          "create it or write elsewhere")
    if os.path.isdir(path):
        raise TracerError(f"{path!r} is a directory", "-o", "give a file name")
    return directory


def run(argv=None) -> int:
    setup = parse_args(argv)
    if torch is None:
        raise TracerError("PyTorch is not installed", f"python {sys.executable}",
                          "install it with `pip install torch` (a CPU build is enough: the tracer "
                          "needs no GPU)")
    directory = _check_output(setup.output)
    base = os.path.basename(setup.output)
    events_fd, events_path = tempfile.mkstemp(prefix=f".{base}.", suffix=".events", dir=directory)
    os.close(events_fd)
    out_fd, out_path = tempfile.mkstemp(prefix=f".{base}.", suffix=".tmp", dir=directory)
    os.close(out_fd)
    try:
        try:
            header = trace(setup, events_path)
        except DataDependentError:
            if not setup.model.startswith("hf:"):
                raise
            header = trace(setup, events_path, hf_sees_fakes=True)
        with open(out_path, "w", encoding="utf-8") as out, \
                open(events_path, encoding="utf-8") as events:
            out.write(json.dumps(header) + "\n")
            shutil.copyfileobj(events, out)
        os.replace(out_path, setup.output)
    finally:
        for path in (events_path, out_path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    s = header["summary"]
    at = s["peak_at"]
    print(f"{setup.output}: {s['allocs']:,} allocations, {s['frees']:,} frees; traced peak "
          f"{s['peak_bytes']:,} B" + (f" at step {at['step']} {at['phase']}" if at else ""))
    return 0


def main(argv=None) -> int:
    try:
        with warnings.catch_warnings():
            # libraries' deprecation notices are not the tracer's output (stderr is for errors)
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            return run(argv)
    except TracerError as e:
        print(e.line(), file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"{PROG}: error: interrupted, while tracing, run it again", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
