"""vramscope in training frameworks: ``hf.VramscopeCallback`` (a Hugging Face ``TrainerCallback``)
and ``lightning.VramscopeCallback`` (a Lightning ``Callback``). Each captures the first N
optimizer steps on every rank in-process (:func:`vramscope.capture`), writes the rank's report
database and viewer page beside its capture, and explains an out-of-memory error (what the GPU
held, the cause, what to change) before the process dies. Ranks are labelled as ``torchrun`` and
``accelerate`` number them (``RANK``): ``rank0.pickle``, ``rank0.sqlite``, ``rank0.html``.

Importing this package imports no framework; each module imports its own.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional, TextIO

from ..inprocess import Capture


def rank_label() -> str:
    """``rank<RANK>`` under torchrun/accelerate (their ``RANK``), else ``pid<pid>``: the label
    the capture's files carry, as ``vramscope run`` names them."""
    rank = os.environ.get("RANK", "").strip()
    return f"rank{rank}" if rank else f"pid{os.getpid()}"


class RankCapture:
    """What both callbacks do, framework aside: start, finish (report and page of this rank),
    and explain an out-of-memory error."""

    def __init__(self, steps: int, output_dir: str, html: bool, stream: Optional[TextIO]) -> None:
        self.steps = steps
        self.output_dir = Path(output_dir)
        self.html = html
        self.stream = stream
        self.capture: Optional[Capture] = None
        self.report_path: Optional[Path] = None
        self.page_path: Optional[Path] = None
        self.note: Optional[str] = None  # why there is no report, when there is none

    def _say(self, line: str) -> None:
        print(f"vramscope: {line}", file=self.stream or sys.stderr, flush=True)

    def start(self) -> None:
        if self.capture is not None:
            return
        self.capture = Capture(self.steps, folder=self.output_dir)
        self.capture.start()

    def done_recording(self) -> bool:
        from .. import inprocess

        state = inprocess._module("state")._state
        return self.capture is not None and bool(state.written)

    def finish(self, exc: Optional[BaseException] = None) -> None:
        """Ends the capture (if it still records) and writes this rank's report and page."""
        if self.capture is None or self.report_path is not None or self.note is not None:
            return
        self.capture.stop(exc)
        label = rank_label()
        snapshot = self.output_dir / f"{label}.pickle"
        if not snapshot.is_file():
            self.note = (f"{label}: no snapshot to report in {self.output_dir} (the recording "
                         "starts with CUDA; on a CPU only the sidecar is written)")
            self._say(self.note)
            return
        from ..api import report

        database = self.output_dir / f"{label}.sqlite"
        page = self.output_dir / f"{label}.html" if self.html else None
        report(snapshot, database=database, html=page, force=True)
        self.report_path, self.page_path = database, page
        self._say(f"{label}: report {database}" + (f", page {page}" if page else ""))

    def explain(self, exc: BaseException) -> None:
        """An out-of-memory error explained on stderr, before the process dies of it."""
        text = f"{type(exc).__name__}: {exc}"
        if "out of memory" not in text.lower():
            return
        from ..api import explain
        from ..errors import VramscopeError

        try:
            explained = explain(text)
        except VramscopeError as error:
            self._say(f"could not explain the out-of-memory error: {error.message}")
            return
        for m in explained.messages:
            self._say(f"out of memory ({m.cause}): {m.verdict}")
            for advice in m.advice[:3]:
                self._say(f"  try: {advice}")


