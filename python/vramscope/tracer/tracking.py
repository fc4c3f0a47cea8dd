"""Storage tracking: every new storage on the fake device is an allocation, freed when its
storage object dies; module scopes; the real values of small tensors (``ValueShadows``)."""

from __future__ import annotations

import contextlib
import functools
import weakref

from .common import (CONV_OPS, CURRENT_CUDA_STREAM, DEVICE, MATMUL_OPS, TorchDispatchMode,
                     local_shard, torch)
from ..vocabulary import tracer_phase
from .stream import EventWriter


class _Storage:
    __slots__ = ("id", "nbytes", "category", "name", "op", "node", "module", "pool")

    def __init__(self, alloc_id, nbytes, category, name, op, node=None, module=None, pool=None):
        self.id, self.nbytes, self.category, self.name, self.op = (
            alloc_id, nbytes, category, name, op)
        self.node, self.module, self.pool = node, module, pool  # compiled graphs only


def _tensors_in(value):
    """The tensors of an op's result (a tensor, or tuples and lists of them, nested)."""
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _tensors_in(v)


# Results a kernel makes off the device, which the fake implementation puts on it: the
# memory-efficient attention kernel's philox seed and offset (results 2 and 3) are CPU tensors
# (the fp32 H100/H200 goldens, torch 2.11: only its output and log-sum-exp on the device).
_HOST_RESULTS = {"_scaled_dot_product_efficient_attention": 2}


def _op_name(func) -> str:
    schema = getattr(func, "_schema", None)
    return schema.name if schema is not None else str(func)


def _sequence_nr_fn():
    """The autograd sequence counter of this thread (what the next node's sequence number will
    be): lets module scopes and saved tensors be matched to autograd nodes."""
    return getattr(getattr(torch._C, "_autograd", None), "_get_sequence_nr", None)


def _compiling() -> bool:
    """True while Dynamo traces (it folds the call to a constant), False when run."""
    is_compiling = getattr(getattr(torch, "compiler", None), "is_compiling", None)
    return bool(is_compiling()) if is_compiling is not None else False


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
        if _compiling():  # Dynamo inlines global hooks: the compiled graphs name their modules
            return
        self.stack.append((id(module), self._path(module), self._seq() if self._seq else None))

    def _post(self, module, args, output):
        if _compiling():
            return
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


def _wait_tensor_op():
    """``_c10d_functional.wait_tensor`` (tensor parallelism's collectives end in it), if any."""
    try:
        return torch.ops._c10d_functional.wait_tensor.default
    except (AttributeError, RuntimeError):
        return None


_WAIT_TENSOR = _wait_tensor_op() if torch is not None else None


