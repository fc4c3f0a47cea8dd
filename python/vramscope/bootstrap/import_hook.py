"""Start-up: ``install()``, which the injected sitecustomize calls in every process, and the wait
for the program's own ``import torch`` (or ``import jax``, ``import tensorflow``, ``import keras``).

``install()`` reads the contract's environment variables (docs/design/capture.md) and does nothing
unless VRAMSCOPE_CAPTURE_DIR is set. The bootstrap never imports a framework itself, so that a
program that never does (a launcher, a tool) runs as if it were not there: a meta path finder
wraps the framework's own loader for that one import, and once its ``__init__`` has run, hands
the module over: torch is asked to start the recording when CUDA initializes
(``torch.cuda._lazy_call``; at once in the CPU test mode); JAX and TensorFlow go to
``frameworks``, which turns their own recordings on.
"""

import os
import sys

from ..vocabulary import CAPTURE_LIMITS
from .frameworks import _on_jax_imported, _on_keras_imported, _on_tensorflow_imported
from .phases import _start
from .state import _SetupError, _env_int, _fail, _state


class _WatchingLoader:
    """Wraps a framework's own loader for one import, to run ``then(module)`` once its __init__ is
    done."""

    def __init__(self, inner, then):
        self.inner = inner
        self.then = then

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
        self.then(module)

    def __getattr__(self, name):
        return getattr(self.inner, name)


class _ImportFinder:
    """A meta path finder that only reacts to the top-level import of one module, once."""

    def __init__(self, name, then):
        self.name = name
        self.then = then
        self.busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.name or self.busy:
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
                spec.loader = _WatchingLoader(spec.loader, self.then)
                return spec
            return None
        except Exception as e:
            _fail(f"could not watch for the import of {self.name} ({type(e).__name__}: {e})")
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
        if s.stacks not in ("none", "python", "all"):
            raise _SetupError(f"VRAMSCOPE_STACKS={s.stacks!r} is not 'none', 'python' or 'all'")
        s.on_oom = os.environ.get("VRAMSCOPE_ON_OOM", "") == "1"
        if s.on_oom:
            s.steps_wanted = 0  # the flight recorder records until the process ends
        s.max_entries = _env_int("VRAMSCOPE_MAX_ENTRIES", CAPTURE_LIMITS["default_max_entries"])
        s.phase_memory = os.environ.get("VRAMSCOPE_PHASE_MEMORY", "") == "1"
        s.cpu_mode = os.environ.get("VRAMSCOPE_CAPTURE_CPU", "") == "1"
        s.nvml_mode = os.environ.get("VRAMSCOPE_NVML", "").strip()
        if s.nvml_mode not in ("", "0", "1"):
            raise _SetupError(f"VRAMSCOPE_NVML={s.nvml_mode!r} is not '0' or '1'")
    except _SetupError as e:
        _fail(f"{e}")
        return
    s.enabled = True
    if s.cpu_mode:
        # TensorFlow records CPU memory only through its BFC allocator (vramscope.tf), chosen when
        # it starts: the CPU test mode's stand-in for a GPU, where BFC is TensorFlow's default.
        os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "cuda"):
        _on_torch_imported(torch)
    else:
        sys.meta_path.insert(0, _ImportFinder("torch", _on_torch_imported))
    for name, then in _FRAMEWORKS.items():
        module = sys.modules.get(name)
        if module is not None:
            then(module)
        else:
            sys.meta_path.insert(0, _ImportFinder(name, then))


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


# The frameworks besides torch whose own memory recordings the bootstrap turns on (frameworks.py).
_FRAMEWORKS = {"jax": _on_jax_imported, "tensorflow": _on_tensorflow_imported,
               "keras": _on_keras_imported}
