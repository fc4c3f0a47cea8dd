"""The first hour, as a new user lives it: an empty folder with one real snapshot, every verb run
twice with the outputs it names itself and with --json, then the exit statuses and the files left
behind (docs/guide/README.md, "Exit statuses").

The rules checked here: a default-named output replaces vramscope's own earlier output of the
same kind and says so, and never anything else; an output the user named keeps "never overwrite
without --force"; --json and --summary-only write nothing unless an output is named; `run` keeps
the program's exit status, also when nothing was captured.
"""

from __future__ import annotations

import gzip
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUILT_IN_PATH, BUILT_IN_PEAK_ALLOCATED, assert_one_error_line, list_dir, \
    run_binary
from test_run_cli import make_capture

REPLACED = ", replacing the earlier one"
OOM_MESSAGE = Path(__file__).resolve().parents[1] / "data" / "oom_messages"


@pytest.fixture
def folder(tmp_path) -> Path:
    """An empty folder holding one snapshot, s.pickle: the built-in example's real recording."""
    (tmp_path / "s.pickle").write_bytes(gzip.decompress(BUILT_IN_PATH.read_bytes()))
    return tmp_path


def twice(*args, cwd) -> list[tuple[int, str, str]]:
    return [run_binary(*args, cwd=cwd) for _ in range(2)]


def is_report(path: Path) -> bool:
    with sqlite3.connect(path) as db:
        return db.execute("SELECT count(*) FROM sqlite_master WHERE name = 'vramscope_metadata'"
                          ).fetchone()[0] == 1


def test_report_twice_replaces_its_own_database(folder):
    (first, second) = twice("report", "s.pickle", cwd=folder)
    assert first[0] == 0 and second[0] == 0, (first[2], second[2])
    assert first[2] == "" and second[2] == ""
    assert "report written to s.sqlite (6 Skyline tables" in first[1]
    assert REPLACED not in first[1]
    assert second[1].rstrip().endswith("rows)" + REPLACED), second[1][-200:]
    assert list_dir(folder) == ["s.pickle", "s.sqlite"]
    assert is_report(folder / "s.sqlite")


def test_json_and_summary_only_write_nothing(folder):
    for args in (["--json"], ["--summary-only"], ["--json", "--summary-only"]):
        for code, out, err in twice("report", "s.pickle", *args, cwd=folder):
            assert code == 0, err
            assert list_dir(folder) == ["s.pickle"], args
            if "--json" in args:
                doc = json.loads(out)
                assert doc["report"] is None
                assert doc["peak_usage_bytes"] == BUILT_IN_PEAK_ALLOCATED
    # The report guide's pipe (docs/guide/report.md): the figure and nothing else on stdout, no database left behind.
    code, out, err = run_binary("report", "s.pickle", "--json", cwd=folder)
    assert json.loads(out)["peak_usage_bytes"] == BUILT_IN_PEAK_ALLOCATED
    # Named, the database is written, and the JSON says where.
    code, out, err = run_binary("report", "s.pickle", "--json", "-o", "named.sqlite", cwd=folder)
    assert code == 0, err
    assert json.loads(out)["report"]["path"] == "named.sqlite"
    assert json.loads(out)["report"]["replaced_earlier"] is False
    assert list_dir(folder) == ["named.sqlite", "s.pickle"]


def test_view_twice_replaces_its_own_page(folder):
    (first, second) = twice("view", "s.pickle", cwd=folder)
    assert first[0] == 0 and second[0] == 0, (first[2], second[2])
    assert first[1].startswith("viewer written to s.html (") and REPLACED not in first[1]
    assert f"){REPLACED}; open it in a browser" in second[1]
    assert list_dir(folder) == ["s.html", "s.pickle"]
    # The report and then its page, each twice: the page named from the database is s.html too.
    for code, out, err in twice("report", "s.pickle", "-q", cwd=folder):
        assert code == 0, err
    for code, out, err in twice("view", "s.sqlite", cwd=folder):
        assert code == 0, err
    assert list_dir(folder) == ["s.html", "s.pickle", "s.sqlite"]


def test_simulate_predict_and_explain_write_nothing_by_default(folder):
    message = sorted(OOM_MESSAGE.glob("*.txt"))[0]
    for args in (["simulate", "s.pickle"], ["simulate", "s.pickle", "--json"],
                 ["simulate", "s.pickle", "--capacity", "100MiB"],
                 ["predict", "--model", "gpt2", "--batch", "2", "--seq", "128"],
                 ["predict", "--model", "gpt2", "--batch", "2", "--seq", "128", "--json"],
                 ["explain", str(message)], ["explain", str(message), "--json"]):
        for code, out, err in twice(*args, cwd=folder):
            assert code == 0, (args, err)
            assert out, args
            if "--json" in args:
                json.loads(out)
        assert list_dir(folder) == ["s.pickle"], args


