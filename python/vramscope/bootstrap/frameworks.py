"""JAX and TensorFlow under ``vramscope run``: their own memory recordings, turned on without a
change to the program (docs/design/capture.md, "JAX and TensorFlow").

- **JAX**: at the end, JAX's device memory profile is written to ``<label>.jax.prof`` (pprof:
  every live buffer with the Python stack that made it, what ``vramscope report`` reads as a JAX
  device memory profile), through ``vramscope.jax_memory``, which marks each live array's role
  (weights, optimizer state) from the optax states and TrainStates alive then, and names the
  jitted step with XLA's analysis of it (its temp buffer, the peak while it ran).
- **TensorFlow**: the profiler (``tf.profiler.experimental.start``) runs from ``import tensorflow``
  to the end, which writes ``<label>.xplane.pb``: every allocation and release of TensorFlow's BFC
  allocators with its op and region. The variables of every Keras model trained with ``fit`` are
  marked after each batch, and those of every Keras model and optimizer alive at the end
  (``vramscope.tf.mark_variables``), so that the report names weights and optimizer state.

"The end" is the first of: the steps asked for (``VRAMSCOPE_STEPS``: Keras training batches; JAX has
no step the bootstrap can see, so its profile is taken at the end whatever the steps), the process's
exit, SIGTERM or SIGHUP (a scheduler's time limit), or an uncaught exception (``oom`` for XLA's
``RESOURCE_EXHAUSTED`` and TensorFlow's ``ResourceExhaustedError``: the exception's traceback still
holds the frames' buffers, so the profile has them). Each capture gets a sidecar (``snapshot:
null``) with the process's facts, how it ended and the out-of-memory message. Under the flight
recorder (``--on-oom``) JAX's profile is written only for an out-of-memory error, and TensorFlow's
profiler, which costs on every allocation, is not started. A capture is taken on a GPU (JAX's
default backend a GPU; TensorFlow seeing one), or on the CPU in the test mode
(``VRAMSCOPE_CAPTURE_CPU``).

Nothing here raises into the program: a failure prints one ``vramscope: ...`` line and this
framework's capture stops.
"""

import os
import sys

from .state import SIDECAR_FORMAT, SIDECAR_VERSION, _now_us, _say, _state
from .writing import _atomic_write, _install_signal_handlers, _int_env, _label, _signal_hooks

# An exception is the framework's out-of-memory error when its type is one of these and (for XLA,
# whose one runtime error type carries every status) its message starts the status it names.
_OOM_TYPES = {"XlaRuntimeError": "RESOURCE_EXHAUSTED", "JaxRuntimeError": "RESOURCE_EXHAUSTED",
              "ResourceExhaustedError": ""}


class _Framework:
    """One framework's capture in this process."""

    def __init__(self, name, suffix):
        self.name = name  # "jax" or "tensorflow"
        self.suffix = suffix  # the profile's file name after the label
        self.module = None
        self.active = False  # recording (or, for JAX, due to write at the end)
        self.written = False
        self.steps = 0
        self.started_us = None
        self.logdir = None  # TensorFlow's profiler folder, until the end moves the profile out
        self.models = []  # weakrefs of the Keras models seen training

    def fail(self, what, e):
        self.active = False
        _say(f"{what} ({type(e).__name__}: {e}); this process runs on without its {self.name} "
             "capture", error=True)


_jax = _Framework("jax", "jax.prof")
_tf = _Framework("tensorflow", "xplane.pb")
_handlers = {"installed": False, "excepthook": None}


def _on_jax_imported(jax):
    s = _state
    if not s.enabled or _jax.module is not None:
        return
    _jax.module = jax
    _jax.started_us = _now_us()
    _jax.active = True  # whether a GPU is used is known only at the end
    _install_handlers()


def _on_tensorflow_imported(tf):
    s = _state
    if not s.enabled or _tf.module is not None or s.on_oom:
        return
    _tf.module = tf
    try:
        if not s.cpu_mode and not tf.config.list_physical_devices("GPU"):
            return  # no GPU: nothing of the device's to record
        _tf.logdir = os.path.join(s.out_dir, f".{_label()}.tensorflow")
        tf.profiler.experimental.start(_tf.logdir)
        _tf.started_us = _now_us()
        _tf.active = True
        _install_handlers()
    except Exception as e:
        _tf.fail("could not start TensorFlow's profiler", e)


