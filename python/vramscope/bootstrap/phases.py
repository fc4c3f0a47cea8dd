"""Recording: starting it when CUDA initializes (the allocator's history, the hooks, the exit
handlers), stopping it after the steps asked for, and the phase boundaries of each step.

Global hooks mark the boundaries: the outermost forward of the training thread begins a step's
forward (gradient accumulation's next forward stays in the same step), the wrapper of
``torch.autograd.backward`` its backward (marked in autograd's device threads too), an optimizer's
step the optimizer phase (after the closure, for ``step(closure)``) and its end the between phase.
Each boundary closes the phase's record (times, torch's memory counters, an NVML sample) and sets
the allocator's metadata to ``vramscope step=<s> phase=<p>``. A phase's name is checked against the
vocabulary's capture phases (``capture_phase``): a misspelled one is a bug of the bootstrap, which
disables capture with one line, never the program. The hooks never raise into the training loop.
"""

import os

import _thread  # not threading: a program that never imports torch should not pay for it

from ..vocabulary import CAPTURE_LIMITS, capture_phase
from .naming import _learn_root, _record_gradients, _record_state
from .nvml import _nvml_sample, _nvml_start
from .oom import _oom_observer
from .state import _fail, _now_us, _say, _state


def _start():
    """Runs when CUDA initializes (inside torch.cuda._lazy_init), or at torch's import in CPU mode.
    Must never raise: torch would turn it into an error of the user's first CUDA call."""
    s = _state
    try:
        with s.lock:
            if s.recording or s.done or os.getpid() != s.pid:
                return
            torch = s.torch
            if not s.cpu_mode and s.stacks == "none":
                # No tracebacks: the cheapest history that still names parameters, gradients and
                # optimizer state (the sidecar's tensors) and marks phases (the metadata).
                torch.cuda.memory._record_memory_history(enabled="all", context=None,
                                                         stacks="python",
                                                         max_entries=s.max_entries)
                s.context = None
                attach = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
                if attach is not None:
                    attach(_oom_observer)
            elif not s.cpu_mode:
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
            s.phases = collections.deque(maxlen=CAPTURE_LIMITS["max_phases"])
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
    capture_phase(phase)
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


# At the end: phases and writing call each other (the steps asked for end the capture; the end
# closes the last phase), and whichever of the two is imported first is whole by now.
from .writing import _install_exit_handlers, _write  # noqa: E402
