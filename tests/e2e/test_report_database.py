"""End-to-end checks of the report database `vramscope report` writes: the Skyline /
DeepView.Profile tables exactly as the spec defines them, their invariants, and the vramscope_*
tables against the exact figures of the real snapshots in ../shared/fixtures/real and of the
built-in example (a real H200 capture, whose figures are PyTorch's own).

Each report is built once per (input, project root) and shared by the tests of this module. The
inputs are the built-in example and every *.pickle in VRAMSCOPE_SHARED_DIR/fixtures/real (those
cases are skipped when the folder is absent). Each input is reported twice: with the default
project root (the working folder, which holds none of the snapshot's files) and with
--project-root /, which puts every absolute frame inside the project, so that stack_frames is
filled and its invariants are exercised on real stacks.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import (REPO, BUILT_IN_ALLOCATED_AT_DUMP, BUILT_IN_NAME, BUILT_IN_PATH,
                      BUILT_IN_RESERVED_AT_DUMP, BUILT_IN_SIDECAR, CATEGORIES, SKYLINE_TABLES,
                      SPEC_SCHEMA, open_db, real_snapshot_files, run_binary)

# A copy of the ```sql block of shared/spec/report-schema.md, used when the spec is not there.
EXPECTED_SKYLINE_SQL = """\
CREATE TABLE weight_entries (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  size_bytes INTEGER NOT NULL,
  grad_size_bytes INTEGER NOT NULL
);
CREATE TABLE activation_entries (
  id INTEGER PRIMARY KEY,
  operation_name TEXT NOT NULL,
  size_bytes INTEGER NOT NULL
);
CREATE TABLE entry_types (
  entry_type INTEGER PRIMARY KEY,
  name TEXT NOT NULL
);
CREATE TABLE stack_correlation (
  correlation_id INTEGER PRIMARY KEY,
  entry_id INTEGER NOT NULL,
  entry_type INTEGER NOT NULL,
  UNIQUE (correlation_id, entry_id)
);
CREATE UNIQUE INDEX entry_type_and_id
  ON stack_correlation(entry_type, entry_id);