def test_a_default_name_taken_by_another_file_is_left_alone(folder):
    """A file vramscope did not write is never replaced unasked: one line says what to do."""
    (folder / "s.sqlite").write_text("my notes\n")
    (folder / "s.html").write_text("<html><head><title>mine</title></head></html>\n")
    for verb, name, kind in (("report", "s.sqlite", "report database"),
                             ("view", "s.html", "viewer page")):
        code, out, err = run_binary(verb, "s.pickle", cwd=folder)
        assert code == 1 and out == ""
        line = assert_one_error_line(err)
        assert line == (f"vramscope: error: {name}: exists and is not a vramscope {kind} (it is the "
                        "default name for this output, and the file there is left as it is); "
                        "name another output with -o, or pass --force to overwrite it")
    assert (folder / "s.sqlite").read_text() == "my notes\n"
    assert (folder / "s.html").read_text().endswith("<title>mine</title></head></html>\n")
    assert list_dir(folder) == ["s.html", "s.pickle", "s.sqlite"]
    # --force is the user's say-so.
    assert run_binary("report", "s.pickle", "-q", "--force", cwd=folder)[0] == 0
    assert is_report(folder / "s.sqlite")


def test_outputs_the_user_named_keep_the_force_rule(folder):
    for args, name in ((["report", "s.pickle", "-o", "mine.sqlite"], "mine.sqlite"),
                       (["report", "s.pickle", "--summary-only", "--html", "mine.html"],
                        "mine.html"),
                       (["view", "s.pickle", "-o", "page.html"], "page.html"),
                       (["simulate", "s.pickle", "-o", "sim.sqlite"], "sim.sqlite"),
                       (["predict", "--model", "gpt2", "--batch", "2", "--seq", "128", "-o",
                         "p.sqlite"], "p.sqlite")):
        first, second = twice(*args, cwd=folder)
        assert first[0] == 0, (args, first[2])
        assert second[0] == 1 and second[1] == "", args
        assert assert_one_error_line(second[2]) == (
            f"vramscope: error: {name}: already exists; pass --force to overwrite it")
        code, out, err = run_binary(*args, "--force", cwd=folder)
        assert code == 0, (args, err)
    assert list_dir(folder) == ["mine.html", "mine.sqlite", "p.sqlite", "page.html", "s.pickle",
                                "sim.sqlite"]


def test_run_twice_keeps_the_programs_status(folder):
    """A program that never touches CUDA: run succeeds as the program did, says that nothing was
    captured, and leaves no folder; a failing program's status comes back unchanged."""
    for code, out, err in twice("run", "--", sys.executable, "-c", "print('trained')",
                                cwd=folder):
        assert code == 0, err
        assert out == "trained\n"
        assert err.startswith("vramscope: nothing was captured: no process of ")
    for code, out, err in twice("run", "--json", "--", sys.executable, "-c", "pass", cwd=folder):
        assert code == 0 and out == "", err
    for code, out, err in twice("run", "--", sys.executable, "-c", "raise SystemExit(3)",
                                cwd=folder):
        assert code == 3, err
    assert list_dir(folder) == ["s.pickle"]


def test_report_of_a_capture_folder_twice(folder):
    runs = folder / "vramscope-run"
    runs.mkdir()
    make_capture(runs, "mlp_adam_fp32", "rank0", 0, 2)
    make_capture(runs, "mlp_sgd_fp32", "rank1", 1, 2)
    (first, second) = twice("report", "vramscope-run", cwd=folder)
    assert first[0] == 0 and second[0] == 0, (first[2], second[2])
    assert "report written to vramscope-run/report.sqlite" in first[1]
    assert second[1].rstrip().endswith(REPLACED)
    for code, out, err in twice("view", "vramscope-run", cwd=folder):
        assert code == 0, err
    code, out, err = run_binary("report", "vramscope-run", "--json", cwd=folder)
    assert code == 0 and json.loads(out)["report"] is None
    assert list_dir(runs) == ["rank0.pickle.gz", "rank0.sidecar.json", "rank1.pickle.gz",
                              "rank1.sidecar.json", "report.html", "report.sqlite"]


