"""A Hugging Face ``TrainerCallback``: ``Trainer(..., callbacks=[VramscopeCallback(steps=3)])``
captures the first ``steps`` optimizer steps on every rank, writes ``<output_dir>/rank<N>.sqlite``
and ``.html`` (the report and the viewer of that rank), and explains an out-of-memory error
before the process dies (see the package's docstring)."""

from __future__ import annotations

import sys
from typing import Any, Optional, TextIO

from transformers import TrainerCallback

from . import RankCapture


class VramscopeCallback(TrainerCallback):  # type: ignore[misc]
    def __init__(self, steps: int = 3, output_dir: str = "vramscope", html: bool = True,
                 stream: Optional[TextIO] = None) -> None:
        self.rank = RankCapture(steps, output_dir, html, stream)
        self._hook_installed = False

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.rank.start()
        self._install_oom_hook()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.rank.done_recording():
            self.rank.finish()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.rank.finish()

    def _install_oom_hook(self) -> None:
        """The Trainer has no event for an exception: an uncaught one reaches sys.excepthook,
        which the capture's bootstrap has already hooked to write the capture first."""
        if self._hook_installed:
            return
        self._hook_installed = True
        previous = sys.excepthook
        rank = self.rank

        def hook(exc_type: Any, exc: Any, tb: Any) -> None:
            try:
                rank.explain(exc)
                rank.finish(exc)
            except Exception:
                pass
            previous(exc_type, exc, tb)

        sys.excepthook = hook
