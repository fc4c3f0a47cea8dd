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
"""

import os
import sys
import time

import _thread  # not threading: a program that never imports torch should not pay for it

SIDECAR_FORMAT = "vramscope-capture"
SIDECAR_VERSION = 1
TENSOR_STEPS = 20  # tensors are named for the first TENSOR_STEPS optimizer steps
MAX_PHASES = 200000  # the latest phase records kept (the allocator history is bounded too)
MAX_NVML_SAMPLES = 20000  # the latest NVML samples kept (one per phase boundary)
MAX_NVML_PROCESSES = 64  # other processes listed per sample (the largest); the rest are counted


def _now_us():
    return time.time_ns() // 1000


def _env_int(name, default):
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise _SetupError(f"{name}={text!r} is not a whole number; unset it or use 'vramscope run'")


class _SetupError(Exception):
    pass


class _State:
    def __init__(self):
        self.lock = _thread.RLock()
        self.pid = os.getpid()
        self.enabled = False  # configured, waiting for torch / CUDA
        self.recording = False  # recording started (CUDA initialized, or CPU test mode)
        self.done = False  # written (or disabled): nothing more is recorded
        self.written = False
        self.cpu_mode = False
        self.quiet = False
        self.out_dir = ""
        self.steps_wanted = 0
        self.after_steps = "stop"
        self.stacks = "python"
        self.max_entries = 1000000
        self.phase_memory = False
        self.context = None
        self.fallback = None
        self.started_us = None
        self.torch = None
        self.has_metadata = False
        # phases
        self.step = 0
        self.phase = "setup"
        self.phase_begin = None
        self.phases = None
        self.steps_completed = 0
        self.closure_pending = False
        self.local = _thread._local()
        # names
        self.roots = []  # weakrefs of modules seen as root forwards
        self.root_ids = set()
        self.names = {}  # id(tensor) -> (weakref, name, kind, owner parameter count)
        self.recorded = set()  # (kind, name, data_ptr, nbytes) of parameters/buffers recorded
        self.tensors = []
        self.optimizers = []  # weakrefs, to name parameters no module named
        self.handles = []  # the hooks' handles, removed when recording stops
        self.train_thread = None  # the thread of the first root forward
        # the end
        self.oom = None
        self.oom_snapshot = None
        self.prev_excepthook = None
        self.prev_signals = {}
        # NVML (nvidia-ml-py), sampled at the start and at every phase boundary
        self.nvml_mode = ""  # VRAMSCOPE_NVML: "" (on the GPU only), "0" (never), "1" (also CPU)
        self.nvml = None  # the pynvml module while sampling
        self.nvml_handles = {}  # torch device index -> (handle, facts)
        self.nvml_info = None  # what the sidecar's "nvml" says besides the samples
        self.nvml_samples = None
        self.nvml_taken = 0  # samples taken (the deque keeps the latest)


_state = _State()


def _say(message, error=False):
    if error or not _state.quiet:
        try:
            sys.stderr.write(f"vramscope: {message}\n")
            sys.stderr.flush()
        except Exception:
            pass


def _fail(what):
    """Disables the bootstrap after a failure of its own, with one line on stderr."""
    with _state.lock:
        already = _state.done and not _state.written
        _state.done = True
        _state.recording = False
    if not already:
        _say(f"{what}; this process runs on without capture", error=True)


# --- start-up: wait for torch -------------------------------------------------------------------


class _TorchLoader:
    """Wraps torch's own loader for one import, to run the bootstrap once torch/__init__ is done."""

    def __init__(self, inner):
        self.inner = inner

    def create_module(self, spec):
        create = getattr(self.inner, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        # Put torch's own loader back first: the module must not keep this wrapper.
        spec = getattr(module, "__spec__", None)
        if spec is not None:
            spec.loader = self.inner
        try:
            module.__loader__ = self.inner
        except Exception:
            pass
        self.inner.exec_module(module)
        _on_torch_imported(module)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _TorchFinder:
    """A meta path finder that only reacts to the top-level ``torch`` import, once."""

    def __init__(self):
        self.busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch" or self.busy:
            return None
        self.busy = True
        try:
            _remove_finder(self)
            for finder in list(sys.meta_path):
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is None:
                    continue
                if spec.loader is None or not hasattr(spec.loader, "exec_module"):
                    return spec
                spec.loader = _TorchLoader(spec.loader)
                return spec
            return None
        except Exception as e:
            _fail(f"could not watch for the import of torch ({type(e).__name__}: {e})")
            return None
        finally:
            self.busy = False


def _remove_finder(finder):
    try:
        sys.meta_path.remove(finder)
    except ValueError:
        pass


def install():
    """Called by the injected sitecustomize. Does nothing unless VRAMSCOPE_CAPTURE_DIR is set."""
    out_dir = os.environ.get("VRAMSCOPE_CAPTURE_DIR", "")
    if not out_dir or _state.enabled:
        return
    s = _state
    s.quiet = os.environ.get("VRAMSCOPE_QUIET", "") == "1"
    try:
        s.out_dir = os.path.abspath(out_dir)
        s.steps_wanted = max(0, _env_int("VRAMSCOPE_STEPS", 0))
        s.after_steps = os.environ.get("VRAMSCOPE_AFTER_STEPS", "stop").strip() or "stop"
        if s.after_steps not in ("stop", "continue"):
            raise _SetupError(f"VRAMSCOPE_AFTER_STEPS={s.after_steps!r} is not 'stop' or 'continue'")
        s.stacks = os.environ.get("VRAMSCOPE_STACKS", "python").strip() or "python"
        if s.stacks not in ("python", "all"):
            raise _SetupError(f"VRAMSCOPE_STACKS={s.stacks!r} is not 'python' or 'all'")
        s.max_entries = _env_int("VRAMSCOPE_MAX_ENTRIES", 1000000)
        s.phase_memory = os.environ.get("VRAMSCOPE_PHASE_MEMORY", "") == "1"
        s.cpu_mode = os.environ.get("VRAMSCOPE_CAPTURE_CPU", "") == "1"
        s.nvml_mode = os.environ.get("VRAMSCOPE_NVML", "").strip()
        if s.nvml_mode not in ("", "0", "1"):
            raise _SetupError(f"VRAMSCOPE_NVML={s.nvml_mode!r} is not '0' or '1'")
    except _SetupError as e:
        _fail(f"{e}")
        return
    s.enabled = True
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "cuda"):
        _on_torch_imported(torch)
    else:
        sys.meta_path.insert(0, _TorchFinder())