def _on_keras_imported(keras):
    """Marks the variables after every training batch of ``fit`` and counts the batches as steps,
    through Keras's own callback list (one per ``fit``, holding the model)."""
    if not _state.enabled or _state.on_oom:
        return
    try:
        from keras.src.callbacks.callback_list import CallbackList
    except Exception:
        return  # not Keras 3 (or its layout changed): the end still marks what is alive
    original = CallbackList.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        result = original(self, batch, logs)
        try:
            _after_batch(getattr(self, "model", None))
        except SystemExit:
            raise
        except Exception as e:
            _tf.fail("could not mark the variables after a batch", e)
        return result

    CallbackList.on_train_batch_end = on_train_batch_end


def _after_batch(model):
    import weakref

    if not _tf.active:
        return
    from .. import tf as vtf

    if model is not None:
        if not any(ref() is model for ref in _tf.models):
            _tf.models.append(weakref.ref(model))
        vtf.mark_variables(model)
    _tf.steps += 1
    s = _state
    if s.steps_wanted > 0 and _tf.steps >= s.steps_wanted:
        _write(_tf, "steps")
        if s.after_steps == "stop":
            _say(f"captured {_tf.steps} training batches; stopping the program "
                 "(vramscope run --keep-running to let it finish)")
            raise SystemExit(0)


def _install_handlers():
    import atexit

    if _handlers["installed"]:
        return
    _handlers["installed"] = True
    # Registered after the framework's own exit handlers, so it runs before them (atexit is LIFO).
    atexit.register(_at_exit)
    _handlers["excepthook"] = sys.excepthook
    sys.excepthook = _excepthook
    _signal_hooks.append(_on_signal)
    _install_signal_handlers()


def _excepthook(exc_type, exc, tb):
    try:
        if not issubclass(exc_type, SystemExit):
            for framework in (_jax, _tf):
                _write(framework, "exception", exc)
    except Exception:
        pass
    previous = _handlers["excepthook"] or sys.__excepthook__
    previous(exc_type, exc, tb)


def _at_exit():
    exc = getattr(sys, "last_value", None)  # an excepthook replaced after ours left it here
    if not isinstance(exc, BaseException) or isinstance(exc, SystemExit):
        exc = None
    for framework in (_jax, _tf):
        _write(framework, "exception" if exc is not None else "exit", exc)


def _on_signal(signum):
    """SIGTERM or SIGHUP: the profiles are written now, as torch's snapshot is (writing.py)."""
    for framework in (_jax, _tf):
        _write(framework, "signal", signum=signum)


def _oom_message(exc):
    """The out-of-memory message of ``exc`` or an exception it was raised from, else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        status = _OOM_TYPES.get(type(exc).__name__)
        text = str(exc)
        if status is not None and status in text:
            return text
        exc = exc.__cause__ or exc.__context__
    return None


def _write(framework, reason, exc=None, signum=None):
    """Writes the framework's profile and its sidecar, once per process."""
    s = _state
    if not framework.active or framework.written or os.getpid() != s.pid:
        return
    oom = _oom_message(exc) if exc is not None else None
    if oom is not None:
        reason = "oom"
    if s.on_oom and oom is None:
        framework.active = False
        return
    framework.written = True
    framework.active = False
    try:
        name = f"{_label()}.{framework.suffix}"
        path = os.path.join(s.out_dir, name)
        device = _write_jax(path) if framework is _jax else _write_tensorflow(path)
        if device is None:
            return  # nothing of a GPU's to say
        if s.started_us is not None:
            return  # torch recorded in this process too: the sidecar is its snapshot's
        _write_sidecar(framework, name, device, reason, exc, oom, signum)
    except Exception as e:
        _say(f"could not write the {framework.name} capture to {s.out_dir} "
             f"({type(e).__name__}: {e}); check that the folder exists and has room", error=True)


def _write_jax(path):
    """The device memory profile, when the program used a GPU (or in the CPU test mode); returns
    the device's description, or None when there was nothing to write."""
    jax = _jax.module
    try:
        from jax._src import xla_bridge

        if not xla_bridge._backends:
            return None  # no backend started: asking for one now would start (and fill) a GPU
    except (ImportError, AttributeError):
        pass  # a jax without that registry: the default backend is asked for
    backend = jax.default_backend()
    if backend == "cpu" and not _state.cpu_mode:
        return None
    try:
        from .. import jax_memory

        profile, _ = jax_memory.profile()  # each live array's role marked
    except Exception as e:
        _say(f"could not mark the JAX buffers' roles ({type(e).__name__}: {e}); the profile is "
             "JAX's own, without them", error=True)
        profile = jax.profiler.device_memory_profile()
    _atomic_write(path, lambda f: f.write(profile))
    device = jax.devices()[0]
    try:
        stats = device.memory_stats()  # the allocator's own figures (None on the CPU)
    except Exception:
        stats = None
    return {"framework_version": jax.__version__, "backend": backend,
            "device_name": getattr(device, "device_kind", None),
            "allocator": {"settings": _settings(_JAX_SETTINGS),
                          "memory_stats": _whole_numbers(stats)}}


