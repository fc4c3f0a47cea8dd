"""What every part of the capture bootstrap shares: the one ``_state`` (the configuration read
from the environment, the phase in progress, the names learnt, what the end writes), the small
helpers (the clock, a whole-number environment variable, the one ``vramscope: ...`` line on
stderr, disabling the bootstrap after a failure of its own) and the sidecar's format.

The state is a single object that every module imports (``from .state import _state``) and none
rebinds, so a hook, the NVML sampler and the writer at the end see the same recording. What a
capture keeps at most (here the allocator's default ``max_entries``) is the vocabulary table's
``CAPTURE_LIMITS``, the bounds the sidecar's reader expects.
"""

import os
import sys
import time

import _thread  # not threading: a program that never imports torch should not pay for it

from ..vocabulary import CAPTURE_LIMITS

SIDECAR_FORMAT = "vramscope-capture"
SIDECAR_VERSION = 1


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
        self.stacks = "python"  # or "all", or "none" (no tracebacks: context=None)
        self.on_oom = False  # the flight recorder: write only on an out-of-memory error
        self.max_entries = CAPTURE_LIMITS["default_max_entries"]
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
