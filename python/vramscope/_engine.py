"""Driving the ``vramscope`` program: the one door from Python into the C++ core.

The Python API runs the command the package installs (``<environment>/bin/vramscope``) with
``--json`` and turns its versioned JSON into typed results (docs/design/python-api.md says why
this, and not a native extension, and what it costs). Contracts:

- the program is found once: ``$VRAMSCOPE_BIN``, then the scripts folder of this Python's
  environment (where ``pip install`` puts it), then ``PATH``;
- a failed call raises the exception of its exit status with the program's one-line message;
- Ctrl-C (KeyboardInterrupt) while the program runs sends it SIGINT, waits for it to stop (it
  removes what it had started to write), and re-raises: the caller's interpreter lives on.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sysconfig
from typing import Any, Sequence

from .errors import EngineNotFound, InternalError, error_for

_ERROR_PREFIX = "vramscope: error: "
# How long a program that was sent SIGINT may take to clean up before it is killed.
_INTERRUPT_GRACE_S = 10.0


def engine_path() -> str:
    """The ``vramscope`` program the API runs (see the module's contract)."""
    explicit = os.environ.get("VRAMSCOPE_BIN")
    if explicit:
        if not os.access(explicit, os.X_OK):
            raise EngineNotFound(f"VRAMSCOPE_BIN={explicit} is not an executable file; unset it or "
                                 "point it at a vramscope program", 2)
        return explicit
    scripts = sysconfig.get_path("scripts")
    if scripts:
        beside = os.path.join(scripts, "vramscope")
        if os.access(beside, os.X_OK):
            return beside
    found = shutil.which("vramscope")
    if found:
        return found
    raise EngineNotFound("the vramscope program is not installed in this environment nor on PATH; "
                         "install the package with `pip install .` from the repository, or set "
                         "VRAMSCOPE_BIN to a built vramscope", 2)


def run_engine(args: Sequence[str], *, stdin: str | None = None,
               ok_codes: Sequence[int] = (0,)) -> subprocess.CompletedProcess[str]:
    """Runs ``vramscope ARGS`` and returns it when its status is in ``ok_codes``; otherwise raises
    the exception for its status with its one-line message."""
    command = [engine_path(), *args]
    process = subprocess.Popen(command, stdin=subprocess.PIPE if stdin is not None else
                               subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        stdout, stderr = process.communicate(stdin)
    except KeyboardInterrupt:
        _stop(process)
        raise
    except BaseException:
        process.kill()
        process.wait()
        raise
    completed = subprocess.CompletedProcess(command, process.returncode, stdout, stderr)
    if process.returncode in ok_codes:
        return completed
    raise error_for(process.returncode, one_line(stderr, process.returncode))


def run_json(args: Sequence[str], *, stdin: str | None = None,
             ok_codes: Sequence[int] = (0,)) -> tuple[dict[str, Any], int]:
    """Runs ``vramscope ARGS`` (which must include ``--json``) and returns its JSON document and
    exit status."""
    completed = run_engine(args, stdin=stdin, ok_codes=ok_codes)
    try:
        document = json.loads(completed.stdout)
    except json.JSONDecodeError as error:
        raise InternalError(f"vramscope {args[0] if args else ''} printed no JSON document "
                            f"({error}); this is a bug, please report it", 3) from None
    if not isinstance(document, dict):
        raise InternalError("vramscope printed JSON that is not an object; please report it", 3)
    return document, completed.returncode


def _stop(process: subprocess.Popen[Any]) -> None:
    """Asks a running program to stop as Ctrl-C in a shell would, then waits for it."""
    try:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=_INTERRUPT_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    except ProcessLookupError:
        pass


def one_line(stderr: str, exit_code: int) -> str:
    """The program's error line without its ``vramscope: error:`` prefix."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith(_ERROR_PREFIX):
            return line[len(_ERROR_PREFIX):]
    if lines:
        return lines[-1]
    if exit_code < 0:
        return f"vramscope was killed by signal {-exit_code}"
    return f"vramscope exited with status {exit_code} and no message"


def run_passthrough(args: Sequence[str]) -> int:
    """Runs ``vramscope ARGS`` with this process's standard streams (``run``: the user's program
    prints where it would) and returns its exit status; Ctrl-C as run_engine."""
    process = subprocess.Popen([engine_path(), *args])
    try:
        return process.wait()
    except KeyboardInterrupt:
        _stop(process)
        raise
