"""`vramscope explain`: every real out-of-memory message of tests/data/oom_messages (public issue
threads, figures read by hand in cases.json) through the command line, in text and JSON, from a
file, the argument and standard input; and its errors, each one line with its exit code."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import BIN, REPO, assert_one_error_line, list_dir, run_binary

DATA = REPO / "tests" / "data" / "oom_messages"
CASES = json.loads((DATA / "cases.json").read_text())["cases"]
# The figures cases.json names as the message prints them -> the JSON's names for them.
RENAMED = {"currently_allocated": "allocated_by_pytorch", "pytorch_limit": "allowed",
           "mps_allocated": "allocated_by_pytorch", "max_allowed": "allowed"}
FIGURES = ("tried_to_allocate", "total_capacity", "free", "allowed", "this_process_in_use",
           "allocated_by_pytorch", "private_pools", "reserved_unallocated", "already_allocated",
           "reserved_total", "cached", "inactive", "other_allocations")


def run_with_stdin(text: str, *args):
    proc = subprocess.run([str(BIN), "explain", *args], input=text.encode(), capture_output=True,
                          timeout=60)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


@pytest.mark.parametrize("case", CASES, ids=[c["file"].removesuffix(".txt") for c in CASES])
def test_every_real_message_is_read_and_explained(case, tmp_path):
    code, out, err = run_binary("explain", "--json", DATA / case["file"], cwd=tmp_path)
    assert code == 0, err
    report = json.loads(out)
    # Messages repeated verbatim (a logger, several ranks) are explained once.
    distinct = []
    for m in case["messages"]:
        if m not in distinct:
            distinct.append(m)
    assert len(report["messages"]) == len(distinct)
    assert sum(len(m["lines"]) for m in report["messages"]) == len(case["messages"])
    for got, expected in zip(report["messages"], distinct):
        expected = dict(expected)
        for old, new in RENAMED.items():
            if expected.get(old) is not None:
                expected[new] = expected[old]
        for name in FIGURES:
            figure = got["figures"][name]
            if name in got["not_available"]:
                # NVML's "not available" (2^64 B): named as such, never read as a size.
                assert figure is None and expected[name].startswith("1717986918"), name
            elif expected.get(name) is None:
                assert figure is None, (name, figure)
            else:
                assert figure["text"] == expected[name], name
                assert figure["lo"] <= figure["hi"]
        # Every conclusion comes with its arithmetic, and the parts of what the GPU held with
        # their ranges.
        for finding in got["findings"]:
            assert finding["arithmetic"] and finding["meaning"]
        for share in got["what_the_gpu_held"]:
            assert share["bytes"]["lo"] <= share["bytes"]["hi"]
    code, text, err = run_binary("explain", DATA / case["file"], cwd=tmp_path)
    assert code == 0, err
    assert "out-of-memory message" in text
    assert list_dir(tmp_path) == []  # explain writes nothing


# The threads that state a cause (cases.json, "thread_conclusion"), and the cause explain names.
@pytest.mark.parametrize("prefix,cause", [
    ("06", "other_processes"),      # "other programs consume the GPU RAM"
    ("14", "other_processes"),      # 15 DDP workers' contexts on GPU 0
    ("27", "other_processes"),      # the browser and other software take ~2 GB
    ("20", "memory_fraction_cap"),  # a fraction left set by test code
    ("08", "capacity"),             # one V100 too small for Flan-UL2
    ("17", "capacity"),             # batch 8 -> 4 fixed it
    ("15", "capacity"),             # 128 GiB asked of a 23.65 GiB card
    ("26", "outside_allocator"),    # CUBLAS_STATUS_ALLOC_FAILED
])
def test_the_cause_matches_what_the_thread_found(prefix, cause, tmp_path):
    (path,) = DATA.glob(f"{prefix}-*.txt")
    code, out, err = run_binary("explain", "--json", path, cwd=tmp_path)
    assert code == 0, err
    assert json.loads(out)["messages"][0]["cause"] == cause


def test_standard_input_and_the_argument_read_the_same(tmp_path):
    path = next(DATA.glob("18-*.txt"))
    text = path.read_text()
    code, from_stdin, err = run_with_stdin(text, "--json", "-")
    assert code == 0, err
    code, from_file, err = run_binary("explain", "--json", path, cwd=tmp_path)
    assert code == 0, err
    stdin_report, file_report = json.loads(from_stdin), json.loads(from_file)
    assert stdin_report["source"] == "standard input"
    assert stdin_report["messages"] == file_report["messages"]
    code, from_arg, err = run_binary("explain", "--json", text, cwd=tmp_path)
    assert code == 0, err
    assert json.loads(from_arg)["messages"] == file_report["messages"]
    assert json.loads(from_arg)["messages"][0]["ranks"] == [0]


def test_expandable_segments_already_on_changes_the_advice(tmp_path):
    path = next(DATA.glob("16-*.txt"))  # fragmentation: 0 bytes free, 2.30 GiB unallocated
    code, out, _ = run_binary("explain", "--json", path, cwd=tmp_path,
                              env={"PATH": "/usr/bin:/bin"})
    advice = json.loads(out)["messages"][0]["advice"]
    assert any("expandable_segments:True" in a and "unless it is already on" in a for a in advice)
    code, out, _ = run_binary("explain", "--json", "--alloc-conf", "expandable_segments:True",
                              path, cwd=tmp_path)
    advice = json.loads(out)["messages"][0]["advice"]
    assert any("already on" in a for a in advice)
    assert not any(a.startswith("set PYTORCH_CUDA_ALLOC_CONF") for a in advice)


def test_model_fits_the_batch_into_what_the_message_leaves(tmp_path):
    path = next(DATA.glob("17-*.txt"))  # RTX 4090, 23.65 GiB
    code, out, err = run_binary("explain", "--json", path, "--model", "gpt2", "--batch", "16",
                                "--seq", "1024", cwd=tmp_path, timeout=300)
    assert code == 0, err
    fit = json.loads(out)["fit"]
    assert fit["capacity"] <= round(23.655 * 2**30)
    assert 0 < fit["largest_batch"] < 16
    # predict --fit on the same capacity finds the same batch.
    code, out, err = run_binary("predict", "--model", "gpt2", "--seq", "1024", "--gpu", "rtx4090",
                                "--fit", f"{fit['capacity']}", "--json", "-o",
                                tmp_path / "p.sqlite", cwd=tmp_path, timeout=300)
    assert code == 0, err
    facts = json.loads(out)["prediction"]["facts"]
    assert facts["fit"] == f"largest batch that fits: {fit['largest_batch']}"


@pytest.mark.parametrize("args,code,phrase", [
    (["no such.txt\nreally"], 1, "no out-of-memory message found"),
    (["missing.log"], 1, "missing.log: no such file"),
    (["."], 1, "a folder"),
    (["--gpu", "h900", "CUDA error: out of memory"], 2, "--gpu h900"),
    (["--max-messages", "0", "x"], 2, "--max-messages"),
])
def test_errors_are_one_line(args, code, phrase, tmp_path):
    got, out, err = run_binary("explain", *args, cwd=tmp_path)
    assert got == code, err
    assert out == ""
    assert phrase in assert_one_error_line(err)


def test_text_without_a_message_exits_1(tmp_path):
    code, out, err = run_with_stdin("epoch 1 loss 2.3\nepoch 2 loss 2.1\n")
    assert code == 1 and out == ""
    assert "standard input: no out-of-memory message found" in assert_one_error_line(err)


def test_text_shows_each_figure_with_the_bytes_it_can_stand_for(tmp_path):
    """format_size prints two decimals: "2.00 MiB" is any size from 1.995 to 2.005 MiB."""
    path = next(DATA.glob("20-*.txt"))
    code, out, err = run_binary("explain", path, cwd=tmp_path)
    assert code == 0, err
    assert "Figures read (and the bytes each can stand for)" in out
    lo, hi = round(1.995 * 2**20 + 0.5), int(2.005 * 2**20)
    assert f"2.00 MiB  {lo:,} to {hi:,} B" in out
    # 1.x printed the request, 2.1+ the segment asked of CUDA.
    assert "asked for 2.00 MiB (the segment the allocator needed from CUDA" in out
    code, out, err = run_binary("explain", next(DATA.glob("01-*.txt")), cwd=tmp_path)
    assert "asked for 12.50 MiB (the request, rounded up to 512 B)" in out


def test_model_fit_takes_the_outside_allocator_flags(tmp_path):
    path = next(DATA.glob("17-*.txt"))
    code, out, err = run_binary("explain", "--json", path, "--model", "gpt2", "--batch", "16",
                                "--seq", "1024", "--cuda-context", "2000", "--library-memory",
                                "0", cwd=tmp_path, timeout=300)
    assert code == 0, err
    assert json.loads(out)["fit"]["outside_allocator"] == 2000 << 20