def _on_torch_imported(torch):
    s = _state
    if s.done or s.torch is not None:
        return
    try:
        s.torch = torch
        if not os.path.isdir(s.out_dir) or not os.access(s.out_dir, os.W_OK | os.X_OK):
            _fail(f"VRAMSCOPE_CAPTURE_DIR={s.out_dir} is not a folder this process can write to "
                  "(give 'vramscope run -o' a writable folder)")
            return
        if s.cpu_mode:
            _start()
        else:
            torch.cuda._lazy_call(_start)
    except Exception as e:
        _fail(f"could not set up capture after torch was imported ({type(e).__name__}: {e})")


# --- recording ----------------------------------------------------------------------------------


def _start():
    """Runs when CUDA initializes (inside torch.cuda._lazy_init), or at torch's import in CPU mode.
    Must never raise: torch would turn it into an error of the user's first CUDA call."""
    s = _state
    try:
        with s.lock:
            if s.recording or s.done or os.getpid() != s.pid:
                return
            torch = s.torch
            if not s.cpu_mode:
                memory = torch.cuda.memory
                try:
                    memory._record_memory_history(enabled="all", context="all", stacks=s.stacks,
                                                  max_entries=s.max_entries)
                    s.context = "all"
                except Exception as e:
                    s.fallback = (f"recording with context='all' failed ({type(e).__name__}: {e}); "
                                  "recorded with context='alloc'")
                    memory._record_memory_history(enabled="all", context="alloc", stacks=s.stacks,
                                                  max_entries=s.max_entries)
                    s.context = "alloc"
                attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
                if attach is not None:
                    attach(_oom_observer)
            else:
                s.context = None
            s.has_metadata = hasattr(torch.cuda.memory, "_set_memory_metadata")
            import collections
            s.phases = collections.deque(maxlen=MAX_PHASES)
            s.started_us = _now_us()
            s.phase_begin = s.started_us
            s.step, s.phase = 0, "setup"
            _set_metadata()
            if s.phase_memory and not s.cpu_mode:
                torch.cuda.reset_peak_memory_stats()
            _install_hooks(torch)
            s.recording = True
            _nvml_start()
        _install_exit_handlers()
    except Exception as e:
        _fail(f"could not start recording GPU memory ({type(e).__name__}: {e})")


def _set_metadata():
    s = _state
    if s.has_metadata and not s.cpu_mode:
        s.torch.cuda.memory._set_memory_metadata(f"vramscope step={s.step} phase={s.phase}")


def _memory_counters():
    s = _state
    if s.cpu_mode:
        return None
    cuda = s.torch.cuda
    counters = {"allocated": cuda.memory_allocated(), "reserved": cuda.memory_reserved(),
                "max_allocated": None, "max_reserved": None}
    if s.phase_memory:
        cuda.synchronize()
        counters["max_allocated"] = cuda.max_memory_allocated()
        counters["max_reserved"] = cuda.max_memory_reserved()
    return counters


def _close_phase(now, at="phase_end"):
    s = _state
    counters = _memory_counters()
    s.phases.append({"step": s.step, "phase": s.phase, "begin_us": s.phase_begin, "end_us": now,
                     "memory": counters})
    _nvml_sample(at, now, counters)


def _enter_phase(step, phase):
    """Closes the current phase and begins another (a boundary). Caller holds no assumptions."""
    s = _state
    if not s.recording or (step == s.step and phase == s.phase):
        return
    now = _now_us()
    _close_phase(now)
    s.step, s.phase, s.phase_begin = step, phase, now
    _set_metadata()
    if s.phase_memory and not s.cpu_mode:
        s.torch.cuda.reset_peak_memory_stats()


def _guarded(fn):
    """The hooks run inside the user's training: a failure of ours disables capture, never raises."""

    def hook(*args, **kwargs):
        if not _state.recording:
            return None
        try:
            return fn(*args, **kwargs)
        except SystemExit:
            raise
        except Exception as e:
            _fail(f"internal error in the {fn.__name__.strip('_')} hook ({type(e).__name__}: {e})")
            return None

    hook.__name__ = fn.__name__
    return hook


def _is_compiling():
    compiler = getattr(_state.torch, "compiler", None)
    fn = getattr(compiler, "is_compiling", None)
    return fn is not None and fn()


