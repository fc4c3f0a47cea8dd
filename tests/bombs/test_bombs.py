"""The resource contract against hostile inputs (issue 19; docs/design/resource-contract.md).

Every file here is built at run time by bombs.py. Each must be refused, by the verb a user would
run on it, with exit status 1 (2 for a usage limit of predict), one line on stderr that names the
file and the limit, no output left behind, and a peak RSS well under 1 GiB. What PyTorch really
writes (the real fixtures, gzipped) must cost no more than the plain file.

Environment: VRAMSCOPE_BIN (the binary), VRAMSCOPE_SHARED_DIR (for the real fixtures).
"""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest

import bombs

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("VRAMSCOPE_BIN", REPO / "build" / "vramscope"))
SHARED = Path(os.environ.get("VRAMSCOPE_SHARED_DIR", REPO.parent / "shared"))
REAL = SHARED / "fixtures" / "real"
GIB = 1 << 30
# A hang guard, not a timing assertion: a bomb the contract refuses takes well under a second.
HANG_S = 300


def run_measured(args: list[str], cwd: Path) -> tuple[int, str, str, int]:
    """Runs vramscope in `cwd`; returns (exit status, stdout, stderr, peak RSS in bytes) of that
    process alone (os.wait4's resource usage)."""
    out, err = cwd.parent / "stdout.txt", cwd.parent / "stderr.txt"
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen([str(BIN), *args], cwd=cwd, stdout=o, stderr=e)
        timer = threading.Timer(HANG_S, proc.kill)
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode != -9, f"vramscope {' '.join(args)} ran past {HANG_S} s"
    return proc.returncode, out.read_text(), err.read_text(), usage.ru_maxrss * 1024


@pytest.fixture
def work(tmp_path: Path) -> Path:
    if not BIN.is_file():
        pytest.skip(f"{BIN} is not built")
    d = tmp_path / "work"
    d.mkdir()
    return d