def _write_tensorflow(path):
    """Marks the variables alive, stops the profiler and moves its ``.xplane.pb`` to ``path``."""
    import glob
    import shutil

    tf = _tf.module
    try:
        _mark_alive()
    finally:
        tf.profiler.experimental.stop()
    try:
        written = sorted(glob.glob(os.path.join(_tf.logdir, "plugins", "profile", "*",
                                                "*.xplane.pb")), key=os.path.getmtime)
        if not written:
            raise RuntimeError("TensorFlow's profiler wrote no .xplane.pb")
        os.replace(written[-1], path)
    finally:
        shutil.rmtree(_tf.logdir, ignore_errors=True)
    gpus = tf.config.list_physical_devices("GPU")
    name = None
    if gpus:
        try:
            name = tf.config.experimental.get_device_details(gpus[0]).get("device_name")
        except Exception:
            pass
    info = None
    if gpus:
        try:
            info = tf.config.experimental.get_memory_info("GPU:0")  # {"current", "peak"}
        except Exception:
            pass
    return {"framework_version": tf.__version__, "backend": "gpu" if gpus else "cpu",
            "device_name": name,
            "allocator": {"settings": _settings(_TF_SETTINGS),
                          "memory_stats": _whole_numbers(info)}}


# The environment that decides how much the framework's allocator takes up front, as the sidecar
# records it (unset ones left out): JAX's preallocation (75% of the GPU by default) and
# TensorFlow's growth.
_JAX_SETTINGS = ("XLA_PYTHON_CLIENT_PREALLOCATE", "XLA_PYTHON_CLIENT_MEM_FRACTION",
                 "XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR")
_TF_SETTINGS = ("TF_FORCE_GPU_ALLOW_GROWTH", "TF_GPU_ALLOCATOR", "TF_CPU_ALLOCATOR_USE_BFC")


def _settings(names):
    return {name: os.environ[name] for name in names if name in os.environ}


def _whole_numbers(stats):
    """The allocator's figures that are whole numbers (bytes, counts), or None."""
    if not isinstance(stats, dict):
        return None
    return {str(k): int(v) for k, v in stats.items()
            if isinstance(v, int) and not isinstance(v, bool)}


def _mark_alive():
    """Marks the variables of the Keras models seen training, and of every Keras model and
    optimizer still alive (a custom training loop's)."""
    import gc

    from .. import tf as vtf

    models = [m for m in (ref() for ref in _tf.models) if m is not None]
    optimizers = []
    keras = sys.modules.get("keras")
    if keras is not None:
        for o in gc.get_objects():
            if isinstance(o, keras.Model) and all(o is not m for m in models):
                models.append(o)
            elif isinstance(o, keras.optimizers.Optimizer):
                optimizers.append(o)
    for model in models:
        vtf.mark_variables(model)
    attached = {id(getattr(m, "optimizer", None)) for m in models}
    loose = [v for o in optimizers if id(o) not in attached for v in (o.variables or [])]
    if loose:
        vtf.mark_variables(optimizer_variables=loose)


def _write_sidecar(framework, name, device, reason, exc, oom, signum=None):
    import json
    import platform
    import socket

    s = _state
    now = _now_us()

    sidecar = {
        "format": SIDECAR_FORMAT, "version": SIDECAR_VERSION,
        "snapshot": None,
        "profile": name,
        "process": {"pid": os.getpid(), "rank": _int_env("RANK"),
                    "local_rank": _int_env("LOCAL_RANK"), "world_size": _int_env("WORLD_SIZE"),
                    "hostname": socket.gethostname(), "argv": list(sys.argv),
                    "python": platform.python_version(), "torch": None,
                    framework.name: device["framework_version"], "backend": device["backend"],
                    "device": None, "device_name": device["device_name"], "total_memory": None,
                    "framework": framework.name, "allocator": device["allocator"]},
        "recording": {"profile": framework.name, "started_us": framework.started_us,
                      "cpu_test_mode": s.cpu_mode, "on_oom": s.on_oom},
        "end": {"reason": reason, "steps_completed": framework.steps, "time_us": now,
                "exception": (f"{type(exc).__name__}: {exc}"[:4000] if exc is not None
                              else f"signal {signum}" if signum is not None else None)},
        "phases": [],
        "tensors": [],
        "oom": None if oom is None else {"message": oom[:4000], "time_us": now},
    }
    text = json.dumps(sidecar, default=str, separators=(",", ":")).encode()
    _atomic_write(os.path.join(s.out_dir, f"{_label()}.sidecar.json"), lambda f: f.write(text))