def _forward_pre(module, args):
    local = _state.local
    depth = getattr(local, "depth", 0)
    local.depth = depth + 1
    if depth == 0 and _state.recording:
        thread = _thread.get_ident()
        if _state.train_thread is None:
            _state.train_thread = thread
        elif thread != _state.train_thread:
            return  # DataParallel's replicas, a helper thread: not the training loop's forward
        try:
            _root_forward(module)
        except Exception as e:
            _fail(f"internal error in the forward hook ({type(e).__name__}: {e})")


def _forward_post(module, args, output):
    local = _state.local
    depth = getattr(local, "depth", 0)
    local.depth = depth - 1 if depth > 0 else 0


def _module_forward_pre(module, args):
    if _is_compiling():  # inside a graph torch.compile traces: keep the graph whole
        return None
    _forward_pre(module, args)
    return None


def _module_forward_post(module, args, output):
    if _is_compiling():
        return None
    _forward_post(module, args, output)
    return None


def _root_forward(module):
    s = _state
    with s.lock:
        if not s.recording:
            return
        if s.phase in ("setup", "between"):
            _enter_phase(s.step + 1, "forward")
        elif s.phase == "backward":
            _enter_phase(s.step, "forward")  # gradient accumulation: the same iteration
        # forward (another model in the same iteration) or optimizer (a closure): unchanged
        if id(module) not in s.root_ids:
            _learn_root(module)


def _owner_of(root):
    """The outermost module whose method (several frames up) called this root forward: the
    LightningModule whose training_step calls self.model(x), so names read "model.layer.weight"."""
    torch = _state.torch
    owner = None
    frame = sys._getframe(1)
    for _ in range(24):
        if frame is None:
            break
        candidate = _frame_self(frame)
        if (isinstance(candidate, torch.nn.Module) and candidate is not root
                and candidate is not owner):
            if any(m is root for m in candidate.modules()):
                owner = candidate
        frame = frame.f_back
    return owner


_CO_OPTIMIZED = 0x1  # inspect.CO_OPTIMIZED: a function's frame, locals in fast slots
_get_frame_var = None  # Python 3.12: PyFrame_GetVar through ctypes, found at first use


def _frame_self(frame):
    """The ``self`` argument of a method's frame (None for other frames), read without leaving
    a snapshot of the frame's locals behind. Python 3.12 and older answer ``frame.f_locals`` with
    a dict cached on the frame that holds every local as it was then, until the frame ends or
    f_locals is read again: on the training loop's frame that kept the first step's batch alive
    for the whole run (torch frees it; measured on an H100, goldens/h100/run). 3.13's f_locals
    is a view (PEP 667) and 3.12 has PyFrame_GetVar: neither caches. On 3.11 and older the
    snapshot this makes is emptied again at once: the interpreter refreshes it before any use of
    its own (locals(), a trace function), and a frame that is a method's has its own fast
    locals, so nothing but the snapshot is touched."""
    global _get_frame_var
    code = frame.f_code
    if not (code.co_flags & _CO_OPTIMIZED) or code.co_argcount == 0 \
            or code.co_varnames[0] != "self":
        return None
    if sys.version_info >= (3, 13):
        return frame.f_locals.get("self")
    if sys.version_info >= (3, 12):
        if _get_frame_var is None:
            import ctypes

            fn = ctypes.pythonapi.PyFrame_GetVar
            fn.restype, fn.argtypes = ctypes.py_object, (ctypes.py_object, ctypes.py_object)
            _get_frame_var = fn
        try:
            return _get_frame_var(frame, "self")
        except Exception:  # NameError: "self" deleted or not bound yet
            return None
    snapshot = frame.f_locals
    candidate = snapshot.get("self")
    if snapshot is not frame.f_globals:
        snapshot.clear()
    return candidate


_WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def _clean_name(name, is_wrapper):
    if is_wrapper and name.startswith("module."):
        name = name[len("module."):]
    for prefix in _WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


def _learn_root(module):
    import weakref

    s = _state
    s.root_ids.add(id(module))
    try:
        owner = _owner_of(module)
    except Exception:
        owner = None
    target = owner if owner is not None else module
    if id(target) != id(module):
        s.root_ids.add(id(target))
    s.roots.append(weakref.ref(target))
    _name_module(target)
    _record_module_tensors(target)


def _name_module(module):
    import weakref

    s = _state
    # DistributedDataParallel / DataParallel hold the model as .module: name as the model does.
    is_wrapper = type(module).__name__ in ("DistributedDataParallel", "DataParallel")
    params = list(module.named_parameters())
    size = sum(p.numel() for _, p in params)
    for kind, named in (("parameter", params), ("buffer", list(module.named_buffers()))):
        for name, t in named:
            key = id(t)
            old = s.names.get(key)
            if old is not None and old[0]() is t and old[3] >= size:
                continue
            s.names[key] = (weakref.ref(t), _clean_name(name, is_wrapper), kind, size)


def _name_of(t):
    entry = _state.names.get(id(t))
    if entry is not None and entry[0]() is t:
        return entry[1]
    return None


def _local_tensor(t):
    inner = getattr(t, "_local_tensor", None)  # DTensor (FSDP2, tensor parallel): this rank's shard
    return inner if inner is not None else t


