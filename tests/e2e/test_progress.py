"""The progress line (src/common/progress.h): on a terminal, each stage that can take more than a
moment is named on one line that updates in place (read, replay, attribute, analyse, write, build
the page, and predict's own stages), then erased before the results; -q silences it; a pipe never
sees it; and by default it waits half a second, so a quick run shows nothing.

stderr is a real pseudo-terminal here. VRAMSCOPE_PROGRESS_DELAY_MS=0 makes every stage appear
at once, so that the stages of a small input can be seen.
"""

from __future__ import annotations

import gzip
import os
import pty
import re
import subprocess

import pytest

from conftest import BIN, BUILT_IN_PATH


def run_on_terminal(*args, cwd, delay_ms: int | None = 0) -> tuple[int, str, str]:
    """Runs vramscope with stderr on a pseudo-terminal; returns (code, stdout, what the terminal
    received)."""
    env = dict(os.environ)
    env.pop("VRAMSCOPE_PROGRESS_DELAY_MS", None)
    if delay_ms is not None:
        env["VRAMSCOPE_PROGRESS_DELAY_MS"] = str(delay_ms)
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(BIN), *map(str, args)], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    received = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the terminal closed: the process is done with it
            break
        if not chunk:
            break
        received += chunk
    os.close(master)
    out = proc.communicate(timeout=120)[0]
    return proc.returncode, out.decode(), received.decode()


def stages(terminal: str) -> list[str]:
    """The stage labels drawn, in order, each once (redraws of one stage collapse)."""
    labels = []
    for draw in re.findall(r"\rvramscope: (.*?)(?: \.\.\.| +[\d.]+% \(.*?\)) [\d.]+ s\x1b\[K",
                           terminal):
        if not labels or labels[-1] != draw:
            labels.append(draw)
    return labels


@pytest.fixture
def snapshot(tmp_path):
    (tmp_path / "s.pickle").write_bytes(gzip.decompress(BUILT_IN_PATH.read_bytes()))
    return tmp_path


LOAD_AND_ANALYSE = ["reading s.pickle", "replaying 193 events through the allocator model",
                    "attributing 72 allocations",
                    "analysing: curves, peaks, owners, regions, out-of-memory points"]


@pytest.mark.parametrize("args,expected", [
    (["report", "s.pickle", "--html", "s.html"],
     LOAD_AND_ANALYSE + ["writing s.sqlite", "building the viewer page s.html"]),
    (["view", "s.pickle"],
     LOAD_AND_ANALYSE + ["writing the report for the page", "building the viewer page s.html"]),
    (["simulate", "s.pickle", "--capacity", "100MiB", "-o", "sim.sqlite"],
     LOAD_AND_ANALYSE + ["running the allocator model under 1 what-if setting(s)",
                         "writing sim.sqlite"]),
    (["predict", "--model", "gpt2", "--seq", "128", "--fit", "h100-80gb", "-o", "p.sqlite"],
     ["finding the largest batch that fits (a simulation per size tried)",
      "predicting the step's tensors", "placing the step's tensors with the allocator model"]),
])
def test_every_stage_is_named_then_erased(snapshot, args, expected):
    code, out, terminal = run_on_terminal(*args, cwd=snapshot)
    assert code == 0, terminal
    drawn = stages(terminal)
    assert drawn[:len(expected)] == expected, drawn
    if args[0] == "predict":  # then its prediction goes through the pipeline like any input
        assert [d.split(" ")[0] for d in drawn[len(expected):]] == [
            "replaying", "attributing", "analysing:", "writing"], drawn
    # The line is erased before the results are printed, and nothing else reaches the terminal.
    assert terminal.endswith("\r\x1b[K"), terminal[-80:]
    assert re.sub(r"\r[^\r]*?\x1b\[K", "", terminal) == ""
    # The results are the same as without a terminal (the same command in a fresh folder).
    plain = snapshot / "plain"
    plain.mkdir()
    (plain / "s.pickle").write_bytes((snapshot / "s.pickle").read_bytes())
    proc = subprocess.run([str(BIN), *map(str, args)], cwd=plain, capture_output=True,
                          env=dict(os.environ, VRAMSCOPE_PROGRESS_DELAY_MS="0"))
    assert proc.returncode == 0 and proc.stderr == b""
    assert out == proc.stdout.decode()


def test_quiet_and_pipes_never_see_it(snapshot):
    code, out, terminal = run_on_terminal("report", "s.pickle", "-q", cwd=snapshot)
    assert (code, out, terminal) == (0, "", "")
    # stderr a pipe: nothing of it, even with no delay.
    proc = subprocess.run([str(BIN), "view", "s.pickle"], cwd=snapshot, capture_output=True,
                          env=dict(os.environ, VRAMSCOPE_PROGRESS_DELAY_MS="0"))
    assert proc.returncode == 0 and proc.stderr == b""


def test_a_quick_run_shows_nothing_by_default(snapshot):
    """The line waits half a second: the built-in example reports in a fraction of that."""
    code, out, terminal = run_on_terminal("report", "s.pickle", cwd=snapshot, delay_ms=None)
    assert code == 0 and "report written to s.sqlite" in out
    assert terminal == ""