# Exit statuses, one row of docs/guide/README.md's table each: 0 done, 1 bad input or an output that may
# not be replaced, 2 bad usage. (3, an internal error, is a bug: no input is known to cause it.)
EXIT_STATUSES = [
    (0, ["report", "s.pickle", "-q"]),
    (1, ["report", "absent.pickle"]),
    (1, ["report", "s.sqlite.txt"]),
    (2, ["report", "--top", "-1"]),
    (0, ["view", "s.pickle", "-q"]),
    (1, ["view", "absent.pickle"]),
    (2, ["view", "--no-such-flag"]),
    (0, ["simulate", "s.pickle", "--capacity", "100MiB", "-q"]),  # an OOM there is a result
    (1, ["simulate", "absent.pickle"]),
    (2, ["simulate", "s.pickle", "--alloc-conf", "max_split_size_mb:5"]),
    (0, ["predict", "--model", "gpt2", "--batch", "512", "--seq", "1024", "--gpu", "t4", "-q"]),
    (1, ["predict", "--model", "absent.json"]),
    (2, ["predict", "--model", "gpt2", "--batch", "0"]),
    (1, ["predict", "--model", "llama2-7b", "--seq", "4096", "--fit", "t4"]),  # not even 1 fits
    (0, ["explain", "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.78 GiB total "
                    "capacity; 14.50 GiB already allocated; 5.00 MiB free; 14.70 GiB reserved in "
                    "total by PyTorch)"]),
    (1, ["explain", "all is well"]),
    (2, ["explain", "--no-such-flag"]),
    (0, ["run", "--", "true"]),
    (7, ["run", "--", "sh", "-c", "exit 7"]),
    (1, ["run", "-o", "s.pickle", "--", "true"]),  # the capture folder cannot be used
    (2, ["run", "--steps", "-3", "--", "true"]),
    (0, ["diff", "s.pickle", "s.pickle", "--fail-if", "peak_allocated > +0%", "-q"]),
    (1, ["diff", "s.pickle", "s.pickle", "--fail-if", "peak_allocated >= +0%", "-q"]),
    (1, ["diff", "s.pickle", "absent.pickle"]),
    (2, ["diff", "s.pickle", "s.pickle", "--fail-if", "peak_vram > 1GiB"]),
]


@pytest.mark.parametrize("expected,args", EXIT_STATUSES, ids=lambda v: str(v))
def test_exit_status(folder, expected, args):
    (folder / "s.sqlite.txt").write_text("not a snapshot\n")
    code, out, err = run_binary(*args, cwd=folder)
    assert code == expected, (args, out[-500:], err)
    if expected in (1, 2):
        assert_one_error_line(err)
    if expected != 0:
        assert sorted(p.name for p in folder.iterdir()) == ["s.pickle", "s.sqlite.txt"]


@pytest.mark.parametrize("args,line", [
    (["view", "s.pickle", "-o", "s.pickle", "--force"],
     "s.pickle: is the input; name another output, so that the input is not overwritten"),
    (["view", "s.pickle", "-o", "./s.pickle", "--force"],
     "./s.pickle: is the input; name another output, so that the input is not overwritten"),
    (["report", "s.pickle", "-o", "s.pickle", "--force"],
     "s.pickle: is the input; name another output, so that the input is not overwritten"),
    (["report", "s.pickle", "--summary-only", "--html", "s.pickle", "--force"],
     "s.pickle: is the input; name another output, so that the input is not overwritten"),
    (["simulate", "s.pickle", "-o", "s.pickle", "--force"],
     "s.pickle: is the input; name another output, so that the input is not overwritten"),
    (["report", "s.pickle", "--html", "s.sqlite"],
     "s.sqlite: named for two outputs of this run; give each its own file"),
    (["report", "s.pickle", "-o", "r.sqlite", "--html", "r.sqlite"],
     "r.sqlite: named for two outputs of this run; give each its own file"),
])
def test_an_output_never_overwrites_the_input_or_another_output(folder, args, line):
    """Even with --force: a typo must not cost the snapshot, and a failure leaves nothing."""
    before = (folder / "s.pickle").read_bytes()
    code, out, err = run_binary(*args, cwd=folder)
    assert (code, out) == (2, "")
    assert assert_one_error_line(err) == "vramscope: error: " + line
    assert (folder / "s.pickle").read_bytes() == before
    assert list_dir(folder) == ["s.pickle"]


def test_mcp_without_the_mcp_package_is_one_line(folder):
    """`vramscope mcp` with a Python that lacks the optional `mcp` package: the line says how to
    get it (tests/install/test_mcp.py runs a real session where it is installed)."""
    if subprocess.run([sys.executable, "-c", "import mcp"], capture_output=True).returncode == 0:
        pytest.skip(f"{sys.executable} has mcp installed")
    code, out, err = run_binary("mcp", "--python", sys.executable, cwd=folder)
    assert code == 1 and out == ""
    line = assert_one_error_line(err)
    assert "pip install mcp" in line


def test_mcp_with_a_python_that_cannot_run_is_a_usage_error(folder):
    code, out, err = run_binary("mcp", "--python", str(folder / "no-python"), cwd=folder)
    assert code == 2 and out == ""
    assert "cannot be run" in assert_one_error_line(err)
