"""Reading the bulk of a report back from the report database a call wrote: private to the API
(results.py), so that the database's tables stay an implementation detail of the Python side.

Each reader returns plain column lists for one device. The database is opened read-only (a
report's file is never changed by reading it) and closed before the reader returns.
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path
from typing import Any, Iterator


def _rows(database: Path, query: str, params: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    # Imported here: `import vramscope` runs in every process `vramscope run` injects, and must
    # not depend on a Python built with sqlite3.
    import sqlite3

    uri = database.resolve().as_uri() + "?mode=ro"
    with closing(sqlite3.connect(uri, uri=True)) as connection:
        yield from connection.execute(query, params)


def _columns(rows: Iterator[tuple[Any, ...]], count: int) -> list[list[Any]]:
    columns: list[list[Any]] = [[] for _ in range(count)]
    appends = [column.append for column in columns]
    for row in rows:
        for append, value in zip(appends, row):
            append(value)
    return columns


def timeline(database: Path, device: int) -> list[list[Any]]:
    """event, time_us, allocated, reserved after every event of the device's trace."""
    return _columns(_rows(database, "SELECT event, time_us, allocated_bytes, reserved_bytes "
                          "FROM vramscope_timeline WHERE device = ? ORDER BY event", (device,)), 4)


def allocations(database: Path, device: int) -> list[list[Any]]:
    """address, size, requested, alloc_event, free_event, category, phase, step, operation,
    owner, site of every allocation of the device, in allocation order."""
    query = ("SELECT a.address, a.size_bytes, a.requested_bytes, a.alloc_event, "
             "a.free_requested_event, a.category, a.phase, a.step, a.operation, "
             "COALESCE(o.label, ''), COALESCE(s.label, '') "
             "FROM vramscope_allocations a "
             "LEFT JOIN vramscope_owners o ON o.id = a.owner_id "
             "LEFT JOIN vramscope_sites s ON s.id = a.site_id "
             "WHERE a.device = ? ORDER BY a.id")
    return _columns(_rows(database, query, (device,)), 11)


def owners_at_peak(database: Path, device: int) -> list[tuple[Any, ...]]:
    """(category, owner, bytes, count) live at the device's peak, largest first."""
    return list(_rows(database, "SELECT category, owner, bytes, count FROM "
                      "vramscope_owners_at_peak WHERE device = ? ORDER BY bytes DESC, owner",
                      (device,)))


def ranks(database: Path) -> list[tuple[Any, ...]]:
    """(label, rank, device, peak_allocated, peak_reserved, peak_step, peak_phase, reported) of
    every rank, in rank order; none for a report of one process (which has no such table)."""
    tables = list(_rows(database, "SELECT 1 FROM sqlite_master WHERE name = 'vramscope_ranks'"))
    if not tables:
        return []
    return list(_rows(database, "SELECT label, rank, device, peak_allocated_bytes, "
                      "peak_reserved_bytes, peak_step, peak_phase, reported = 1 "
                      "FROM vramscope_ranks ORDER BY rowid"))
