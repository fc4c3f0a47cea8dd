"""The architecture document draws the pipeline as it is: every `#include` of a file under `src/`
reaches only the stages docs/design/architecture.md allows for its folder, and every folder of
`src/` is in that table.

    python3 -m pytest tests/layout
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "design" / "architecture.md"
SRC = REPO / "src"


def allowed() -> dict[str, set[str]]:
    """{stage: the stages it may include}, from the doc's table."""
    table = {}
    for line in DOC.read_text().splitlines():
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


def test_every_include_follows_the_table():
    table = allowed()
    stages = set(table)
    wrong = []
    for path in sorted(SRC.rglob("*")):
        if path.suffix not in (".h", ".cc") or path.name.endswith(("_test.cc", "_fuzzer.cc")):
            continue
        here = stage_of(str(path.relative_to(SRC)), stages)
        assert here is not None, f"{path.relative_to(REPO)}: its folder is not in {DOC.name}"
        for include in re.findall(r'#include "([^"]+)"', path.read_text()):
            there = stage_of(include, stages)
            if there is None or there == here:
                continue
            if there not in table[here]:
                wrong.append(f"{path.relative_to(REPO)} includes {include} ({here} -> {there})")
    assert not wrong, "includes the architecture does not allow:\n" + "\n".join(wrong)


def test_every_stage_in_the_table_exists():
    for stage in allowed():
        assert (SRC / stage).is_dir(), f"{DOC.name} names src/{stage}, which does not exist"
