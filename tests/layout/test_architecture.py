"""The architecture document draws the pipeline as it is: every `#include` of every `.h` and `.cc`
under `src/` and `fuzz/` (tests and fuzz targets included) reaches only the stages
docs/design/architecture.md allows for its folder, and every folder of `src/` is in that table.

- A file of a stage may include its own stage and the stages the table lists for it.
- A test (`*_test.cc`) may include what its stage may, the sources (`sources/...`: real inputs
  are read through them) and `tests/support/`.
- A fuzz target (`fuzz/`) may include every stage but `cli`, and `tests/support/`.

    python3 -m pytest tests/layout
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "design" / "architecture.md"
SRC = REPO / "src"
FUZZ = REPO / "fuzz"
SUPPORT = "support/"  # tests/support/, on the include path of tests and fuzz targets


def allowed() -> dict[str, set[str]]:
    """{stage: the stages it may include}, from the doc's table."""
    table = {}
    lines = DOC.read_text().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| stage (`src/")), None)
    assert start is not None, f"no stage table ('| stage (`src/…`) | ...') in {DOC}"
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break  # the stage table ends; later tables (the verbs') are not stages
        m = re.match(r"\| `([a-z_/]+)` \|.*\| ([^|]+) \|$", line)
        if m:
            deps = m.group(2).strip()
            table[m.group(1)] = set() if deps == "—" else {d.strip() for d in deps.split(",")}
    assert table, f"no stage table in {DOC}"
    return table


def stage_of(relative: str, stages: set[str]) -> str | None:
    """The longest stage that is a prefix of a path relative to src/ (sources/kineto before
    sources)."""
    best = None
    for stage in stages:
        if relative == stage or relative.startswith(stage + "/"):
            if best is None or len(stage) > len(best):
                best = stage
    return best


def includes(path: Path) -> list[str]:
    return re.findall(r'#include "([^"]+)"', path.read_text())


def sources_of(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix in (".h", ".cc"))


def test_every_include_of_src_follows_the_table():
    table = allowed()
    stages = set(table)
    wrong = []
    for path in sources_of(SRC):
        here = stage_of(str(path.relative_to(SRC)), stages)
        assert here is not None, f"{path.relative_to(REPO)}: its folder is not in {DOC.name}"
        is_test = path.name.endswith("_test.cc")
        assert not path.name.endswith("_fuzzer.cc"), \
            f"{path.relative_to(REPO)}: fuzz targets live in fuzz/, above the stages they drive"
        for include in includes(path):
            if is_test and include.startswith(SUPPORT):
                continue
            there = stage_of(include, stages)
            if is_test and there is not None and there.split("/")[0] == "sources":
                continue
            assert there is not None or not include.endswith(".h") or "/" not in include, \
                f"{path.relative_to(REPO)} includes {include}, which is in no stage"
            if there is None or there == here:
                continue
            if there not in table[here]:
                kind = "test " if is_test else ""
                wrong.append(f"{kind}{path.relative_to(REPO)} includes {include} ({here} -> {there})")
    assert not wrong, "includes the architecture does not allow:\n" + "\n".join(wrong)


def test_fuzz_targets_drive_stages_but_not_the_command_line():
    stages = set(allowed())
    targets = sources_of(FUZZ)
    assert targets, "no fuzz targets under fuzz/"
    wrong = []
    for path in targets:
        for include in includes(path):
            if include.startswith(SUPPORT):
                continue
            there = stage_of(include, stages)
            if there is None or there == "cli":
                wrong.append(f"{path.relative_to(REPO)} includes {include}")
    assert not wrong, "fuzz targets may include every stage but cli:\n" + "\n".join(wrong)


def test_every_stage_in_the_table_exists_and_every_folder_is_in_it():
    table = allowed()
    for stage in table:
        assert (SRC / stage).is_dir(), f"{DOC.name} names src/{stage}, which does not exist"
    for folder in sorted(p for p in SRC.rglob("*") if p.is_dir()):
        relative = str(folder.relative_to(SRC))
        if not any(f.suffix in (".h", ".cc") for f in folder.iterdir()):
            continue  # data only (a viewer's scripts, fixtures)
        assert stage_of(relative, set(table)) is not None, f"src/{relative} is in no stage"


def test_the_command_line_reaches_the_stages_only_through_the_pipeline():
    """What issue 36 asks of src/cli, said again here so that the table cannot drift from it."""
    cli = allowed()["cli"]
    assert cli <= {"common", "model", "pipeline", "report", "capture"}, cli