CREATE TABLE stack_frames (
  correlation_id INTEGER NOT NULL,
  ordering INTEGER NOT NULL,
  file_path TEXT NOT NULL,
  line_number INTEGER NOT NULL,
  PRIMARY KEY (correlation_id, ordering)
);
CREATE TABLE misc_sizes (
  key TEXT PRIMARY KEY,
  size_bytes INT NOT NULL
);
"""

# "Exact figures" of shared/fixtures/real/README.md:
# devices, segments, small-pool segments, blocks, active blocks, reserved bytes, allocated bytes,
# trace entries by (device, action).
REAL_FIGURES = {
    "snapshot_2025_eor_cnn_small_fulltrace_snapshotmarkers.pickle": dict(
        devices=[0], segments=10, small=4, blocks=54, active=40,
        reserved=134_217_728, allocated=48_760_832,
        actions={(0, "alloc"): 1935, (0, "segment_alloc"): 7, (0, "free_requested"): 1926,
                 (0, "free_completed"): 1926, (0, "snapshot"): 9}),
    "snapshot_feb2024_diffusers_cuda1_nohistory.pickle": dict(
        devices=[1], segments=673, small=240, blocks=6644, active=6240,
        reserved=11_274_289_152, allocated=10_715_782_144,
        actions={(0, "snapshot"): 1, (1, "free_completed"): 1}),
    "snapshot_jun2024_deepseek1.3b_finetune_cppframes.pickle": dict(
        devices=[0], segments=215, small=51, blocks=1079, active=802,
        reserved=6_471_811_072, allocated=2_297_283_072,
        actions={(0, "alloc"): 3505, (0, "free_requested"): 3325, (0, "free_completed"): 3325,
                 (0, "segment_alloc"): 152}),
    "snapshot_torch2.0_flexgen_opt_oom.pickle": dict(
        devices=[0], segments=176, small=2, blocks=463, active=460,
        reserved=11_844_714_496, allocated=11_840_159_744,
        actions={(0, "snapshot"): 1}),
    "snapshot_torch2.11_windows_cs336_compilectx.pickle": dict(
        devices=[0], segments=216, small=8, blocks=455, active=229,
        reserved=14_180_941_824, allocated=1_377_753_600,
        actions={(0, "alloc"): 1721, (0, "free_requested"): 1721, (0, "free_completed"): 1721}),
    "snapshot_torch2.6_cs336_2.7b_forward.pickle": dict(
        devices=[0], segments=961, small=12, blocks=2077, active=1841,
        reserved=34_898_706_432, allocated=34_094_880_256,
        actions={(0, "segment_free"): 742, (0, "alloc"): 3020, (0, "free_requested"): 2377,
                 (0, "free_completed"): 2377, (0, "segment_alloc"): 178}),
}
# The built-in example (goldens/h200/mlp_adam_fp32.pickle.gz): PyTorch's own counters before the
# dump (memory_stats in the sidecar) and the trace's actions as the capture script counted them.
BUILT_IN_FIGURES = dict(
    devices=[0], segments=15, small=3, blocks=26, active=19,
    reserved=BUILT_IN_RESERVED_AT_DUMP, allocated=BUILT_IN_ALLOCATED_AT_DUMP,
    actions={(0, "alloc"): 72, (0, "free_requested"): 53, (0, "free_completed"): 53,
             (0, "segment_alloc"): 15})


def test_built_in_figures_are_pytorchs():
    sidecar = json.loads(BUILT_IN_SIDECAR.read_text())["snapshot"]
    stats = sidecar["memory_before_dump"]["stats"]
    assert BUILT_IN_FIGURES["segments"] == stats["segment.all.current"]
    assert BUILT_IN_FIGURES["active"] == stats["allocation.all.current"]
    assert BUILT_IN_FIGURES["reserved"] == stats["reserved_bytes.all.current"]
    assert BUILT_IN_FIGURES["allocated"] == stats["allocated_bytes.all.current"]
    assert BUILT_IN_FIGURES["actions"] == {
        (0, a): n for a, n in sidecar["summary"]["actions"].items()}


# --------------------------------------------------------------------------------------------
# The expected Skyline schema
# --------------------------------------------------------------------------------------------


def split_statements(sql: str) -> dict[str, str]:
    """{table or index name: statement text without the ';'}"""
    out = {}
    for statement in sql.split(";"):
        statement = statement.strip()
        if not statement:
            continue
        m = re.match(r"CREATE (?:UNIQUE )?(?:TABLE|INDEX) (\w+)", statement)
        assert m, f"not a CREATE statement: {statement!r}"
        out[m.group(1)] = statement
    return out


def spec_sql_block() -> str | None:
    if not SPEC_SCHEMA.is_file():
        return None
    m = re.search(r"```sql\n(.*?)```", SPEC_SCHEMA.read_text(), re.S)
    assert m, f"no ```sql block in {SPEC_SCHEMA}"
    return m.group(1)


def expected_skyline_schema() -> dict[str, str]:
    return split_statements(spec_sql_block() or EXPECTED_SKYLINE_SQL)


def test_embedded_schema_copy_matches_spec():
    spec = spec_sql_block()
    if spec is None:
        pytest.skip(f"{SPEC_SCHEMA} is absent")
    assert split_statements(spec) == split_statements(EXPECTED_SKYLINE_SQL), (
        "the spec's schema changed: update EXPECTED_SKYLINE_SQL")
    assert set(split_statements(spec)) == set(SKYLINE_TABLES) | {"entry_type_and_id"}


# --------------------------------------------------------------------------------------------
# Reports, built once per module
# --------------------------------------------------------------------------------------------

SOURCES = [pytest.param("builtin", id="builtin")]
_real = real_snapshot_files()
if _real:
    SOURCES += [pytest.param(str(f), id=f.name) for f in _real]
else:
    SOURCES.append(pytest.param(None, id="no-real-fixtures",
                                marks=pytest.mark.skip(reason="shared/fixtures/real is absent")))
ROOTS = [pytest.param("default", id="root=cwd"), pytest.param("/", id="root=slash")]


class Report:
    def __init__(self, source: str, root: str, db: Path, summary: dict, workdir: Path):
        self.source, self.root, self.db, self.summary, self.workdir = (
            source, root, db, summary, workdir)
        self.name = None if source == "builtin" else Path(source).name

    def query(self, sql: str, *args):
        with open_db(self.db) as db:
            return db.execute(sql, args).fetchall()

    def scalar(self, sql: str, *args):
        rows = self.query(sql, *args)
        assert len(rows) == 1, rows
        return rows[0][0]


@pytest.fixture(scope="module")
def report_cache(tmp_path_factory, vramscope_bin):
    return {"dir": tmp_path_factory.mktemp("reports"), "reports": {}}


@pytest.fixture(params=SOURCES)
def source(request):
    return request.param


@pytest.fixture(params=ROOTS)
def report(request, source, report_cache) -> Report:
    root = request.param
    key = (source, root)
    cache = report_cache["reports"]
    if key not in cache:
        workdir = report_cache["dir"] / f"r{len(cache)}"
        workdir.mkdir()
        args = ["report"] + ([] if source == "builtin" else [source])
        args += ["-o", "report.sqlite", "--json"]
        if root != "default":
            args += ["--project-root", root]
        rc, out, err = run_binary(*args, cwd=workdir, timeout=120)
        assert rc == 0, f"vramscope {' '.join(args)} failed ({rc}): {err}"
        cache[key] = Report(source, root, workdir / "report.sqlite", json.loads(out), workdir)
    return cache[key]


# --------------------------------------------------------------------------------------------
# Skyline tables
# --------------------------------------------------------------------------------------------


def test_user_version(report):
    assert report.scalar("PRAGMA user_version") == 1


def test_skyline_schema_is_exactly_the_spec(report):
    expected = expected_skyline_schema()
    actual = {name: sql for name, sql in report.query(
        "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL")}
    for name, statement in expected.items():
        assert name in actual, f"{name} is missing"
        assert actual[name] == statement, f"{name} differs from the spec"


def test_extra_tables_are_prefixed(report):
    allowed = set(SKYLINE_TABLES) | {"entry_type_and_id"}
    names = report.query("SELECT type, name FROM sqlite_master")
    vramscope = [n for _, n in names if n.startswith("vramscope_")]
    assert vramscope, "no vramscope_ tables"
    for kind, name in names:
        if name in allowed or name.startswith("vramscope_") or name.startswith("sqlite_autoindex_"):
            continue
        pytest.fail(f"{kind} {name!r} is neither a Skyline table nor prefixed with vramscope_")
    tables = {n for k, n in names if k == "table"}
    assert set(SKYLINE_TABLES) <= tables
    assert report.summary["report"]["vramscope_tables"] == len(
        [n for n in tables if n.startswith("vramscope_")])
    assert report.summary["report"]["skyline_tables"] == len(SKYLINE_TABLES)


def test_entry_types(report):
    assert report.query("SELECT entry_type, name FROM entry_types ORDER BY entry_type") == [
        (1, "weight"), (2, "activation")]


def test_stack_correlation_points_to_entries(report):
    weights = {r[0] for r in report.query("SELECT id FROM weight_entries")}
    activations = {r[0] for r in report.query("SELECT id FROM activation_entries")}
    seen = defaultdict(int)
    for cid, entry_id, entry_type in report.query(
            "SELECT correlation_id, entry_id, entry_type FROM stack_correlation"):
        assert entry_type in (1, 2), (cid, entry_type)
        entries = weights if entry_type == 1 else activations
        assert entry_id in entries, (cid, entry_id, entry_type)
        seen[(entry_type, entry_id)] += 1
    # One stack per entry.
    assert set(seen) == {(1, i) for i in weights} | {(2, i) for i in activations}
    assert all(n == 1 for n in seen.values())


def test_stack_frames(report):
    correlations = {r[0] for r in report.query("SELECT correlation_id FROM stack_correlation")}
    orderings = defaultdict(list)
    for cid, ordering, path, line in report.query(
            "SELECT correlation_id, ordering, file_path, line_number FROM stack_frames"):
        assert cid in correlations, f"stack_frames row for unknown correlation {cid}"
        orderings[cid].append(ordering)
        assert path, "empty file_path"
        assert not path.startswith("/"), f"absolute file_path {path!r}"
        assert not re.match(r"^[A-Za-z]:[\\/]", path), f"absolute Windows file_path {path!r}"
        assert line >= 1, f"line_number {line} is not 1-based ({path})"
    for cid, values in orderings.items():
        assert sorted(values) == list(range(len(values))), (
            f"orderings of correlation {cid} are not 0..n-1: {sorted(values)}")


def test_stack_frames_follow_project_root(report):
    frames = report.scalar("SELECT count(*) FROM stack_frames")
    if report.root == "default":
        # The working folder holds none of the snapshot's files.
        assert frames == 0
    elif report.name is not None and report.scalar(
            "SELECT count(*) FROM vramscope_frames WHERE file_path LIKE '/%'") > 0 and \
            report.scalar("SELECT count(*) FROM stack_correlation") > 0:
        assert frames > 0, "--project-root / should keep every absolute frame"
    assert report.scalar("SELECT value FROM vramscope_metadata WHERE key = 'project_root'") == (
        str(report.workdir.resolve()) if report.root == "default" else report.root)


def test_misc_sizes(report):
    misc = dict(report.query("SELECT key, size_bytes FROM misc_sizes"))
    peak = misc.get("peak_usage_bytes")
    assert peak is not None and peak > 0
    assert peak == report.scalar("SELECT max(peak_allocated_bytes) FROM vramscope_devices")
    assert peak == report.summary["peak_usage_bytes"]
    # Every byte live at the peak has a category; the categories add up to the peak.
    by_category = {k[len("peak_"):-len("_bytes")]: v for k, v in misc.items()
                   if k.startswith("peak_")
                   and k not in ("peak_usage_bytes", "peak_reserved_bytes")}
    assert set(by_category) == set(CATEGORIES)
    assert sum(by_category.values()) == peak
    assert misc["peak_reserved_bytes"] == report.scalar(
        "SELECT max(peak_reserved_bytes) FROM vramscope_devices")


def test_entries_add_up_to_their_categories(report):
    """Single-device reports: the weight entries are the weights live at the peak; the activation
    entries the activations live when they peak (at least those live at the memory peak)."""
    if report.scalar("SELECT count(*) FROM vramscope_devices") != 1:
        pytest.skip("several devices")
    misc = dict(report.query("SELECT key, size_bytes FROM misc_sizes"))
    assert report.scalar("SELECT coalesce(sum(size_bytes), 0) FROM weight_entries") == \
        misc["peak_weight_bytes"]
    activations = report.scalar("SELECT coalesce(sum(size_bytes), 0) FROM activation_entries")
    assert activations == misc["activations_at_their_peak_bytes"]
    assert activations >= misc["peak_activation_bytes"]
    assert report.scalar("SELECT count(*) FROM weight_entries WHERE size_bytes < 0 "
                         "OR grad_size_bytes < 0") == 0
    assert report.scalar("SELECT count(*) FROM activation_entries WHERE size_bytes < 0") == 0


# --------------------------------------------------------------------------------------------
# vramscope_ tables
# --------------------------------------------------------------------------------------------


REPORT_SCHEMA = json.loads((REPO / "src" / "report" / "report_schema.json").read_text())


def test_vramscope_tables_are_the_schema_data(report):
    """Every vramscope_ table of a report is the one src/report/report_schema.json declares: the
    tables of the "report" group, no other, each with the data's columns in order, their types,
    NOT NULL and keys (read back from SQLite, not from the DDL text); and the report says which
    version of the data it follows."""
    declared = {t["name"]: t for t in REPORT_SCHEMA["tables"]}
    present = {n for (n,) in report.query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'vramscope%'")}
    assert present == {n for n, t in declared.items() if t["group"] == "report"}
    for name in sorted(present):
        table = declared[name]
        columns = report.query(f"SELECT name, type, \"notnull\", pk FROM pragma_table_info('{name}')")
        keys = table.get("primary_key") or [c["name"] for c in table["columns"]
                                             if c.get("primary_key")]
        expected = [(c["name"], c["type"], int(bool(c.get("not_null"))),
                     keys.index(c["name"]) + 1 if c["name"] in keys else 0)
                    for c in table["columns"]]
        assert columns == expected, name
        sql = report.scalar("SELECT sql FROM sqlite_master WHERE name = ?", name)
        assert sql.endswith("WITHOUT ROWID") == bool(table.get("without_rowid")), name
    assert report.scalar("SELECT value FROM vramscope_metadata WHERE key = 'schema_version'") == \
        str(REPORT_SCHEMA["schema_version"])


def test_metadata(report, tool_version):
    meta = dict(report.query("SELECT key, value FROM vramscope_metadata"))
    for key in ("tool", "tool_version", "source_path", "source_generation"):
        assert meta.get(key), f"vramscope_metadata lacks {key!r}"
    assert meta["tool"] == "vramscope"
    assert meta["tool_version"] == tool_version
    if report.source == "builtin":
        assert meta["source_path"] == BUILT_IN_NAME
        assert meta["built_in_example"] == "1"
        assert int(meta["source_bytes"]) == BUILT_IN_PATH.stat().st_size
    else:
        assert meta["source_path"] == report.source
        assert meta["built_in_example"] == "0"
        assert int(meta["source_bytes"]) == Path(report.source).stat().st_size
    assert meta["source_generation"].startswith("torch ")


def test_final_levels_match_the_dump(report):
    if report.scalar("SELECT value FROM vramscope_metadata WHERE key = 'has_trace'") != "1":
        pytest.skip("no alloc/free trace")
    for device, allocated, reserved in report.query(
            "SELECT device, allocated_at_dump_bytes, reserved_at_dump_bytes "
            "FROM vramscope_devices"):
        last = report.query("SELECT allocated_bytes, reserved_bytes FROM vramscope_timeline "
                            "WHERE device = ? ORDER BY event DESC LIMIT 1", device)
        assert last, f"device {device} has no events"
        assert last[0] == (allocated, reserved), f"device {device}"


def test_device_rows_match_segments_and_blocks(report):
    for device, segments, blocks, allocated, reserved in report.query(
            "SELECT device, segments, blocks, allocated_at_dump_bytes, reserved_at_dump_bytes "
            "FROM vramscope_devices"):
        assert segments == report.scalar(
            "SELECT count(*) FROM vramscope_segments WHERE device = ?", device)
        assert blocks == report.scalar(
            "SELECT count(*) FROM vramscope_blocks b JOIN vramscope_segments s "
            "ON b.segment_id = s.id WHERE s.device = ?", device)
        assert reserved == report.scalar(
            "SELECT coalesce(sum(total_size), 0) FROM vramscope_segments WHERE device = ?", device)
        assert allocated == report.scalar(
            "SELECT coalesce(sum(allocated_size), 0) FROM vramscope_segments WHERE device = ?",
            device)


def test_categories_at_peak(report):
    peaks = dict(report.query("SELECT device, peak_allocated_bytes FROM vramscope_devices"))
    rows = report.query("SELECT device, category, bytes FROM vramscope_categories_at_peak")
    per_device = defaultdict(dict)
    for device, category, nbytes in rows:
        per_device[device][category] = nbytes
    assert set(per_device) == set(peaks)
    for device, cats in per_device.items():
        assert set(cats) == set(CATEGORIES)
        assert sum(cats.values()) == peaks[device]


def test_json_matches_database(report):
    devices = {r[0]: r for r in report.query(
        "SELECT device, peak_allocated_bytes, peak_reserved_bytes, allocated_at_dump_bytes, "
        "reserved_at_dump_bytes, segments, blocks FROM vramscope_devices")}
    assert sorted(devices) == sorted(d["device"] for d in report.summary["devices"])
    for d in report.summary["devices"]:
        _, peak_alloc, peak_res, alloc, res, segments, blocks = devices[d["device"]]
        assert d["peak_allocated"]["bytes"] == peak_alloc
        assert d["peak_reserved"]["bytes"] == peak_res
        assert d["at_dump"]["allocated_bytes"] == alloc
        assert d["at_dump"]["reserved_bytes"] == res
        assert d["at_dump"]["segments"] == segments
        assert d["at_dump"]["blocks"] == blocks
        cats = {c["category"]: c["bytes"] for c in d["live_at_peak"]["by_category"]}
        assert cats == dict(report.query(
            "SELECT category, bytes FROM vramscope_categories_at_peak WHERE device = ?",
            d["device"]))
    assert report.summary["report"]["path"] == "report.sqlite"
    assert report.summary["skyline"] == {
        "weight_entries": report.scalar("SELECT count(*) FROM weight_entries"),
        "activation_entries": report.scalar("SELECT count(*) FROM activation_entries")}


def test_real_snapshot_figures(report):
    if report.name is not None and report.name not in REAL_FIGURES:
        pytest.skip(f"no exact figures recorded for {report.name}")
    want = BUILT_IN_FIGURES if report.name is None else REAL_FIGURES[report.name]
    assert sorted({r[0] for r in report.query("SELECT device FROM vramscope_segments")}) == \
        want["devices"]
    assert report.scalar("SELECT count(*) FROM vramscope_segments") == want["segments"]
    assert report.scalar("SELECT count(*) FROM vramscope_segments WHERE pool = 'small'") == \
        want["small"]
    assert report.scalar("SELECT count(*) FROM vramscope_blocks") == want["blocks"]
    assert report.scalar("SELECT count(*) FROM vramscope_blocks WHERE state != 'inactive'") == \
        want["active"]
    assert report.scalar("SELECT sum(total_size) FROM vramscope_segments") == want["reserved"]
    assert report.scalar("SELECT sum(allocated_size) FROM vramscope_segments") == \
        want["allocated"]
    # Alloc/free events are the ends of allocation lifetimes; every other event is a row of
    # vramscope_events.
    actions = {(d, a): n for d, a, n in report.query(
        "SELECT device, action, count(*) FROM vramscope_events GROUP BY device, action")}
    for column, action in (("alloc_event", "alloc"), ("free_requested_event", "free_requested"),
                           ("free_completed_event", "free_completed")):
        for d, n in report.query(f"SELECT device, count({column}) FROM vramscope_allocations "
                                 f"GROUP BY device"):
            if n:
                actions[(d, action)] = n
    assert actions == want["actions"]
    assert report.summary["source"]["segments"] == want["segments"]
    assert report.summary["source"]["blocks"] == want["blocks"]
    assert report.summary["source"]["events"] == sum(want["actions"].values())


def test_every_real_snapshot_has_figures():
    """A new fixture must get its exact figures here (from the README's table)."""
    missing = [f.name for f in real_snapshot_files() if f.name not in REAL_FIGURES]
    assert not missing, f"add the README's exact figures for {missing}"
