"""The results of vramscope's Python API: plain, immutable objects with documented fields.

Sizes are bytes (``int``), times microseconds since the epoch as the recording gives them
(``None`` when it has none), events indices into the recording's trace (``None``: the start of the
trace, or the snapshot's dump). Categories are the names of ``CATEGORIES``, in that order.

Summary fields come from the command's versioned JSON (``.json`` holds the whole document; its
schema is ``schemas/<verb>.schema.json``); the bulk data of a report (the timeline, every
allocation, every owner and site) is read on demand from the report database the call wrote, by
methods that return column arrays. Nothing here exposes the database's tables: they may change
between versions, these fields follow the stability policy of docs/guide/python.md.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from . import _report_db

# The categories of every byte, in the report's fixed order.
CATEGORIES: tuple[str, ...] = ("weight", "gradient", "optimizer_state", "activation", "input",
                               "workspace", "temporary", "unknown")


@dataclass(frozen=True)
class Peak:
    """A peak of one device's memory: its size and where in the recording it was reached."""
    bytes: int
    event: Optional[int]
    time_us: Optional[int]


@dataclass(frozen=True)
class CategoryBytes:
    """Bytes (and allocations) of one category."""
    category: str
    bytes: int
    count: int


@dataclass(frozen=True)
class OwnerBytes:
    """Bytes live at the peak held by one owner (a parameter, an optimizer state, an operation at
    a site...) in one category."""
    category: str
    owner: str
    bytes: int
    count: int


@dataclass(frozen=True)
class Iteration:
    """One training step: its event range, its peak and the bytes by category at that peak."""
    step: int
    first_event: int
    last_event: int
    start_time_us: Optional[int]
    end_time_us: Optional[int]
    peak_allocated: int
    peak_event: Optional[int]
    peak_phase: str
    at_peak_by_category: Mapping[str, int]


@dataclass(frozen=True)
class AtDump:
    """The allocator's state when the snapshot was taken (the end of a prediction)."""
    allocated: int
    reserved: int
    active: int
    requested: int
    segments: int
    blocks: int


@dataclass(frozen=True)
class Timeline:
    """One device's allocated and reserved memory over the trace, as parallel column lists:
    after every event when the device has at most 30,000; else, per bucket of consecutive
    events, the lowest and highest allocated and the highest reserved, so that the peaks, the
    first and the last event are always there (the exact curve at any event follows from
    ``allocations()``)."""
    device: int
    event: Sequence[int]
    time_us: Sequence[Optional[int]]
    allocated: Sequence[int]
    reserved: Sequence[int]

    def to_pandas(self) -> Any:
        """The columns as a ``pandas.DataFrame`` (pandas must be installed; it is never
        required otherwise)."""
        return _data_frame({"event": self.event, "time_us": self.time_us,
                            "allocated": self.allocated, "reserved": self.reserved})


@dataclass(frozen=True)
class Allocations:
    """Every allocation of one device, as parallel column lists (one entry per allocation, in
    the order they were made). ``free_event`` is ``None`` for one alive at the end; ``owner`` and
    ``site`` are the labels the report uses."""
    device: int
    address: Sequence[int]
    size: Sequence[int]
    requested: Sequence[int]
    alloc_event: Sequence[Optional[int]]
    free_event: Sequence[Optional[int]]
    category: Sequence[str]
    phase: Sequence[str]
    step: Sequence[int]
    operation: Sequence[str]
    owner: Sequence[str]
    site: Sequence[str]

    def __len__(self) -> int:
        return len(self.address)

    def to_pandas(self) -> Any:
        """The columns as a ``pandas.DataFrame`` (needs pandas)."""
        return _data_frame({name: getattr(self, name) for name in (
            "address", "size", "requested", "alloc_event", "free_event", "category", "phase",
            "step", "operation", "owner", "site")})


@dataclass(frozen=True)
class DeviceReport:
    """What one CUDA device's memory did."""
    device: int
    events: int
    peak_allocated: Peak
    peak_reserved: Peak
    reserved_at_peak_allocated: int
    at_dump: AtDump
    peak_step: int
    peak_phase: str
    categories_at_peak: Mapping[str, CategoryBytes]
    iterations: tuple[Iteration, ...]


@dataclass(frozen=True)
class RankRow:
    """One process (rank) of a capture folder or of ``predict(all_ranks=True)``."""
    label: str
    rank: Optional[int]
    device: Optional[int]
    peak_allocated: int
    peak_reserved: int
    peak_step: Optional[int]
    peak_phase: str
    reported: bool


