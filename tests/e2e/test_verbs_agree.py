"""Every verb gives the same answer for the same input (issue 15): `report`, `simulate -o`, `view`
and a capture folder (what `run` reports) all go through the one pipeline (src/pipeline), so the
peaks, the categories and every block size they write agree.

For every H200 golden, every real fixture in ../shared/fixtures/real and the built-in example:

- `report X -o r.sqlite --json` and `simulate X -o s.sqlite --json` write the same Skyline tables,
  the same allocations (block size, how it is known, category, rule, owner, segment), the same
  segment timeline, device peaks and categories at the peak; simulate's JSON gives the same
  recorded peaks as report's JSON, which equal the database's;
- `view X` embeds the same peak in its page (checked with the page's own decoder, the one the
  browser runs, through tests/viewer/check_page.js);
- inputs with nothing to replay (no alloc/free trace, or no allocation in it) are refused by
  simulate with one line, and reported by report and view alike.

A capture folder (a golden laid out as `vramscope run` writes it) gives the same answer from
report, simulate and view, and differs from the bare snapshot only by what the sidecar adds.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from conftest import BIN, REAL_FIXTURES, REPO, assert_one_error_line, open_db, run_binary

GOLDENS = REPO / "goldens" / "h200"
NODE = shutil.which("node")
CHECK_PAGE = REPO / "tests" / "viewer" / "check_page.js"

# Tables that depend only on the input, never on which verb wrote them. (vramscope_metadata holds
# the creation time; vramscope_sim_* hold simulate's extra what-if runs.)
SAME_TABLES = {
    "weight_entries": "SELECT * FROM weight_entries ORDER BY id",
    "activation_entries": "SELECT * FROM activation_entries ORDER BY id",
    "stack_correlation": "SELECT * FROM stack_correlation ORDER BY entry_id, entry_type",
    "misc_sizes": "SELECT * FROM misc_sizes ORDER BY key",
    "vramscope_allocations": "SELECT * FROM vramscope_allocations ORDER BY id",
    "vramscope_devices": "SELECT * FROM vramscope_devices ORDER BY device",
    "vramscope_timeline": "SELECT * FROM vramscope_timeline ORDER BY device, event",
    "vramscope_categories_at_peak": "SELECT * FROM vramscope_categories_at_peak "
                                    "ORDER BY device, category",
    "vramscope_segment_timeline": "SELECT * FROM vramscope_segment_timeline ORDER BY id",
    "vramscope_notes": "SELECT * FROM vramscope_notes ORDER BY id",
    "vramscope_owners": "SELECT * FROM vramscope_owners ORDER BY id",
    "vramscope_regions": "SELECT * FROM vramscope_regions ORDER BY id",
    "vramscope_region_ranges": "SELECT * FROM vramscope_region_ranges ORDER BY id",
    "vramscope_fx_frames": "SELECT * FROM vramscope_fx_frames ORDER BY frame_id",
}


def inputs() -> list:
    params = [pytest.param("", id="built-in-example")]
    for path in sorted(GOLDENS.glob("*.pickle.gz")) + sorted(GOLDENS.glob("hf/*.pickle.gz")):
        params.append(pytest.param(str(path), id=str(path.relative_to(GOLDENS))))
    if REAL_FIXTURES.is_dir():
        for path in sorted(REAL_FIXTURES.iterdir()):
            if path.suffix in (".pickle", ".gz"):
                params.append(pytest.param(str(path), id=path.name))
    else:
        params.append(pytest.param(None, id="no-real-fixtures",
                                   marks=pytest.mark.skip(reason=f"{REAL_FIXTURES} is absent")))
    return params


def table(db: sqlite3.Connection, sql: str) -> list:
    return db.execute(sql).fetchall()


def page_peaks(page: Path) -> dict[int, int]:
    """{device: peak allocated} as the page's own decoder reads them."""
    proc = subprocess.run([NODE, str(CHECK_PAGE), str(page)], capture_output=True, text=True,
                          timeout=300)
    peaks = {}
    for line in proc.stdout.splitlines():
        m = re.match(r".*: report 0 device (\d+): (\{.*\})$", line)
        if m:
            peaks[int(m.group(1))] = json.loads(m.group(2))["peak"]
    assert peaks, proc.stdout + proc.stderr
    return peaks