def _is_distributed(cls) -> bool:
    """Is ``cls`` torch.distributed's DTensor (a wrapper whose storage is its local shard's)?"""
    return cls.__name__ == "DTensor" and cls.__module__.startswith("torch.distributed")


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
        # (thread, is addmm) with a matmul marker in this phase
        self._matmul_threads: set[tuple[str, bool]] = set()
        self.step, self.phase = 0, None
        self.current_bytes = 0
        self.peak_bytes, self.peak_at = 0, None
        self.failure: tuple | None = None        # (op, module, step, phase) of the first failure
        self.shadows = ValueShadows()
        # the step's FakeTensorMode: tensors of another (Dynamo's, while it compiles) are not
        # the step's allocations
        self.fake_mode = None
        # --compile: the graph and FX node being run (graph kind, number, pool; node name,
        # module, fused), and the storages of fused nodes (never allocated by Inductor's code)
        self._graph: tuple | None = None
        self._fx: tuple | None = None
        self._fused: dict[int, weakref.ref] = {}
        # inside deferred(): (alloc id, +bytes or -bytes) of each event since it began, and the
        # allocations taken back since
        self._window: list | None = None
        self._retracted: set = set()

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        """torch.compile turns the tracker off while it compiles (otherwise Dynamo refuses to
        compile under a dispatch mode) and on again while the compiled code runs: the tracker
        sees the ops of the compiled graphs' runners (--compile), not Dynamo's tracing."""
        return True

    # -- context
    def set_phase(self, step: int, phase: str) -> None:
        self.step, self.phase = step, tracer_phase(phase)
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

    @contextlib.contextmanager
    def compiled_graph(self, kind: str, number: int, pool: int | None):
        """A compiled graph runs inside (its allocations name it, and its pool)."""
        saved, self._graph = self._graph, (kind, number, pool)
        try:
            yield
        finally:
            self._graph = saved

    @contextlib.contextmanager
    def fx_node(self, name: str, module: str, fused: bool):
        """An FX node of a compiled graph runs inside; ``fused``: Inductor computes it inside
        its users' kernels, so its result is no allocation."""
        saved, self._fx = self._fx, (name, module, fused)
        try:
            yield
        finally:
            self._fx = saved

    @contextlib.contextmanager
    def deferred(self):
        """Inside, the events are held back (``EventWriter.hold``) so that ``retract`` can take
        back an allocation made inside; the peak counts what is left. Nested: the outermost
        decides."""
        if self._window is not None:
            yield
            return
        start, self._window, self._retracted = self.current_bytes, [], set()
        self.writer.hold()
        try:
            yield
        finally:
            window, self._window = self._window, None
            current = start
            for alloc_id, delta in window:
                if alloc_id not in self._retracted:
                    current += delta
                    if current > self.peak_bytes:
                        self.peak_bytes, self.peak_at = current, (self.step, self.phase)
            self.writer.release(self._retracted)

    def retract(self, t) -> bool:
        """Takes back the allocation of ``t``'s storage, made inside the current ``deferred``:
        it never happened (no alloc, relabel or free of it is written). False when it was made
        before, or is not the trace's."""
        rec = self.record_of(t)
        if (rec is None or self._window is None
                or not any(i == rec.id and d > 0 for i, d in self._window)):
            return False
        del self.live[id(local_shard(t).untyped_storage())]
        self.current_bytes -= rec.nbytes
        self._retracted.add(rec.id)
        return True

    def pool_of(self, t) -> int | None:
        rec = self.record_of(t)
        return rec.pool if rec is not None else None

    def current_module(self) -> str:
        if self._fx is not None:
            return self._fx[1]
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
        if any(_is_distributed(t) for t in types):
            # A DTensor op: let DTensor run it (its sharding rules, its collectives); the ops on
            # the local shards it runs come back through this mode, and those are what allocate.
            return NotImplemented
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
        if func is _WAIT_TENSOR and args and isinstance(args[0], torch.Tensor):
            # On a GPU, wait_tensor returns the collective's output itself (it waits for the
            # collective's stream); the fake kernel makes a new tensor, which is no allocation.
            out = args[0]
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
        packet = getattr(getattr(func, "_overloadpacket", None), "__name__", "")
        if packet in _HOST_RESULTS and isinstance(out, (tuple, list)):
            for t in _tensors_in(out[_HOST_RESULTS[packet]:]):
                self._off_device(t)
            out = out[:_HOST_RESULTS[packet]]
        for t in _tensors_in(out):
            if t.device.type == DEVICE and (self.fake_mode is None or
                                            getattr(t, "fake_mode", None) is self.fake_mode):
                self.track(t, op)
        if packet in MATMUL_OPS and (self.thread, packet == "addmm") not in self._matmul_threads:
            # thinned: the first per thread per phase (cuBLAS keeps its workspace per thread),
            # and the first addmm apart: its op says so, since PyTorch runs addmm through
            # cuBLASLt, whose workspace comes with the first one (device_rules.cc)
            self._matmul_threads.add((self.thread, packet == "addmm"))
            self.writer.emit({"ev": "matmul", "thread": self.thread, "op": f"aten::{packet}"})
        elif packet in CONV_OPS:
            self.writer.emit({"ev": "conv", "thread": self.thread})

    def track(self, t, op: str) -> None:
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):  # no storage (sparse, nested): not traced
            return
        key = id(st)
        if key in self._fused:
            return
        nbytes = st.nbytes()
        rec = self.live.get(key)
        if rec is not None:
            self._reallocate(key, rec, nbytes, op)
            return
        if nbytes == 0:
            return
        if self._fx is not None and self._fx[2]:  # fused by Inductor: never materialised
            self._fused[key] = weakref.ref(st, functools.partial(self._on_fused_collect, key))
            return
        category, name = self._labels[-1][:2] if self._labels else ("temporary", "")
        self.live[key] = self._emit_alloc(nbytes, category, name, op)
        if key not in self._weakrefs:
            self._weakrefs[key] = weakref.ref(st, functools.partial(self._on_collect, key))

    def _off_device(self, t) -> None:
        """A result the real kernel makes on the host: neither it nor its views are traced."""
        try:
            st = t.untyped_storage()
        except (RuntimeError, NotImplementedError):
            return
        key = id(st)
        if key not in self.live and key not in self._fused:
            self._fused[key] = weakref.ref(st, functools.partial(self._on_fused_collect, key))

    def storage_resized(self, st) -> None:
        """``UntypedStorage.resize_`` (FSDP2 frees a gathered parameter by resizing its storage
        to 0 and allocates it again by resizing it back): on a GPU each is a free and an
        allocation of the caching allocator."""
        key = id(st)
        # only storages the trace made (a fake tensor's storage is on the meta device)
        if not self.recording or key not in self._weakrefs:
            return
        nbytes = st.nbytes()
        rec = self.live.get(key)
        if rec is not None:
            self._reallocate(key, rec, nbytes, "aten::resize_")
        elif nbytes > 0:  # resized back from 0: labelled by what allocates it now
            category, name = self._labels[-1][:2] if self._labels else ("temporary", "")
            self.live[key] = self._emit_alloc(nbytes, category, name, "aten::resize_")

    def _reallocate(self, key, rec: _Storage, nbytes: int, op: str) -> None:
        """A live storage resized in place: the allocator frees the old block and, unless the
        new size is 0, allocates one of the new size under the same labels."""
        if rec.nbytes == nbytes:
            return
        self._emit_free(rec)
        if nbytes > 0:
            self.live[key] = self._emit_alloc(nbytes, rec.category, rec.name, op)
        else:
            del self.live[key]

    def _emit_alloc(self, nbytes, category, name, op) -> _Storage:
        rec = _Storage(self._next_id, nbytes, category, name, op)
        self._next_id += 1
        self.current_bytes += nbytes
        if self._window is not None:  # the peak is counted when the window closes
            self._window.append((rec.id, nbytes))
        elif self.current_bytes > self.peak_bytes:
            self.peak_bytes, self.peak_at = self.current_bytes, (self.step, self.phase)
        event = {"ev": "alloc", "id": rec.id, "bytes": nbytes, "category": category,
                 "name": name, "op": op, "module": self.current_module()}
        if CURRENT_CUDA_STREAM[0]:  # made on a stream of its own (stream version 3)
            event["stream"] = CURRENT_CUDA_STREAM[0]
        if self._graph is not None:  # made by a compiled graph (stream version 2)
            kind, number, pool = self._graph
            event["graph"] = number
            rec.module = event["module"]
            if self._fx is not None:
                event["node"] = rec.node = self._fx[0]
            if pool is not None:
                event["pool"] = rec.pool = pool
        self.writer.emit(event)
        return rec

    def _on_fused_collect(self, key, _ref) -> None:
        self._fused.pop(key, None)

    def _emit_free(self, rec: _Storage) -> None:
        self.current_bytes -= rec.nbytes
        if self._window is not None:
            self._window.append((rec.id, -rec.nbytes))
        self.writer.emit({"ev": "free", "id": rec.id})

    def _on_collect(self, key, _ref) -> None:
        self._weakrefs.pop(key, None)
        rec = self.live.pop(key, None)
        if rec is not None and self.recording:
            self._emit_free(rec)

    # -- labels
    def record_of(self, t) -> _Storage | None:
        t = local_shard(t)  # a DTensor's storage is its local shard's
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
