"""The report schema declared once (src/report/report_schema.json), end to end:

- docs/report-database.md's tables are the data's (scripts/report_schema_docs.py --check), and a
  column added to the data alone appears on the page (the DDL and the reader: report_schema_test);
- every group of tables a command writes is the data's: `report` (test_report_database covers every
  real input), `predict` (the prediction table) and `report FOLDER` of several ranks (the rank
  tables), column for column;
- a committed report of every earlier schema version (tests/data/report_db/v<N>.sqlite.gz, made by
  the code of its time) opens in `vramscope view`.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, open_db, run_binary, unpack_two_rank_capture

SCHEMA_FILE = REPO / "src" / "report" / "report_schema.json"
SCHEMA = json.loads(SCHEMA_FILE.read_text())
DOCS_SCRIPT = REPO / "scripts" / "report_schema_docs.py"
FIXTURES = REPO / "tests" / "data" / "report_db"
GOLDENS = REPO / "goldens"


def docs(*args, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(DOCS_SCRIPT), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def test_docs_are_the_schema_data():
    r = docs("--check")
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_column_added_to_the_data_appears_in_the_docs(tmp_path):
    data = json.loads(SCHEMA_FILE.read_text())
    version = data["schema_version"] + 1
    data["schema_version"] = version
    data["versions"][str(version)] = "vramscope_devices.added_column"
    table = next(t for t in data["tables"] if t["name"] == "vramscope_devices")
    table["columns"].append({"name": "added_column", "type": "INTEGER", "since": version})
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(data))
    page = tmp_path / "report-database.md"
    shutil.copy(REPO / "docs" / "report-database.md", page)
    stale = docs("--check", "--schema", schema, "--doc", page)
    assert stale.returncode == 1 and "added_column" in stale.stdout
    assert docs("--write", "--schema", schema, "--doc", page).returncode == 0
    text = page.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `vramscope_devices("))
    assert "estimated_block_sizes, added_column)`" in row
    assert f"(schema version {version} added `added_column`)" in row
    assert f"This page describes schema version {version}" in text
    assert docs("--check", "--schema", schema, "--doc", page).returncode == 0


def test_docs_script_refuses_bad_input(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    r = docs("--check", "--schema", bad)
    assert r.returncode != 0 and "not the report schema's data" in r.stderr
    page = tmp_path / "page.md"
    page.write_text("# no markers\n")
    r = docs("--check", "--doc", page)
    assert r.returncode != 0 and "needs exactly one" in r.stderr


def assert_group_tables(db: Path, groups: set[str]):
    """The report's vramscope_ tables are exactly those of `groups`, each column as declared."""
    declared = {t["name"]: t for t in SCHEMA["tables"]}
    with open_db(db) as con:
        present = {n for (n,) in con.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'vramscope%'")}
        assert present == {n for n, t in declared.items() if t["group"] in groups}
        for name in present:
            columns = [(n, t, bool(nn)) for n, t, nn in con.execute(
                f"SELECT name, type, \"notnull\" FROM pragma_table_info('{name}')")]
            assert columns == [(c["name"], c["type"], bool(c.get("not_null")))
                               for c in declared[name]["columns"]], name


def test_predict_writes_the_prediction_group(tmp_path):
    rc, _, err = run_binary("predict", "--model", "gpt2", "--batch", "2", "--seq", "128",
                            "--gpu", "h100-80gb", "-q", "-o", "p.sqlite", cwd=tmp_path,
                            timeout=120)
    assert rc == 0, err
    assert_group_tables(tmp_path / "p.sqlite", {"report", "prediction"})
    with open_db(tmp_path / "p.sqlite") as con:
        assert con.execute("SELECT count(*) FROM vramscope_prediction").fetchone()[0] > 5


def test_a_folder_of_ranks_writes_the_ranks_group(tmp_path):
    runs, _ = unpack_two_rank_capture(tmp_path)
    rc, _, err = run_binary("report", "-q", runs, "-o", "r.sqlite", cwd=tmp_path, timeout=180)
    assert rc == 0, err
    assert_group_tables(tmp_path / "r.sqlite", {"report", "ranks"})
    with open_db(tmp_path / "r.sqlite") as con:
        assert con.execute("SELECT count(*) FROM vramscope_ranks").fetchone()[0] == 2


FIXTURE_FILES = sorted(FIXTURES.glob("v*.sqlite.gz"))


def test_every_earlier_version_has_a_fixture():
    have = {int(f.name[1:].split(".")[0]) for f in FIXTURE_FILES}
    assert set(range(1, SCHEMA["schema_version"])) <= have, (
        f"{FIXTURES}: one report per earlier schema version (see its README.md)")


@pytest.mark.parametrize("fixture", FIXTURE_FILES, ids=[f.name for f in FIXTURE_FILES])
def test_an_earlier_version_opens_in_view(tmp_path, fixture):
    db = tmp_path / fixture.name.removesuffix(".gz")
    with gzip.open(fixture) as f, open(db, "wb") as g:
        shutil.copyfileobj(f, g)
    rc, out, err = run_binary("view", db, "-o", "page.html", cwd=tmp_path, timeout=120)
    assert rc == 0, err
    assert "viewer written to page.html" in out
    page = (tmp_path / "page.html").read_text()
    assert page.startswith("<!DOCTYPE html>") and len(page) > 100_000