def _tensor_record(kind, name, t, now):
    s = _state
    t = _local_tensor(t)
    if getattr(t, "is_meta", False):
        return None
    if not s.cpu_mode and not t.is_cuda:
        return None
    ptr = t.data_ptr()
    if ptr == 0:
        return None
    nbytes = t.numel() * t.element_size()
    record = {"kind": kind, "name": name, "data_ptr": ptr, "nbytes": nbytes,
              "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
              "seen_us": now, "step": s.step}
    try:
        storage = t.untyped_storage()
        storage_ptr, storage_nbytes = storage.data_ptr(), storage.nbytes()
        if storage_ptr != ptr or storage_nbytes != nbytes:
            record["storage_data_ptr"] = storage_ptr
            record["storage_nbytes"] = storage_nbytes
    except Exception:
        pass
    return record


def _record_module_tensors(module):
    """Parameters and buffers: recorded when first seen and again when their memory moved."""
    s = _state
    now = _now_us()
    for kind, named in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for _, t in named:
            name = _name_of(t)
            if name is None:
                continue
            record = _tensor_record(kind, name, t, now)
            if record is None:
                continue
            key = (kind, name, record["data_ptr"], record["nbytes"])
            if key in s.recorded:
                continue
            s.recorded.add(key)
            s.tensors.append(record)


def _optimizer_params(optimizer):
    for g, group in enumerate(optimizer.param_groups):
        for i, p in enumerate(group.get("params", ())):
            yield g, i, p


def _param_name(p, g, i, optimizer_index):
    name = _name_of(p)
    if name is None:
        name = f"optimizer{optimizer_index}.group{g}.param{i}"
    return name


def _optimizer_index(optimizer):
    s = _state
    for k, ref in enumerate(s.optimizers):
        if ref() is optimizer:
            return k
    import weakref

    s.optimizers.append(weakref.ref(optimizer))
    return len(s.optimizers) - 1


def _relearn_if_unknown(optimizer):
    """Parameters added after the first forward (adapters) or owned by another root: look again."""
    s = _state
    if any(_name_of(p) is None for _, _, p in _optimizer_params(optimizer)):
        for ref in list(s.roots):
            module = ref()
            if module is not None:
                _name_module(module)


def _record_gradients(optimizer):
    s = _state
    if s.step > TENSOR_STEPS or s.step < 1:
        return
    _relearn_if_unknown(optimizer)
    for ref in list(s.roots):
        module = ref()
        if module is not None:
            _record_module_tensors(module)
    now = _now_us()
    index = _optimizer_index(optimizer)
    for g, i, p in _optimizer_params(optimizer):
        grad = getattr(p, "grad", None)
        if grad is None:
            continue
        record = _tensor_record("gradient", _param_name(p, g, i, index), grad, now)
        if record is not None:
            s.tensors.append(record)


def _record_state(optimizer):
    s = _state
    if s.step > TENSOR_STEPS or s.step < 1:
        return
    torch = s.torch
    now = _now_us()
    index = _optimizer_index(optimizer)
    for g, i, p in _optimizer_params(optimizer):
        state = optimizer.state.get(p)
        if not state:
            continue
        base = _param_name(p, g, i, index)
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                record = _tensor_record("optimizer_state", f"{base}.{key}", value, now)
                if record is not None:
                    s.tensors.append(record)


def _begin_optimizer(optimizer):
    s = _state
    if s.phase != "optimizer":
        _enter_phase(max(s.step, 1), "optimizer")
        s.local.depth = 0  # a forward that raised left no post hook behind
    _record_gradients(optimizer)


def _optimizer_pre(optimizer, args, kwargs):
    s = _state
    with s.lock:
        closure = kwargs.get("closure") if kwargs else None
        in_kwargs = closure is not None
        if closure is None and len(args) > 1 and callable(args[1]):
            closure = args[1]
        if closure is None:
            _begin_optimizer(optimizer)
            return None
        # optimizer.step(closure) (Lightning, LBFGS): forward and backward run inside the step,
        # so the optimizer phase begins when the closure returns.

        def closure_then_optimizer(*c_args, **c_kwargs):
            result = closure(*c_args, **c_kwargs)
            if s.recording:
                try:
                    with s.lock:
                        _begin_optimizer(optimizer)
                except Exception as e:
                    _fail(f"internal error in the optimizer hook ({type(e).__name__}: {e})")
            return result

        if in_kwargs:
            kwargs = dict(kwargs)
            kwargs["closure"] = closure_then_optimizer
        else:
            args = (args[0], closure_then_optimizer) + tuple(args[2:])
        return args, kwargs


def _optimizer_post(optimizer, args, kwargs):
    s = _state
    with s.lock:
        if s.phase != "optimizer":  # a closure that never ran, or a step without hooks before
            _begin_optimizer(optimizer)
        _record_state(optimizer)
        step = s.step
        _enter_phase(step, "between")
        s.steps_completed = max(s.steps_completed, step)
        reached = s.steps_wanted > 0 and s.steps_completed >= s.steps_wanted
    if reached:
        _write("steps")
        if s.after_steps == "stop":
            _say(f"captured {s.steps_completed} steps; stopping the program "
                 "(vramscope run --keep-running to let it finish)")
            raise SystemExit(0)
        _stop_recording()


