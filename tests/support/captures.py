"""Committed captures unpacked as `vramscope run` writes them, for the Python test suites
(tests/e2e, tests/install), which import this file by path."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def unpack_two_rank_capture(tmp_path: Path) -> tuple[Path, dict]:
    """The committed two-rank DDP capture (goldens/*/run, ranks2_ddp_gpt_adamw_fp32) unpacked
    into tmp_path/runs as `vramscope run` writes a folder (each rank's snapshot and sidecar):
    the folder, and the case's metadata (PyTorch's figures per rank)."""
    return unpack_capture(tmp_path, "ranks2_ddp_gpt_adamw_fp32")


def unpack_capture(tmp_path: Path, name: str) -> tuple[Path, dict]:
    """The committed multi-rank capture `name` of goldens/*/run (the first suite that has it)
    unpacked into tmp_path/runs as `vramscope run` writes a folder."""
    metas = sorted((REPO / "goldens").glob("*/run/metadata.json"))
    cases = [(m.parent, json.loads(m.read_text())["cases"].get(name)) for m in metas]
    cases = [(f, c) for f, c in cases if c and c.get("status") == "ok"]
    # Committed in goldens/*/run (not a ../shared fixture): missing is a defect, not a skip.
    assert cases, f"goldens/*/run/ holds no {name} capture"
    folder, case = cases[0]
    runs = tmp_path / "runs"
    runs.mkdir()
    for rank, entry in case["ranks"].items():
        sidecar = json.loads((folder / entry["sidecar"]).read_text())
        with gzip.open(folder / entry["snapshot"]) as f, open(runs / sidecar["snapshot"],
                                                              "wb") as g:
            shutil.copyfileobj(f, g)
        (runs / f"{rank}.sidecar.json").write_text(json.dumps(sidecar))
    return runs, case
