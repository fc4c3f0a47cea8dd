"""In-process capture: ``with vramscope.capture(steps=3) as cap: train()`` and the
``@vramscope.profile`` decorator, for a notebook or a script that cannot be started under
``vramscope run``. The same bootstrap as ``run`` records (python/vramscope/bootstrap/: PyTorch's
allocator history with phases, the names of parameters, gradients and optimizer state, the
out-of-memory snapshot), into a folder ``cap.report()`` then reads as ``vramscope report
FOLDER`` does.

One capture at a time in a process (the allocator's history is the process's); a capture that
ended may be followed by another. torch must be importable; CUDA starts the recording (at once
when it is already initialized).
"""

from __future__ import annotations

import functools
import importlib
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar, Union

from .errors import UsageError
from .results import Report

F = TypeVar("F", bound=Callable[..., Any])


def _module(name: str) -> Any:
    """torch, or a module of the bootstrap, imported when a capture starts (never at `import
    vramscope`), and opaque to type checkers: neither is typed."""
    return importlib.import_module(name if name == "torch" else f"{__package__}.bootstrap.{name}")
PathLike = Union[str, "os.PathLike[str]"]


class Capture:
    """A capture of this process's GPU memory (see the module). ``folder``: where the snapshot
    and its sidecar are written (default: a new temporary folder); ``steps``: stop recording
    after this many optimizer steps (default: at the end of the ``with`` block)."""

    def __init__(self, steps: Optional[int] = None, *, folder: Optional[PathLike] = None,
                 stacks: str = "python", max_entries: Optional[int] = None) -> None:
        if steps is not None and steps < 1:
            raise UsageError(f"capture(steps={steps}): give 1 or more, or None for the whole "
                             "block", 2)
        if stacks not in ("python", "all"):
            raise UsageError(f"capture(stacks={stacks!r}): 'python' or 'all'", 2)
        self.steps = steps
        self.folder = Path(folder) if folder is not None else Path(
            tempfile.mkdtemp(prefix="vramscope-capture-"))
        self.stacks = stacks
        self.max_entries = max_entries
        self._active = False

    def __enter__(self) -> "Capture":
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.stop(exc if isinstance(exc, BaseException) else None)

    def start(self) -> None:
        """Starts recording (what ``with`` does)."""
        torch = _module("torch")
        state, import_hook = _module("state"), _module("import_hook")
        s = state._state
        if s.enabled and not s.done:
            raise UsageError("a vramscope capture is already recording in this process "
                             "(vramscope run, or another capture): one at a time", 2)
        self.folder.mkdir(parents=True, exist_ok=True)
        # A fresh state for this capture; the process's exit handlers stay as they are.
        keep = (s.prev_excepthook, s.prev_signals)
        s.__init__()
        s.prev_excepthook, s.prev_signals = keep
        s.out_dir = str(self.folder.resolve())
        s.steps_wanted = self.steps or 0
        s.after_steps = "continue"  # the program goes on: this is its own process
        s.stacks = self.stacks
        if self.max_entries is not None:
            s.max_entries = self.max_entries
        s.quiet = True
        s.cpu_mode = os.environ.get("VRAMSCOPE_CAPTURE_CPU", "") == "1"
        s.nvml_mode = os.environ.get("VRAMSCOPE_NVML", "").strip()
        s.enabled = True
        import_hook._on_torch_imported(torch)
        self._active = True

    def stop(self, exc: Optional[BaseException] = None) -> None:
        """Stops recording and writes the capture (what leaving the ``with`` block does); an
        exception that ended the block (an out-of-memory error) is recorded as the end."""
        if not self._active:
            return
        self._active = False
        phases, state, writing = _module("phases"), _module("state"), _module("writing")
        s = state._state
        if s.recording and not s.written:
            if exc is not None:
                writing._write("exception", exc)
            else:
                writing._write("exit")
        if s.handles or s.recording:
            phases._stop_recording()
        s.done = True

    @property
    def files(self) -> list[Path]:
        """What was written: the snapshot (with a GPU) and the sidecar."""
        return sorted(p for p in self.folder.iterdir() if p.suffix in (".pickle", ".json"))

    def report(self, **options: Any) -> Report:
        """The report of the capture, as :func:`vramscope.report` of its folder."""
        if self._active:
            raise UsageError("the capture is still recording: report after the with block", 2)
        from .api import report

        return report(self.folder, **options)


def capture(steps: Optional[int] = None, *, folder: Optional[PathLike] = None,
            stacks: str = "python", max_entries: Optional[int] = None) -> Capture:
    """``with vramscope.capture(steps=3) as cap: train()``, then ``cap.report()``."""
    return Capture(steps, folder=folder, stacks=stacks, max_entries=max_entries)


def profile(fn: Optional[F] = None, *, steps: int = 3,
            folder: Optional[PathLike] = None) -> Any:
    """Decorates a training-step function: the first call starts a capture of ``steps``
    optimizer steps, later calls run on until it has them; ``fn.capture`` is the
    :class:`Capture` (``fn.capture.report()`` once they ran)."""

    def wrap(step_fn: F) -> F:
        holder: dict[str, Capture] = {}

        @functools.wraps(step_fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            state = _module("state")
            cap = holder.get("capture")
            if cap is None:
                cap = holder["capture"] = Capture(steps, folder=folder)
                wrapper.capture = cap  # type: ignore[attr-defined]
                cap.start()
            try:
                return step_fn(*args, **kwargs)
            except BaseException as e:
                cap.stop(e)
                raise
            finally:
                if cap._active and state._state.done:
                    cap.stop()

        wrapper.capture = None  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return wrap(fn) if fn is not None else wrap