def refused(work: Path, args: list[str], *, names: str, says: str, status: int = 1) -> int:
    """Runs a bomb; checks the refusal and that nothing was written; returns the peak RSS."""
    before = set(os.listdir(work))
    rc, out, err, rss = run_measured(args, work)
    lines = err.strip().splitlines()
    assert rc == status, (rc, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("vramscope: error: " + names), err
    assert says in lines[0], err
    assert out == ""
    after = set(os.listdir(work))
    assert after == before, f"left behind: {sorted(after - before)}"
    assert rss < GIB // 2, f"peak RSS {rss / 2**20:.0f} MiB"
    return rss


def test_shared_segments_and_blocks_are_refused(work: Path):
    path = bombs.shared_segments(work)
    assert path.stat().st_size < 64 * 1024  # 10^8 blocks in under 64 KB
    refused(work, ["report", path.name, "-o", "r.sqlite"], names=path.name,
            says="segments[0].blocks[1]: this block is the same object as one read before")


def test_shared_trace_entries_are_refused(work: Path):
    path = bombs.shared_trace_entries(work)
    refused(work, ["report", path.name], names=path.name,
            says="device_traces[0][1]: this trace entry is the same object")


def test_gzip_of_zeros_is_refused_from_its_first_bytes(work: Path):
    path = bombs.zeros_gzip(work)
    assert path.stat().st_size > 10 * 2**20  # the 13 MB file (12.5 GiB inflated)
    refused(work, ["report", path.name], names=path.name,
            says="a gzip file holding an unrecognised file, not a memory snapshot")


def test_gzip_that_starts_like_a_snapshot_is_bounded_by_the_ratio(work: Path):
    path = bombs.pickle_headed_gzip(work)
    refused(work, ["report", path.name, "-o", "r.sqlite"], names=path.name,
            says="inflates to more than 100 times its compressed size")
    refused(work, ["view", path.name], names=path.name, says="raise the limit with --max-inflate-ratio")
    refused(work, ["simulate", path.name, "--json"], names=path.name,
            says="raise the limit with --max-inflate-ratio")


def test_gzip_that_starts_like_a_profiler_trace_is_bounded_by_the_ratio(work: Path):
    """Read while it is inflated: the inflating thread stops at the bound, and its reason is the
    one line, not the JSON reader's (whose text ended early because of it)."""
    path = bombs.trace_headed_gzip(work)
    refused(work, ["report", path.name, "-o", "r.sqlite"], names=path.name,
            says="inflates to more than 100 times its compressed size")


def test_the_ratio_flag_raises_the_bound_and_the_content_decides(work: Path):
    path = bombs.pickle_headed_gzip(work, inflated_bytes=96 * 2**20)
    refused(work, ["report", path.name], names=path.name, says="--max-inflate-ratio")
    # Past the bound, the pickle itself is read (and refused: zeros are no pickle opcode).
    refused(work, ["report", path.name, "--max-inflate-ratio", "2000"], names=path.name,
            says="byte 2:")


def test_deep_json_is_refused(work: Path):
    for path in (bombs.deep_profiler_trace(work), bombs.deep_memory_timeline(work)):
        refused(work, ["report", path.name], names=path.name, says="is a list")


def test_a_config_with_millions_of_layers_is_refused(work: Path):
    path = bombs.deep_layers_config(work)
    refused(work, ["predict", "--model", path.name, "--json"], names=path.name,
            says="3,000,000 layers; vramscope models at most 10,000")


def test_steps_past_max_events_are_refused(work: Path):
    refused(work, ["predict", "--model", "gpt2", "--steps", "1000", "--grad-accum", "64",
                   "--max-events", "100000", "--json"],
            names="the prediction would hold more than 100,000 tensor events",
            says="raise --max-events", status=2)


@pytest.mark.parametrize("name", ["snapshot_torch2.6_cs336_2.7b_forward.pickle",
                                  "snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle"])
def test_a_gzipped_real_snapshot_gives_the_plain_report_at_no_more_memory(work: Path, name: str):
    real = REAL / name
    if not real.is_file():
        pytest.skip(f"{real} is absent")
    plain = work / name
    shutil.copyfile(real, plain)
    packed = work / (name + ".gz")
    packed.write_bytes(gzip.compress(real.read_bytes(), mtime=0))
    rc, plain_json, err, plain_rss = run_measured(["report", plain.name, "--json", "-q",
                                                   "-o", "plain.sqlite"], work)
    assert rc == 0, err
    rc, packed_json, err, packed_rss = run_measured(["report", packed.name, "--json", "-q",
                                                     "-o", "packed.sqlite"], work)
    assert rc == 0, err
    # The same report, apart from the database's path and the input file's size.
    def strip(text: str) -> str:
        return "\n".join(line for line in text.splitlines()
                         if '"path"' not in line and '"bytes": ' + str(plain.stat().st_size) not in line
                         and '"bytes": ' + str(packed.stat().st_size) not in line)
    assert strip(plain_json) == strip(packed_json)
    # Inflated into memory (the plain file is mapped) costs at most the small input's size again:
    # bounded here by 1/8 of the plain peak or 4 MiB, whichever is larger (allocator noise).
    assert packed_rss <= plain_rss + max(plain_rss // 8, 4 * 2**20), (plain_rss, packed_rss)


def test_a_thousand_segments_at_one_address_are_refused(work: Path):
    path = bombs.stacked_segments(work)
    refused(work, ["report", path.name, "-o", "r.sqlite"], names=path.name,
            says="segments[1]: [0x0, 0x200000) overlaps segments[0]")


def test_a_sidecar_nested_a_million_deep_is_refused(work: Path):
    path = bombs.deep_sidecar(work, REPO / "goldens" / "h200" / "mlp_adam_fp32.pickle.gz")
    refused(work, ["report", path.name, "-o", "r.sqlite"], names="run.sidecar.json",
            says="phases[0] is not an object; the sidecar is damaged")


def test_a_report_whose_table_is_an_endless_view_is_refused(work: Path, tmp_path: Path):
    report = tmp_path / "example.sqlite"
    rc, _, err, _ = run_measured(["report", "-o", str(report), "-q"], work)
    assert rc == 0, err
    path = bombs.recursive_view_report(work, report)
    refused(work, ["view", path.name, "-o", "page.html"], names=path.name,
            says="has no table vramscope_allocations")
