"""The end of a capture: the snapshot (``<label>.pickle``) and the sidecar
(``<label>.sidecar.json``), written once per process, each atomically (a temporary file renamed
into place), so that a reader never sees half of one.

They are written after the steps asked for, at exit, on an uncaught exception (``oom`` for a CUDA
out-of-memory error: the snapshot the observer took, where it ran) or on SIGTERM/SIGHUP; the
excepthook and the signal handlers then hand over to the program's own, so that the program ends as
it would have. The sidecar holds the process's facts (rank, host, torch, device, framework), how
it was recorded, how it ended, the phases, the named tensors, the out-of-memory error and NVML's
samples (docs/design/capture.md).
"""

import os
import sys

from .nvml import _nvml_sidecar
from .oom import _is_oom, _oom_from_message
from .state import SIDECAR_FORMAT, SIDECAR_VERSION, _now_us, _say, _state


def _excepthook(exc_type, exc, tb):
    try:
        if _state.recording and not issubclass(exc_type, SystemExit):
            _write("exception", exc)
    except Exception:
        pass
    previous = _state.prev_excepthook or sys.__excepthook__
    previous(exc_type, exc, tb)


# Called with the signal's number on SIGTERM/SIGHUP, after torch's capture is written and before
# the program's own handler: the other frameworks' captures (bootstrap/frameworks.py) end there.
_signal_hooks = []


def _signal_handler(signum, frame):
    import signal

    try:
        if _state.recording:
            _write("signal", signum=signum)
    except Exception:
        pass
    for hook in list(_signal_hooks):
        try:
            hook(signum)
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


# The handlers are the process's, installed once: an in-process capture (vramscope.capture) may
# start the recording again after an earlier one ended.
_handlers_installed = False


def _install_exit_handlers():
    import atexit

    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    s = _state
    atexit.register(_atexit)
    s.prev_excepthook = sys.excepthook
    sys.excepthook = _excepthook
    _install_signal_handlers()


_signals_installed = False


def _install_signal_handlers():
    """SIGTERM and SIGHUP (a scheduler's time limit, a closed terminal) end the captures before the
    program's own handler, or the default action, runs; once per process."""
    import signal
    import threading

    global _signals_installed
    if _signals_installed:
        return
    if threading.current_thread() is not threading.main_thread():
        return  # imported in another thread: signal handlers can only be set in the main one
    _signals_installed = True
    s = _state
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
        # The flight recorder (vramscope run --on-oom) writes only for an out-of-memory error:
        # one the observer saw (caught by the program or not), or the one it dies of.
        if s.on_oom and reason != "oom" and s.oom is None and (exc is None or
                                                               _is_oom(exc) is None):
            s.recording = False
            s.done = True
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
                      "phase_memory": s.phase_memory, "cpu_test_mode": s.cpu_mode,
                      "on_oom": s.on_oom},
        "end": {"reason": reason, "steps_completed": s.steps_completed, "time_us": now,
                "exception": exception},
        "phases": list(s.phases),
        "tensors": s.tensors,
        "oom": oom,
        "nvml": _nvml_sidecar(),
    }
    text = json.dumps(sidecar, default=str, separators=(",", ":")).encode()
    _atomic_write(os.path.join(s.out_dir, f"{label}.sidecar.json"), lambda f: f.write(text))


# At the end: phases and writing call each other (the end closes the last phase; the steps asked
# for end the capture), and whichever of the two is imported first is whole by now.
from .phases import _close_phase  # noqa: E402