def _stop_recording():
    s = _state
    with s.lock:
        s.recording = False
        s.done = True
    for handle in s.handles:  # the program runs on at full speed
        try:
            handle.remove()
        except Exception:
            pass
    s.handles = []
    if not s.cpu_mode:
        try:
            s.torch.cuda.memory._record_memory_history(None)
        except Exception as e:
            _say(f"could not stop recording GPU memory ({type(e).__name__}: {e})", error=True)


def _mark_backward_threads(tensors):
    """The allocator's metadata is per thread, and CUDA backward runs in autograd's device threads:
    the first node of the graph sets the mark there too."""
    s = _state
    if not s.has_metadata or s.cpu_mode:
        return
    torch = s.torch
    if isinstance(tensors, torch.Tensor):
        tensors = (tensors,)
    mark = f"vramscope step={s.step} phase=backward"
    set_metadata = torch.cuda.memory._set_memory_metadata

    def prehook(grad_outputs):
        try:
            set_metadata(mark)
        except Exception:
            pass
        return None

    for t in tensors or ():
        grad_fn = getattr(t, "grad_fn", None)
        if grad_fn is not None and getattr(t, "is_cuda", False):
            grad_fn.register_prehook(prehook)


def _install_hooks(torch):
    import torch.nn.modules.module as module_mod
    import torch.optim.optimizer as optimizer_mod

    handles = _state.handles
    handles.append(module_mod.register_module_forward_pre_hook(_module_forward_pre))
    try:
        handles.append(module_mod.register_module_forward_hook(_module_forward_post,
                                                               always_call=True))
    except TypeError:  # an older torch without always_call
        handles.append(module_mod.register_module_forward_hook(_module_forward_post))
    handles.append(optimizer_mod.register_optimizer_step_pre_hook(_guarded(_optimizer_pre)))
    handles.append(optimizer_mod.register_optimizer_step_post_hook(_guarded(_optimizer_post)))

    original = torch.autograd.backward
    if getattr(original, "_vramscope", False):
        return

    def backward(*args, **kwargs):
        s = _state
        if s.recording:
            try:
                with s.lock:
                    s.local.depth = 0
                    if s.phase != "backward":
                        _enter_phase(max(s.step, 1), "backward")
                    _mark_backward_threads(args[0] if args else kwargs.get("tensors"))
            except Exception as e:
                _fail(f"internal error in the backward hook ({type(e).__name__}: {e})")
        return original(*args, **kwargs)

    import functools

    backward = functools.wraps(original)(backward)
    backward._vramscope = True
    torch.autograd.backward = backward


# --- NVML: the device's memory as nvidia-smi sees it ---------------------------------------------
#
# At CUDA's start, at the end of every phase, at an out-of-memory error and at the end, when
# pynvml (nvidia-ml-py) imports: the device's total/used/free (and the driver's reserved memory,
# NVML's v2 memory info), the compute processes on it (this one and the others) and torch's
# reserved/allocated at the same moment, so a report can decompose nvidia-smi's figure. Only
# NVML's cheap queries, only at phase boundaries. Whatever fails is said in one line and in the
# sidecar ("nvml": {"available": false, "why": ...}); nothing raises into the program.

_NVML_NOT_AVAILABLE = (1 << 64) - 1  # NVML_VALUE_NOT_AVAILABLE (unsigned long long)


class _NvmlError(Exception):
    pass


def _nvml_text(value):
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _nvml_why(e):
    text = str(e) or type(e).__name__
    return (text if isinstance(e, _NvmlError) else f"{type(e).__name__}: {text}")[:300]


def _nvml_unavailable(why, hint=""):
    s = _state
    s.nvml = None
    s.nvml_info = {"available": False, "why": why}
    # One line for the whole run: every rank records why, the process of rank 0 (or the only
    # one) says it.
    if os.environ.get("RANK", "").strip() in ("", "0"):
        _say(f"NVML not available ({why}): the report will not decompose nvidia-smi's "
             f"figure{hint}")


def _nvml_start():
    """At CUDA's start (the CPU test mode: torch's import, with VRAMSCOPE_NVML=1): import pynvml,
    initialize NVML and take the first sample."""
    s = _state
    if s.nvml_mode == "0":
        s.nvml_info = {"available": False, "why": "turned off (VRAMSCOPE_NVML=0)"}
        return
    if s.cpu_mode and s.nvml_mode != "1":
        s.nvml_info = {"available": False,
                       "why": "not sampled in the CPU test mode (VRAMSCOPE_NVML=1 samples it)"}
        return
    try:
        import pynvml
    except ImportError:
        _nvml_unavailable("nvidia-ml-py is not installed", "; pip install nvidia-ml-py")
        return
    except Exception as e:
        _nvml_unavailable(f"importing pynvml failed: {_nvml_why(e)}")
        return
    try:
        pynvml.nvmlInit()
    except Exception as e:
        _nvml_unavailable(f"nvmlInit failed: {_nvml_why(e)}")
        return
    try:
        driver = _nvml_text(pynvml.nvmlSystemGetDriverVersion())
    except Exception:
        driver = None
    import collections

    s.nvml = pynvml
    s.nvml_handles = {}
    s.nvml_samples = collections.deque(maxlen=MAX_NVML_SAMPLES)
    s.nvml_taken = 0
    s.nvml_info = {"available": True, "driver": driver}
    try:
        counters = _torch_counters()
    except Exception:
        counters = None
    _nvml_sample("start", s.started_us, counters)