def run_ok(*args, cwd, timeout=600) -> str:
    rc, out, err = run_binary(*args, cwd=cwd, timeout=timeout)
    assert rc == 0, f"{args}: exit {rc}: {err}"
    return out


def json_peaks(doc: dict) -> dict[int, tuple[int, int]]:
    return {d["device"]: (d["peak_allocated"]["bytes"], d["peak_reserved"]["bytes"])
            for d in doc["devices"]}


@pytest.mark.parametrize("source", inputs())
def test_report_simulate_and_view_agree(source, tmp_path):
    report_json = json.loads(run_ok("report", *([source] if source else []), "-o", "r.sqlite",
                                    "--json", cwd=tmp_path))
    peaks = json_peaks(report_json)
    with open_db(tmp_path / "r.sqlite") as r:
        assert dict(table(r, "SELECT key, size_bytes FROM misc_sizes"))["peak_usage_bytes"] == \
            max(a for a, _ in peaks.values())
        assert {row[0]: (row[1], row[2]) for row in table(
            r, "SELECT device, peak_allocated_bytes, peak_reserved_bytes FROM vramscope_devices")
        } == peaks
        replayed = table(r, "SELECT count(*) FROM sqlite_master WHERE name = "
                            "'vramscope_sim_runs'") == [(1,)] and \
            table(r, "SELECT count(*) FROM vramscope_sim_runs") != [(0,)]

    rc, out, err = run_binary("simulate", *([source] if source else []), "-o", "s.sqlite",
                              "--json", cwd=tmp_path, timeout=600)
    if not replayed:
        # Nothing to replay (no alloc/free trace, or not one allocation in it): simulate says so
        # in one line and writes nothing; report said the same in a note.
        assert rc == 1, err
        assert "nothing to replay" in assert_one_error_line(err)
        assert not (tmp_path / "s.sqlite").exists()
    else:
        assert rc == 0, err
        simulated = json.loads(out)
        for d in simulated["devices"]:
            if d["device"] in peaks:
                assert d["recorded_peak_allocated_bytes"] == peaks[d["device"]][0], d["device"]
        with open_db(tmp_path / "r.sqlite") as r, open_db(tmp_path / "s.sqlite") as s:
            for name, sql in SAME_TABLES.items():
                assert table(r, sql) == table(s, sql), f"{name} differs between report and simulate"

    if NODE is not None:
        run_ok("view", *([source] if source else []), "-o", "v.html", cwd=tmp_path)
        assert page_peaks(tmp_path / "v.html") == {dev: a for dev, (a, _) in peaks.items()}


def test_every_golden_agrees_with_pytorch_from_every_verb(tmp_path):
    """The recorded peaks every verb now shares are PyTorch's own max_memory_allocated and
    max_memory_reserved on all the goldens (their sidecars hold PyTorch's figures)."""
    checked = 0
    for path in sorted(GOLDENS.glob("*.pickle.gz")) + sorted(GOLDENS.glob("hf/*.pickle.gz")):
        sidecar_path = path.with_name(path.name.replace(".pickle.gz", ".sidecar.json"))
        if not sidecar_path.exists():
            continue  # the OOM golden: its figures are PyTorch's error message (test_oom_cli)
        sidecar = json.loads(sidecar_path.read_text())
        want = (sidecar["peak"]["max_allocated"], sidecar["peak"]["max_reserved"])
        simulated = json.loads(run_ok("simulate", path, "--json", cwd=tmp_path))
        device = simulated["devices"][0]
        assert (device["recorded_peak_allocated_bytes"],
                device["recorded_peak_reserved_bytes"]) == want, path.name
        checked += 1
    assert checked >= 26


