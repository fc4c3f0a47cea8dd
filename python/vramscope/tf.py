"""TensorFlow: a profile that ``vramscope report`` splits into weights, optimizer state and the
step's values.

    import vramscope.tf
    with vramscope.tf.profile("logs", model) as prof:
        model.fit(x, y, epochs=1)
    # prof.path: logs/plugins/profile/<run>/<host>.xplane.pb
    #   vramscope report <that path>

TensorFlow's profiler (``tf.profiler.experimental.start``) records every allocation and release
of its BFC allocators as ``MemoryAllocation``/``MemoryDeallocation`` events in the profile's
XSpace (``.xplane.pb``): address, bytes, the op, its region (output, temp) and the tensor's
dtype and shape. On a GPU that allocator is the default; on the CPU TensorFlow uses it only when
``TF_CPU_ALLOCATOR_USE_BFC=true`` is set before TensorFlow starts, and records no memory events
otherwise.

What the events cannot say is which buffers are variables: an eagerly created variable's buffer
is the output of its initializer's last op ("AddV2"). ``profile`` (or ``mark_variables`` inside a
profile you started yourself) therefore adds one annotation per variable before the profile
stops, a TraceMe named ``vramscope.variable`` with the variable's path, the address of the
buffer that holds it then, its bytes and its role (``weight`` for the model's variables,
``optimizer_state`` for the optimizer's). ``vramscope report`` gives the buffer alive at that
address those roles; docs/design/xspace-memory-events.md describes the rules. TensorFlow may move
a variable to a new buffer when it updates it, so ``callback()`` (a Keras callback) marks them
after every batch as well:

    with vramscope.tf.profile("logs", model) as prof:
        model.fit(x, y, epochs=1, callbacks=[vramscope.tf.callback()])

Importing this module imports only the standard library; TensorFlow is imported when a
function runs.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import warnings
from typing import Any, Iterable, Iterator

ANNOTATION = "vramscope.variable"
ROLES = ("weight", "optimizer_state")


def _buffer_address(tensor: Any) -> int | None:
    """The address of the buffer behind an eager tensor (through DLPack: no copy), or None."""
    import tensorflow as tf

    try:
        capsule = tf.experimental.dlpack.to_dlpack(tensor)
    except Exception:  # dtypes DLPack cannot carry (strings, resources)
        return None
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    managed = get(capsule, b"dltensor")
    if not managed:
        return None
    # DLManagedTensor starts with its DLTensor, whose first member is `void* data`.
    return ctypes.cast(managed, ctypes.POINTER(ctypes.c_void_p))[0]


def _variable_path(variable: Any) -> str:
    return str(getattr(variable, "path", None) or getattr(variable, "name", "") or "variable")


def _value(variable: Any) -> Any:
    """The eager tensor that shares the variable's buffer (Keras 3 wraps a tf.Variable)."""
    inner = getattr(variable, "value", None)
    if inner is not None and not callable(inner):
        variable = inner
    read = getattr(variable, "read_value", None)
    return read() if read is not None else variable


def mark_variables(model: Any = None, *, variables: Iterable[Any] = (),
                   optimizer_variables: Iterable[Any] = ()) -> int:
    """Annotates the running TensorFlow profile with where each variable's buffer is.

    ``model``: a Keras model; its variables are weights and its optimizer's variables (when it
    has been compiled and built) optimizer state. ``variables`` and ``optimizer_variables`` add
    others (a ``tf.Module``'s, a custom loop's optimizer). Call it while the profiler runs, after
    the steps of interest. Returns how many variables were annotated (those whose buffer could
    not be located, such as strings, are skipped).
    """
    import tensorflow as tf

    weights = list(variables)
    state = list(optimizer_variables)
    if model is not None:
        weights += list(getattr(model, "variables", []))
        optimizer = getattr(model, "optimizer", None)
        state += list(getattr(optimizer, "variables", []) or [])
    marked = 0
    seen: set[int] = set()
    for role, group in (("weight", weights), ("optimizer_state", state)):
        for variable in group:
            if id(variable) in seen:
                continue
            seen.add(id(variable))
            tensor = _value(variable)
            address = _buffer_address(tensor)
            if address is None:
                continue
            nbytes = int(tensor.dtype.size) * int(tf.size(tensor))
            with tf.profiler.experimental.Trace(
                    ANNOTATION, path=_variable_path(variable), addr=int(address), bytes=nbytes,
                    role=role, dtype=tensor.dtype.name, shape=str(list(tensor.shape))):
                pass
            marked += 1
    return marked


def callback(model: Any = None) -> Any:
    """A Keras callback that marks the variables when training starts and after every batch.

    TensorFlow may give a variable a new buffer when it updates it (copy-on-write: an
    ``AssignSubVariableOp`` allocates the new value while the old one is still read), so one mark
    at the end names only the last buffers; marks after every batch name each step's. Pass it to
    ``fit(callbacks=[...])`` inside ``profile``; ``model`` defaults to the model being trained.
    """
    import keras

    class MarkVariables(keras.callbacks.Callback):
        def _mark(self) -> None:
            mark_variables(model if model is not None else self.model)

        def on_train_begin(self, logs: Any = None) -> None:
            self._mark()

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            self._mark()

    return MarkVariables()


class Profile:
    """What ``profile`` recorded: ``path`` is the ``.xplane.pb`` (None until it stops)."""

    def __init__(self, logdir: str) -> None:
        self.logdir = logdir
        self.path: str | None = None
        self.variables = 0


@contextlib.contextmanager
def profile(logdir: str | os.PathLike, model: Any = None, *, variables: Iterable[Any] = (),
            optimizer_variables: Iterable[Any] = ()) -> Iterator[Profile]:
    """Runs TensorFlow's profiler around the block and marks the variables before it stops.

    Warns when the CPU would record no memory: ``TF_CPU_ALLOCATOR_USE_BFC=true`` must be in the
    environment before TensorFlow starts (on a GPU, TensorFlow's default allocator records).
    """
    logdir = os.fspath(logdir)
    if os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").lower() not in ("1", "true"):
        import tensorflow as tf

        if not tf.config.list_physical_devices("GPU"):
            warnings.warn("TensorFlow records CPU memory only through its BFC allocator: set "
                          "TF_CPU_ALLOCATOR_USE_BFC=true before TensorFlow starts",
                          stacklevel=3)
    import tensorflow as tf

    before = set(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))
    result = Profile(logdir)
    tf.profiler.experimental.start(logdir)
    try:
        yield result
        result.variables = mark_variables(model, variables=variables,
                                          optimizer_variables=optimizer_variables)
    finally:
        tf.profiler.experimental.stop()
    written = set(glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb")))
    new = sorted(written - before, key=os.path.getmtime)
    result.path = new[-1] if new else None
