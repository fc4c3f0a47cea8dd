"""Ctrl-C during `vramscope predict`: the step simulation stops within a micro-batch, leaving
nothing written (the Python API cancels a call through the same SIGINT)."""

from __future__ import annotations

import signal
import subprocess
import time


def test_sigint_stops_a_long_prediction_at_once(vramscope_bin, tmp_path):
    """Ctrl-C (and the Python API's cancel, which sends SIGINT) stops a prediction inside its
    step simulation, not after it: 1,000 steps of a 405B model take minutes, the interrupt
    one micro-batch (exit 130, no output written)."""
    out = tmp_path / "out.sqlite"
    proc = subprocess.Popen([vramscope_bin, "predict", "--model", "llama3-405b", "--batch", "64",
                             "--steps", "1000", "--max-events", "100000000", "-o", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.5)
    assert proc.poll() is None, "the prediction ended before the signal"
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=120)
    assert proc.returncode == 130
    assert time.monotonic() - sent < 10  # one micro-batch under ASan; the whole run is minutes
    assert list(tmp_path.iterdir()) == []
