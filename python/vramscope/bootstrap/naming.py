"""Naming the tensors a snapshot's blocks hold (the sidecar's "tensors"), so that a report says
"model.layer.weight" and "its gradient", not only an address.

A root module's parameters and buffers are named as its outermost owner names them (the
LightningModule that calls ``self.model(x)``; the prefixes of DDP, FSDP, checkpoint and
torch.compile wrappers left out) when its first forward is seen, and recorded again when their
memory moves. At every optimizer step of the first TENSOR_STEPS, the gradients and the optimizer
state are recorded under their parameter's name (``optimizer<k>.group<g>.param<i>`` for one no
module names). Each record holds the tensor's address and size while it is alive; nothing here
keeps a tensor alive (weak references, no snapshot of a frame's locals left behind).
"""

import sys

from .state import _now_us, _state

TENSOR_STEPS = 20  # tensors are named for the first TENSOR_STEPS optimizer steps


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
