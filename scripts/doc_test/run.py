"""Where a block's commands run: a fresh temporary folder per block, with the repository's
folders, the binary and the fixtures; and the one failure of a second run that is a pass."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from doc_test.common import REPO
from doc_test.fixtures import COMMAND_TIMEOUT_S, FIXTURES, _wrapper, binary, shared_dir
from doc_test.parse import Block

REPO_FOLDERS = ("examples", "tests", "goldens", "python")


class Context:
    """A fresh temporary folder for one block."""

    def __init__(self, block: Block):
        self.block = block
        self.root = Path(tempfile.mkdtemp(prefix="doc-test-"))
        self.work = self.root / "work"
        self.bin_dir = self.root / "bin"
        self.home = self.root / "home"
        for d in (self.work, self.bin_dir, self.home, self.root / "tmp"):
            d.mkdir()
        (self.bin_dir / "vramscope").symlink_to(binary())
        _wrapper(self.bin_dir / "python3", Path(sys.executable))
        _wrapper(self.bin_dir / "python", Path(sys.executable))
        (self.work / "build").mkdir()
        (self.work / "build" / "vramscope").symlink_to(binary())
        for name in REPO_FOLDERS:
            (self.work / name).symlink_to(REPO / name)
        if shared_dir().is_dir():
            (self.root / "shared").symlink_to(shared_dir())
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith(("VRAMSCOPE_", "PYTHON")) and k not in ("CDPATH",)}
        self.env.update(PATH=f"{self.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                        HOME=str(self.home), TMPDIR=str(self.root / "tmp"), LC_ALL="C.UTF-8")
        self.made: set = set()

    def need(self, name: str) -> None:
        maker = FIXTURES[name]
        if maker in self.made:
            return
        maker(self)
        self.made.add(maker)

    def setup(self) -> None:
        for name in self.block.fixtures:
            self.need(name)

    def run(self, command: str) -> tuple[int, str]:
        """Runs one command as a user would type it; (exit status, stdout + stderr)."""
        try:
            proc = subprocess.run(["bash", "-c", command], cwd=self.work, env=self.env,
                                  stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return 124, f"(timed out after {COMMAND_TIMEOUT_S} s)\n"
        text = (proc.stdout + proc.stderr).decode("utf-8", "replace")
        return proc.returncode, text.replace(str(self.root), "TMP")

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


OUTPUT_FLAGS = ("-o", "--output", "--html")


def named_outputs(command: str) -> set[str]:
    """The files a command names with -o/--output/--html."""
    import shlex
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return set()
    named = set()
    for k, w in enumerate(words):
        if w in OUTPUT_FLAGS and k + 1 < len(words):
            named.add(words[k + 1])
        elif w.startswith(tuple(f + "=" for f in OUTPUT_FLAGS if f.startswith("--"))):
            named.add(w.split("=", 1)[1])
    return named


def refused_named_output(command: str, code: int, out: str) -> bool:
    """The second run was refused because an output the command names exists: what the README
    promises for -o and --html ("never overwrite without --force"), so not a failure."""
    m = re.fullmatch(r"vramscope: error: (.+): already exists; pass --force to overwrite it\n?",
                     out)
    return code == 1 and m is not None and m.group(1) in named_outputs(command)
