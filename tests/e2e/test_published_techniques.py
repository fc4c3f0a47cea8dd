"""The memory-saving techniques against published measurements (issue 40): every row found, under
the rule of docs/accuracy.md ("Against published measurements: the memory-saving techniques"), is
in tests/data/published_techniques.json with its source, and the compared ones with the commands
that predicted them and what they predicted then. These tests run each compared row's commands
again and fail when a prediction moves by more than 0.1% (then the file and the doc's table are
updated together, and the reading checked), and check that the file and the doc agree.
"""

from __future__ import annotations

import json

import pytest

from conftest import REPO, run_binary

DATA = REPO / "tests" / "data" / "published_techniques.json"
DOC = REPO / "docs" / "accuracy.md"
SECTION = "### Against published measurements: the memory-saving techniques"
DIVISOR = {"GiB": 2**30, "GB": 1e9}
STATUSES = {"compared", "not comparable", "not compared (incomplete)", "outside the rule"}
TOLERANCE = 0.001  # a prediction may move by 0.1% before the recorded table is stale

DOCUMENT = json.loads(DATA.read_text())
ROWS = DOCUMENT["rows"]
COMPARED = [r for r in ROWS if r["status"] == "compared"]


def signed(percent: float) -> str:
    """An error as the doc prints it: one decimal, always signed, a real minus sign."""
    return f"{percent:+.1f}%".replace("-", "\N{MINUS SIGN}")


def section_text() -> str:
    text = DOC.read_text()
    start = text.index(SECTION)
    end = text.find("\n### ", start + len(SECTION))
    return text[start:] if end < 0 else text[start:end]


def test_every_row_is_accounted_for():
    """Each row has a known source and status; rows not compared say why; compared rows carry
    their commands, what those predicted and an error that follows from the two figures."""
    assert len(ROWS) >= 90 and len(COMPARED) == 11
    for row in ROWS:
        assert row["source"] in DOCUMENT["sources"], row
        assert row["status"] in STATUSES, row
        if row["status"] != "compared":
            assert row["reason"], row
            continue
        published = row["published"]
        predicted = row["predicted"]
        assert published["unit"] == predicted["unit"] in DIVISOR
        assert published["quantity"] in ("max_memory_allocated", "active_bytes.all.peak")
        assert predicted["quantity"] == "peak allocated"
        recorded = row["predicted_bytes"]
        total = recorded["row"] if "row" in recorded else (recorded["minuend"]
                                                           - recorded["subtrahend"])
        assert total == predicted["bytes"]
        value = total / DIVISOR[predicted["unit"]]
        assert round(value, 3) == predicted["value"]
        error = (value - published["value"]) / published["value"] * 100
        assert round(error, 1) == row["error_pct"]
        assert row["within_5pct"] == (abs(error) <= 5)


def test_the_doc_shows_what_the_file_records():
    """The doc's table of compared rows holds each row's published figure, prediction and error
    as recorded (a stale table fails here, not only a moved prediction)."""
    text = section_text()
    lines = [line for line in text.splitlines() if line.startswith("| ")]
    for row in COMPARED:
        unit = row["published"]["unit"]
        published = f"{row['published']['value']:.2f}" if unit == "GB" else (
            f"{row['published']['value']:.1f}")
        predicted = f"{row['predicted']['value']:.3f} {unit}"
        cells = f"| {published} {unit} | {predicted} | {signed(row['error_pct'])} |"
        assert any(line.endswith(cells) for line in lines), (row["id"], cells)


@pytest.fixture(scope="module")
def predict_peak(vramscope_bin):
    """peak_allocated(args): the peak allocated bytes of `vramscope predict ARGS --json`, run from
    the repository root (the rows name their model configs relative to it)."""

    def _peak(args: list[str]) -> int:
        rc, out, err = run_binary("predict", *args, "--json", cwd=REPO, timeout=120)
        assert rc == 0, err
        return json.loads(out)["devices"][0]["peak_allocated"]["bytes"]

    return _peak


@pytest.mark.parametrize("row", COMPARED, ids=[r["id"] for r in COMPARED])
def test_prediction_is_the_recorded_one(row, predict_peak):
    for name, args in row["commands"].items():
        recorded = row["predicted_bytes"][name]
        now = predict_peak(args)
        assert abs(now - recorded) <= TOLERANCE * recorded, (
            f"{row['id']} ({name}): the prediction moved from {recorded:,} to {now:,} B; "
            f"update {DATA.name} and the table in docs/accuracy.md ({SECTION[4:]})")