def _torch_counters():
    s = _state
    if s.cpu_mode:
        return None
    cuda = s.torch.cuda
    return {"allocated": cuda.memory_allocated(), "reserved": cuda.memory_reserved()}


def _visible_devices(text):
    """CUDA_VISIBLE_DEVICES as CUDA reads it: indices or GPU-/MIG- UUIDs, up to the first entry
    that is neither."""
    out = []
    for entry in text.split(","):
        entry = entry.strip()
        if entry.isdigit() or entry.startswith(("GPU-", "MIG-")):
            out.append(entry)
        else:
            break
    return out


def _nvml_call(fn, text):
    try:
        return fn(text)
    except TypeError:  # an old pynvml that wants bytes
        return fn(text.encode())


def _nvml_handle(torch_index):
    """NVML's handle of torch's device `torch_index` and its facts. Matched by the UUID
    CUDA_VISIBLE_DEVICES names, else by the PCI bus id torch reports, else through
    CUDA_VISIBLE_DEVICES' index, else the same index (NVML counts every device, in PCI order)."""
    s = _state
    cached = s.nvml_handles.get(torch_index)
    if cached is not None:
        return cached
    pynvml = s.nvml
    visible_text = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = _visible_devices(visible_text) if visible_text is not None else None
    if visible is not None and torch_index >= len(visible):
        raise _NvmlError(f"CUDA_VISIBLE_DEVICES={visible_text!r} shows no device {torch_index}")
    entry = visible[torch_index] if visible is not None else None
    handle, matched_by = None, None
    if entry is not None and not entry.isdigit():
        handle = _nvml_call(pynvml.nvmlDeviceGetHandleByUUID, entry)
        matched_by = "uuid"
    if handle is None and not s.cpu_mode:
        get_by_bus = getattr(pynvml, "nvmlDeviceGetHandleByPciBusId", None)
        props = s.torch.cuda.get_device_properties(torch_index)
        if get_by_bus is not None and getattr(props, "pci_bus_id", None) is not None:
            bus = (f"{getattr(props, 'pci_domain_id', 0):08x}:{props.pci_bus_id:02x}:"
                   f"{getattr(props, 'pci_device_id', 0):02x}.0")
            try:
                handle = _nvml_call(get_by_bus, bus)
                matched_by = "pci_bus_id"
            except Exception:
                handle = None
    if handle is None:
        index = int(entry) if entry is not None else torch_index
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        matched_by = "CUDA_VISIBLE_DEVICES" if entry is not None else "index"
    facts = {"torch_device": torch_index, "matched_by": matched_by, "nvml_index": None,
             "pci_bus_id": None, "name": None, "memory_v2": True}
    try:
        facts["nvml_index"] = int(pynvml.nvmlDeviceGetIndex(handle))
    except Exception:
        if matched_by in ("index", "CUDA_VISIBLE_DEVICES"):
            facts["nvml_index"] = int(entry) if entry is not None else torch_index
    try:
        facts["pci_bus_id"] = _nvml_text(pynvml.nvmlDeviceGetPciInfo(handle).busId)
    except Exception:
        pass
    try:
        facts["name"] = _nvml_text(pynvml.nvmlDeviceGetName(handle))
    except Exception:
        pass
    s.nvml_handles[torch_index] = (handle, facts)
    return handle, facts


def _nvml_memory(handle, facts):
    """(total, used, free, reserved): NVML's v2 memory info where the library and driver have it
    (`reserved`: the driver's own), else v1 (reserved None)."""
    pynvml = _state.nvml
    version = getattr(pynvml, "nvmlMemory_v2", None)
    if version is not None and facts["memory_v2"]:
        try:
            m = pynvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            return int(m.total), int(m.used), int(m.free), _nvml_bytes(getattr(m, "reserved", None))
        except Exception:
            facts["memory_v2"] = False
    m = pynvml.nvmlDeviceGetMemoryInfo(handle)
    return int(m.total), int(m.used), int(m.free), None


def _nvml_bytes(value):
    if value is None:
        return None
    value = int(value)
    return None if value < 0 or value >= _NVML_NOT_AVAILABLE else value