@dataclass(frozen=True)
class Report:
    """A memory report: of a recording (:func:`vramscope.report`) or a prediction
    (:func:`vramscope.predict`; ``predicted`` is then true)."""
    source: str
    source_format: str
    predicted: bool
    peak_usage: int
    devices: tuple[DeviceReport, ...]
    notes: tuple[str, ...]
    database: Optional[Path]
    html: Optional[Path]
    json: Mapping[str, Any] = field(repr=False)
    # The input was cut off before its end (a killed job, a full disk) and is reported up to the
    # cut, at byte ``cut_at_byte``; ``notes`` say where the cut fell and what that leaves out.
    partial: bool = False
    cut_at_byte: Optional[int] = None

    def device(self, device: Optional[int] = None) -> DeviceReport:
        """One device's report: ``device`` (a CUDA ordinal), or the one with the highest peak."""
        if not self.devices:
            raise LookupError("the report has no device with memory events")
        if device is None:
            return max(self.devices, key=lambda d: d.peak_allocated.bytes)
        for candidate in self.devices:
            if candidate.device == device:
                return candidate
        raise LookupError(f"the report has no device {device}; it has "
                          f"{', '.join(str(d.device) for d in self.devices)}")

    def _db(self) -> Path:
        if self.database is None:
            raise LookupError("this report wrote no database (the call was given database=False);"
                              " call again without it to read timelines and allocations")
        return self.database

    def owners_at_peak(self, device: Optional[int] = None) -> tuple[OwnerBytes, ...]:
        """Every owner live at the device's peak, largest first."""
        return tuple(OwnerBytes(*row) for row in
                     _report_db.owners_at_peak(self._db(), self.device(device).device))

    def timeline(self, device: Optional[int] = None) -> Timeline:
        """Allocated and reserved bytes after every event of the device's trace."""
        dev = self.device(device).device
        return Timeline(dev, *_report_db.timeline(self._db(), dev))

    def allocations(self, device: Optional[int] = None) -> Allocations:
        """Every allocation of the device, with its category, owner and site."""
        dev = self.device(device).device
        return Allocations(dev, *_report_db.allocations(self._db(), dev))

    def ranks(self) -> tuple[RankRow, ...]:
        """The processes of a capture folder (empty for one process)."""
        if self.database is None:
            return ()
        rows = []
        for label, rank, device, allocated, reserved, step, phase, reported in _report_db.ranks(
                self.database):
            rows.append(RankRow(label, rank, device, allocated, reserved, step, phase,
                                bool(reported)))
        return tuple(rows)

    def _repr_html_(self) -> str:
        from ._notebook import report_html
        return report_html(self)


def _data_frame(columns: Mapping[str, Sequence[Any]]) -> Any:
    try:
        # Optional, imported only when asked for (and untyped for mypy without pandas-stubs).
        pandas = importlib.import_module("pandas")
    except ImportError:
        raise ImportError("to_pandas() needs pandas: pip install pandas") from None
    return pandas.DataFrame(dict(columns))


def _opt(value: Any) -> Optional[int]:
    return None if value is None else int(value)


def report_from_json(document: Mapping[str, Any], database: Optional[Path],
                     html: Optional[Path]) -> Report:
    """The Report of a ``report --json`` or ``predict --json`` document (schema version 3)."""
    source = document.get("source") or {}
    facts = document.get("facts") or {}
    devices = []
    for d in document.get("devices", []):
        peak_a, peak_r, dump = d["peak_allocated"], d["peak_reserved"], d["at_dump"]
        by_category = {c["category"]: CategoryBytes(c["category"], int(c["bytes"]),
                                                    int(c["count"]))
                       for c in d["live_at_peak"]["by_category"]}
        iterations = tuple(Iteration(
            step=int(it["step"]), first_event=int(it["first_event"]),
            last_event=int(it["last_event"]), start_time_us=_opt(it.get("start_time_us")),
            end_time_us=_opt(it.get("end_time_us")),
            peak_allocated=int(it["peak_allocated_bytes"]), peak_event=_opt(it.get("peak_event")),
            peak_phase=str(it.get("peak_phase") or "unknown"),
            at_peak_by_category={k: int(v) for k, v in it["at_peak_by_category"].items()})
            for it in d.get("iterations", []))
        at_peak = d["breakdown_at_peak"]
        devices.append(DeviceReport(
            device=int(d["device"]), events=int(d["events"]),
            peak_allocated=Peak(int(peak_a["bytes"]), _opt(peak_a.get("event")),
                                _opt(peak_a.get("time_us"))),
            peak_reserved=Peak(int(peak_r["bytes"]), _opt(peak_r.get("event")),
                               _opt(peak_r.get("time_us"))),
            reserved_at_peak_allocated=int(peak_a.get("reserved_bytes_then") or 0),
            at_dump=AtDump(int(dump["allocated_bytes"]), int(dump["reserved_bytes"]),
                           int(dump["active_bytes"]), int(dump["requested_bytes"]),
                           int(dump["segments"]), int(dump["blocks"])),
            peak_step=int(at_peak.get("step") or 0),
            peak_phase=str(at_peak.get("phase") or "unknown"),
            categories_at_peak=by_category, iterations=iterations))
    return Report(
        source=str(source.get("path") or ""), source_format=str(source.get("format") or ""),
        predicted=bool(document.get("predicted")), peak_usage=int(document.get("peak_usage_bytes")
                                                                  or 0),
        devices=tuple(devices), notes=tuple(str(n) for n in document.get("notes", [])),
        database=database, html=html, json=document,
        partial=bool(facts.get("partial")),
        cut_at_byte=int(facts["cut_at_byte"]) if facts.get("partial") else None)
