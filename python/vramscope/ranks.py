"""``report_many``: the ranks of one job reported where they lie, on any executor, and merged into
the rank rows ``vramscope report FOLDER`` gives (``Report.ranks()``).

A job's thousand rank captures need not be copied to one machine or read one by one: each path is
reported by a worker (``vramscope report PATH --json``, no database) on the executor given, which
is anything with ``submit(fn, *args)`` returning futures with ``result()``: a
``concurrent.futures`` process or thread pool, Dask's ``distributed.Client``, or Ray's
executors of that shape. Only each rank's small row comes back.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Protocol, Sequence, Union

from .results import RankRow

PathLike = Union[str, "os.PathLike[str]"]
_LABEL = re.compile(r"^(rank|pid)(\d+)$")


class Future(Protocol):
    def result(self) -> Any: ...


class Executor(Protocol):
    def submit(self, fn: Any, *args: Any) -> Future: ...


@dataclass(frozen=True)
class RankSet:
    """Every rank's row, ranks first in rank order then processes by pid (as ``report FOLDER``
    orders them), and the one that bounds the job: the highest reserved peak (then allocated)."""
    rows: tuple[RankRow, ...]

    @property
    def bounding(self) -> RankRow:
        return next(r for r in self.rows if r.reported)


def _label(path: Path) -> str:
    name = path.name
    for suffix in (".pickle.gz", ".pickle", ".vstrace"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def report_row(path: str) -> dict[str, Any]:
    """One rank's row from its own report (run by a worker: plain data in and out, so that any
    executor can ship it)."""
    from . import _engine

    document, _ = _engine.run_json(["report", path, "--json", "--quiet"])
    devices = document.get("devices") or []
    if not devices:
        raise ValueError(f"{path}: the report has no device with memory events")
    device = max(devices, key=lambda d: d["peak_reserved"]["bytes"])
    at_peak = device["breakdown_at_peak"]
    label = _label(Path(path))
    sidecar = Path(path).with_name(label + ".sidecar.json")
    ordinal: Optional[int] = None
    if sidecar.is_file():
        process = json.loads(sidecar.read_text()).get("process") or {}
        ordinal = process.get("device")
    return {"label": label, "device": int(ordinal if ordinal is not None else device["device"]),
            "peak_allocated": int(device["peak_allocated"]["bytes"]),
            "peak_reserved": int(device["peak_reserved"]["bytes"]),
            "peak_step": int(at_peak.get("step") or 0),
            "peak_phase": str(at_peak.get("phase") or "unknown")}


def report_many(paths: Iterable[PathLike], executor: Optional[Executor] = None) -> RankSet:
    """Reports every path (a rank's snapshot, as ``vramscope run`` names them: ``rank<N>.pickle``
    or ``pid<N>.pickle`` with its sidecar beside) on ``executor`` (default: here, one after
    another) and merges their rows as ``report FOLDER`` does."""
    names = [os.fspath(p) for p in paths]
    if not names:
        raise ValueError("report_many() needs at least one path")
    if executor is None:
        rows = [report_row(p) for p in names]
    else:
        futures = [executor.submit(report_row, p) for p in names]
        rows = [f.result() for f in futures]

    def order(row: dict[str, Any]) -> tuple[int, int, str]:
        m = _LABEL.match(row["label"])
        return (0 if m and m.group(1) == "rank" else 1, int(m.group(2)) if m else 0,
                row["label"])

    rows.sort(key=order)
    # The highest (reserved, allocated) peak; the first in order on a tie.
    bounding = max(range(len(rows)),
                   key=lambda i: (rows[i]["peak_reserved"], rows[i]["peak_allocated"], -i))
    merged = []
    for i, row in enumerate(rows):
        m = _LABEL.match(row["label"])
        merged.append(RankRow(label=row["label"],
                              rank=int(m.group(2)) if m and m.group(1) == "rank" else None,
                              device=row["device"], peak_allocated=row["peak_allocated"],
                              peak_reserved=row["peak_reserved"], peak_step=row["peak_step"],
                              peak_phase=row["peak_phase"], reported=i == bounding))
    return RankSet(tuple(merged))


__all__: Sequence[str] = ["report_many", "report_row", "RankSet"]
