"""A Lightning ``Callback``: ``Trainer(callbacks=[VramscopeCallback(steps=3)])`` captures the
first ``steps`` optimizer steps on every rank, writes ``<output_dir>/rank<N>.sqlite`` and
``.html``, and explains an out-of-memory error (Lightning's ``on_exception``) before the process
dies (see the package's docstring)."""

from __future__ import annotations

from typing import Any, Optional, TextIO

from lightning.pytorch.callbacks import Callback

from . import RankCapture


class VramscopeCallback(Callback):  # type: ignore[misc]
    def __init__(self, steps: int = 3, output_dir: str = "vramscope", html: bool = True,
                 stream: Optional[TextIO] = None) -> None:
        super().__init__()
        self.rank = RankCapture(steps, output_dir, html, stream)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self.rank.start()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        if self.rank.done_recording():
            self.rank.finish()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.rank.finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self.rank.explain(exception)
        self.rank.finish(exception)