@pytest.mark.skipif(not (GOLDENS / "metadata.json").exists(), reason="no goldens")
def test_capture_folder_agrees_across_verbs(tmp_path):
    from test_run_cli import make_capture

    folder = tmp_path / "runs"
    folder.mkdir()
    make_capture(folder, "mlp_adam_fp32", "rank0", 0, 2)
    make_capture(folder, "gpt_adamw_fp32", "rank1", 1, 2)
    report_json = json.loads(run_ok("report", folder, "--json", "-o", folder / "report.sqlite",
                                    cwd=tmp_path))
    assert (folder / "report.sqlite").is_file()
    simulated = json.loads(run_ok("simulate", folder, "--json", "-o", "s.sqlite", cwd=tmp_path))
    peaks = json_peaks(report_json)
    assert {d["device"]: d["recorded_peak_allocated_bytes"] for d in simulated["devices"]} == \
        {dev: a for dev, (a, _) in peaks.items()}
    with open_db(folder / "report.sqlite") as r, open_db(tmp_path / "s.sqlite") as s:
        for name, sql in SAME_TABLES.items():
            assert table(r, sql) == table(s, sql), f"{name} differs between report and simulate"
        # The sidecar's names reached both: the bounding rank's weights by their names.
        names = [row[0] for row in table(r, "SELECT name FROM weight_entries")]
        assert any(n.endswith(".weight") for n in names), names
        assert table(r, "SELECT label, reported FROM vramscope_ranks ORDER BY label") == \
            [("rank0", 0), ("rank1", 1)]
    if NODE is not None:
        run_ok("view", folder, cwd=tmp_path)
        assert page_peaks(folder / "report.html") == {dev: a for dev, (a, _) in peaks.items()}


@pytest.mark.parametrize("name, stem", [
    ("run3.pickle.gz", "run3"),
    ("run3.pickle", "run3"),
    ("trace.pt.trace.json.gz", "trace"),
    ("timeline.raw.json.gz", "timeline"),
])
def test_one_rule_names_every_verbs_default_output(name, stem, tmp_path):
    """report and view name their outputs alike: the input's name without its folder and without
    the suffixes of the formats vramscope reads."""
    source = tmp_path / "in" / name
    source.parent.mkdir()
    if name.endswith(".pickle.gz") or name.endswith(".pickle"):
        data = (GOLDENS / "mlp_sgd_fp32.pickle.gz").read_bytes()
        if name.endswith(".pickle"):
            import gzip
            data = gzip.decompress(data)
        source.write_bytes(data)
    else:
        fixture = {"trace.pt.trace.json.gz": "kineto_torch2.6_h100_qwen1.5-0.5b_inference.json.gz",
                   "timeline.raw.json.gz": "memory_timeline_raw_oct2023.json.gz"}[name]
        if not (REAL_FIXTURES / fixture).is_file():
            pytest.skip(f"{REAL_FIXTURES / fixture} is absent")
        shutil.copy(REAL_FIXTURES / fixture, source)
    out = tmp_path / "out"
    out.mkdir()
    run_ok("report", source, "-q", cwd=out)
    run_ok("view", source, "-q", cwd=out)
    assert sorted(p.name for p in out.iterdir()) == [f"{stem}.html", f"{stem}.sqlite"]


@pytest.mark.parametrize("model", ["gpt2", "examples/predict/mlp.json"])
def test_a_prediction_gives_one_answer_too(model, tmp_path):
    """predict goes through the same pipeline (pipeline::FromTrace): its JSON, its database and
    the page `view` makes of that database give the same peaks."""
    source = str(REPO / model) if model.endswith(".json") else model
    seq = ["--seq", "128"] if model == "gpt2" else []
    predicted = json.loads(run_ok("predict", "--model", source, "--batch", "2", *seq, "-o",
                                  "p.sqlite", "--json", cwd=tmp_path))
    peaks = json_peaks(predicted)
    with open_db(tmp_path / "p.sqlite") as db:
        assert {row[0]: (row[1], row[2]) for row in table(
            db, "SELECT device, peak_allocated_bytes, peak_reserved_bytes FROM vramscope_devices")
        } == peaks
        assert table(db, "SELECT value FROM vramscope_metadata WHERE key = 'predicted'") == \
            [("true",)]
    if NODE is not None:
        run_ok("view", "p.sqlite", "-o", "p.html", cwd=tmp_path)
        assert page_peaks(tmp_path / "p.html") == {dev: a for dev, (a, _) in peaks.items()}