def _nvml_sample(at, now, counters):
    """One sample; `counters` holds torch's allocated/reserved at the same moment (None on the
    CPU). The first failure stops the sampling (said once), never the program."""
    s = _state
    pynvml = s.nvml
    if pynvml is None or s.nvml_samples is None or os.getpid() != s.pid:
        return
    try:
        torch_index = 0 if s.cpu_mode else int(s.torch.cuda.current_device())
        handle, facts = _nvml_handle(torch_index)
        total, used, free, reserved = _nvml_memory(handle, facts)
        try:
            processes = [(int(p.pid), _nvml_bytes(getattr(p, "usedGpuMemory", None)))
                         for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
        except Exception:
            processes = None  # NVML cannot list them here (permissions, some MIG set-ups)
        sample = {"time_us": now, "step": s.step, "phase": s.phase, "at": at,
                  "device_total": total, "device_used": used, "device_free": free,
                  "device_reserved": reserved, "process_listed": False, "process_used": None,
                  "other_processes": None, "other_processes_more": 0,
                  "torch_reserved": None, "torch_allocated": None, "_device": torch_index}
        if counters is not None:
            sample["torch_reserved"] = counters.get("reserved")
            sample["torch_allocated"] = counters.get("allocated")
        if processes is not None:
            mine = [u for pid, u in processes if pid == s.pid]
            others = [{"pid": pid, "used": u} for pid, u in processes if pid != s.pid]
            others.sort(key=lambda p: -1 if p["used"] is None else p["used"], reverse=True)
            sample["process_listed"] = bool(mine)
            if mine and all(u is not None for u in mine):
                sample["process_used"] = sum(mine)
            sample["other_processes"] = others[:MAX_NVML_PROCESSES]
            sample["other_processes_more"] = max(0, len(others) - MAX_NVML_PROCESSES)
        s.nvml_samples.append(sample)
        s.nvml_taken += 1
    except Exception as e:
        why = _nvml_why(e)
        if not s.nvml_samples:
            _nvml_unavailable(f"NVML could not read torch's device: {why}")
        else:
            s.nvml = None
            s.nvml_info["stopped"] = f"sampling stopped after {s.nvml_taken} samples: {why}"
            _say(f"NVML sampling stopped ({why}); the capture goes on", error=False)


def _nvml_sidecar():
    """The sidecar's "nvml": the device torch used last, its samples, and what NVML could not
    tell."""
    s = _state
    info = dict(s.nvml_info or {"available": False, "why": "NVML was not set up"})
    if not info.get("available"):
        return info
    samples = list(s.nvml_samples or ())
    device = samples[-1]["_device"] if samples else None
    # A sample taken while torch was on another device (CUDA starts inside the user's
    # torch.cuda.set_device, on device 0) describes another card: left out.
    kept = [x for x in samples if x["_device"] == device]
    for x in kept:
        del x["_device"]
    facts = s.nvml_handles.get(device, (None, {}))[1]
    info.update(nvml_index=facts.get("nvml_index"), pci_bus_id=facts.get("pci_bus_id"),
                name=facts.get("name"), matched_by=facts.get("matched_by"), torch_device=device,
                samples_dropped=s.nvml_taken - len(samples),
                samples_other_device=len(samples) - len(kept), pid_note=None)
    listed = [x for x in kept if x["other_processes"] is not None]
    if listed and not any(x["process_listed"] for x in listed):
        info["pid_note"] = (f"this process (pid {s.pid}) is not among NVML's compute processes: "
                            "in a container NVML reports the host's pids, so its memory is among "
                            "the other processes'")
    elif kept and not listed:
        info["pid_note"] = "NVML could not list the device's processes (permissions, MIG)"
    info["samples"] = kept
    return info

# --- OOM ----------------------------------------------------------------------------------------


def _oom_observer(device, alloc, device_total, device_free):
    """PyTorch calls it when an allocation fails, before the exception unwinds the frames that held
    the memory: the snapshot taken here still has them."""
    s = _state
    try:
        if not s.recording or s.oom is not None:
            return
        cuda = s.torch.cuda
        s.oom_snapshot = cuda.memory._snapshot()
        s.oom = {"requested_bytes": int(alloc), "device_free": int(device_free),
                 "device_allocated": max(0, int(device_total) - int(device_free)),
                 "device_total": int(device_total), "device": int(device),
                 "allocated": cuda.memory_allocated(device), "reserved": cuda.memory_reserved(device),
                 "time_us": _now_us(), "step": s.step, "phase": s.phase, "message": None}
        _nvml_sample("oom", s.oom["time_us"], s.oom)
    except Exception as e:
        _say(f"could not take the snapshot at the out-of-memory error ({type(e).__name__}: {e})",
             error=True)


_UNITS = {"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def _parse_size(text):
    number, unit = text
    return int(float(number) * _UNITS[unit])


def _oom_from_message(message):
    """What PyTorch's out-of-memory message says (its sizes are rounded to 2 decimals)."""
    import re

    size = r"([\d.]+) (bytes|B|KiB|MiB|GiB|TiB)"
    oom = {"requested_bytes": None, "device_free": None, "device_allocated": None,
           "allocated": None, "reserved": None}
    m = re.search(r"Tried to allocate " + size, message)
    if m:
        oom["requested_bytes"] = _parse_size(m.groups())
    m = re.search(r"total capacity of " + size + r" of which " + size + " is free", message)
    if m:
        total = _parse_size(m.groups()[0:2])
        oom["device_free"] = _parse_size(m.groups()[2:4])
        oom["device_allocated"] = max(0, total - oom["device_free"])
    m = re.search(size + r" is allocated by PyTorch", message)
    if m:
        oom["allocated"] = _parse_size(m.groups())
        m2 = re.search(size + r" is reserved by PyTorch but unallocated", message)
        if m2:
            oom["reserved"] = oom["allocated"] + _parse_size(m2.groups())
    return oom


def _is_oom(exc):
    torch = _state.torch
    oom_type = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None) if torch else None
    seen = 0
    while exc is not None and seen < 8:
        if oom_type is not None and isinstance(exc, oom_type):
            return exc
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


# --- the end ------------------------------------------------------------------------------------


def _excepthook(exc_type, exc, tb):
    try:
        if _state.recording and not issubclass(exc_type, SystemExit):
            _write("exception", exc)
    except Exception:
        pass
    previous = _state.prev_excepthook or sys.__excepthook__
    previous(exc_type, exc, tb)


def _signal_handler(signum, frame):
    import signal

    try:
        if _state.recording:
            _write("signal", signum=signum)
    except Exception:
        pass
    previous = _state.prev_signals.get(signum, signal.SIG_DFL)
    if callable(previous):
        return previous(signum, frame)
    if previous == signal.SIG_IGN:
        return None
    # The default action: die of the same signal, as the program would have.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return None


def _atexit():
    if _state.recording:
        # An uncaught exception whose excepthook was replaced after ours (rich, IPython) still
        # left itself in sys.last_value.
        exc = getattr(sys, "last_value", None)
        if isinstance(exc, BaseException) and not isinstance(exc, SystemExit):
            _write("exception", exc)
        else:
            _write("exit")


def _install_exit_handlers():
    import atexit
    import signal
    import threading

    s = _state
    atexit.register(_atexit)
    s.prev_excepthook = sys.excepthook
    sys.excepthook = _excepthook
    if threading.current_thread() is not threading.main_thread():
        return  # CUDA initialized in another thread: signal handlers can only be set in the main one
    for name in ("SIGTERM", "SIGHUP"):
        signum = getattr(signal, name, None)
        if signum is None:
            continue
        try:
            previous = signal.getsignal(signum)
            if previous == signal.SIG_IGN or previous is None:
                continue  # ignored (nohup) or set outside Python: leave it alone
            s.prev_signals[signum] = previous
            signal.signal(signum, _signal_handler)
        except (ValueError, OSError):
            pass


def _label():
    rank = os.environ.get("RANK", "").strip()
    return f"rank{rank}" if rank else f"pid{os.getpid()}"


def _int_env(name):
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _framework():
    modules = sys.modules
    if "lightning.pytorch" in modules or "pytorch_lightning" in modules:
        return "lightning"
    if "transformers.trainer" in modules:
        return "hf-trainer"
    return "plain"


def _process_facts():
    import platform
    import socket

    s = _state
    torch = s.torch
    facts = {"pid": os.getpid(), "rank": _int_env("RANK"), "local_rank": _int_env("LOCAL_RANK"),
             "world_size": _int_env("WORLD_SIZE"), "hostname": socket.gethostname(),
             "argv": list(sys.argv), "python": platform.python_version(),
             "torch": getattr(torch, "__version__", None), "device": None, "device_name": None,
             "total_memory": None, "framework": _framework()}
    if not s.cpu_mode:
        try:
            device = torch.cuda.current_device()
            props = torch.cuda.get_device_properties(device)
            facts.update(device=device, device_name=props.name, total_memory=props.total_memory)
        except Exception:
            pass
    return facts


def _atomic_write(path, write):
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write(reason, exc=None, signum=None):
    """Writes the snapshot and the sidecar, once per process."""
    s = _state
    with s.lock:
        if s.written or os.getpid() != s.pid or s.torch is None or s.started_us is None:
            return
        if s.done:  # disabled by a failure
            return
        # The CPU test mode starts at `import torch`, not at CUDA's start: a process that never
        # ran a forward (a torchrun launcher, a DataLoader worker) would write an empty capture
        # that, on a GPU, it never writes. An uncaught exception is still worth its sidecar.
        if s.cpu_mode and not s.roots and not s.tensors and exc is None and reason != "oom":
            return
        s.written = True
        s.recording = False
        s.done = True
        try:
            _write_files(reason, exc, signum)
        except Exception as e:
            _say(f"could not write the capture to {s.out_dir} ({type(e).__name__}: {e}); "
                 "check that the folder exists and has room", error=True)


def _write_files(reason, exc, signum):
    import json
    import pickle

    s = _state
    now = _now_us()
    try:
        _close_phase(now, at="end")
    except Exception:
        pass
    exception = None
    oom = s.oom
    if exc is not None:
        exception = f"{type(exc).__name__}: {exc}"[:4000]
        oom_exc = _is_oom(exc)
        if oom_exc is not None:
            reason = "oom"
            message = str(oom_exc)
            if oom is None:
                oom = _oom_from_message(message)
                oom.update(time_us=now, step=s.step, phase=s.phase)
            oom["message"] = message
    elif signum is not None:
        exception = f"signal {signum}"
    label = _label()
    snapshot_name = None
    if not s.cpu_mode:
        if reason == "oom" and s.oom_snapshot is not None:
            snapshot = s.oom_snapshot
        else:
            snapshot = s.torch.cuda.memory._snapshot()
        snapshot_name = f"{label}.pickle"
        _atomic_write(os.path.join(s.out_dir, snapshot_name), lambda f: pickle.dump(snapshot, f))
        snapshot = None
        s.oom_snapshot = None
    sidecar = {
        "format": SIDECAR_FORMAT, "version": SIDECAR_VERSION,
        "snapshot": snapshot_name,
        "process": _process_facts(),
        "recording": {"stacks": s.stacks, "context": s.context, "max_entries": s.max_entries,
                      "started_us": s.started_us, "fallback": s.fallback,
                      "marks": "user_metadata" if s.has_metadata and not s.cpu_mode else "times",
                      "phase_memory": s.phase_memory, "cpu_test_mode": s.cpu_mode},
        "end": {"reason": reason, "steps_completed": s.steps_completed, "time_us": now,
                "exception": exception},
        "phases": list(s.phases),
        "tensors": s.tensors,
        "oom": oom,
        "nvml": _nvml_sidecar(),
    }
    text = json.dumps(sidecar, default=str, separators=(",", ":")).encode()
    _atomic_write(os.path.join(s.out_dir, f"{label}.sidecar.json"), lambda f: f.write(text))
