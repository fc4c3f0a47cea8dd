"""Run by test_python_api.py with the freshly installed package's Python: every typed field of
``vramscope.report()``'s result against the report database's own columns, for each input named
on the command line. The database is read here with plain SQL (not the package's reader), so the
two ways to the same figures are independent.

Usage: python api_against_database.py WORK INPUT... ; prints one JSON line
{"checked": N, "fields": M, "mismatches": [...]}: N inputs, M database values compared, at most
50 mismatches kept.
"""

import json
import sqlite3
import sys
from pathlib import Path

import vramscope

NO_EVENT = None  # an event the database stores as NULL


def rows(db, query, *params):
    return [tuple(r) for r in db.execute(query, params)]


def main():
    work = Path(sys.argv[1])
    mismatches = []
    fields = 0

    def check(what, got, want):
        # `fields` counts the database values compared: a list of rows counts each value.
        nonlocal fields
        if isinstance(want, list):
            fields += sum(len(r) if isinstance(r, tuple) else 1 for r in want)
        else:
            fields += 1
        if got != want and len(mismatches) < 50:
            mismatches.append(f"{what}: API {got!r} != database {want!r}")

    for n, path in enumerate(sys.argv[2:]):
        target = work / f"{n}.sqlite"
        report = vramscope.report(path, database=target, project_root=work)
        assert report.database == target
        db = sqlite3.connect(target)
        name = Path(path).name
        devices = rows(db, "SELECT device, events, peak_allocated_bytes, peak_allocated_event, "
                       "peak_allocated_time_us, peak_reserved_bytes, peak_reserved_event, "
                       "peak_reserved_time_us, reserved_at_peak_allocated_bytes, "
                       "allocated_at_dump_bytes, reserved_at_dump_bytes, active_at_dump_bytes, "
                       "requested_at_dump_bytes, segments, blocks FROM vramscope_devices "
                       "ORDER BY device")
        check(f"{name} devices", [d.device for d in report.devices], [r[0] for r in devices])
        for d, r in zip(report.devices, devices):
            where = f"{name} cuda:{d.device}"
            api = (d.device, d.events, d.peak_allocated.bytes, d.peak_allocated.event,
                   d.peak_allocated.time_us, d.peak_reserved.bytes, d.peak_reserved.event,
                   d.peak_reserved.time_us, d.reserved_at_peak_allocated, d.at_dump.allocated,
                   d.at_dump.reserved, d.at_dump.active, d.at_dump.requested, d.at_dump.segments,
                   d.at_dump.blocks)
            for i, (got, want) in enumerate(zip(api, r)):
                check(f"{where} vramscope_devices column {i}", got, want)
            check(f"{where} categories at the peak",
                  [(c.category, c.bytes, c.count) for c in d.categories_at_peak.values()],
                  rows(db, "SELECT category, bytes, count FROM vramscope_categories_at_peak "
                       "WHERE device = ? ORDER BY rowid", d.device))
            check(f"{where} owners at the peak",
                  sorted((o.category, o.owner, o.bytes, o.count)
                         for o in report.owners_at_peak(d.device)),
                  sorted(rows(db, "SELECT category, owner, bytes, count FROM "
                              "vramscope_owners_at_peak WHERE device = ?", d.device)))
            iterations = rows(db, "SELECT step, first_event, last_event, start_time_us, "
                              "end_time_us, peak_allocated_bytes, peak_event, peak_phase, weight, "
                              "gradient, optimizer_state, activation, input, workspace, "
                              "temporary, unknown FROM vramscope_iterations WHERE device = ? "
                              "ORDER BY step", d.device)
            check(f"{where} iterations",
                  [(i.step, i.first_event, i.last_event, i.start_time_us, i.end_time_us,
                    i.peak_allocated, i.peak_event, i.peak_phase,
                    *(i.at_peak_by_category[c] for c in vramscope.CATEGORIES))
                   for i in d.iterations], iterations)
            timeline = report.timeline(d.device)
            check(f"{where} timeline",
                  list(zip(timeline.event, timeline.time_us, timeline.allocated,
                           timeline.reserved)),
                  rows(db, "SELECT event, time_us, allocated_bytes, reserved_bytes FROM "
                       "vramscope_timeline WHERE device = ? ORDER BY event", d.device))
            allocations = report.allocations(d.device)
            owners = dict(rows(db, "SELECT id, label FROM vramscope_owners"))
            sites = dict(rows(db, "SELECT id, label FROM vramscope_sites"))
            want = [(a, s, q, e, f, c, p, st, op, owners.get(o, ""), sites.get(si, ""))
                    for a, s, q, e, f, c, p, st, op, o, si in rows(
                        db, "SELECT address, size_bytes, requested_bytes, alloc_event, "
                        "free_requested_event, category, phase, step, operation, owner_id, "
                        "site_id FROM vramscope_allocations WHERE device = ? ORDER BY id",
                        d.device)]
            check(f"{where} allocations",
                  list(zip(allocations.address, allocations.size, allocations.requested,
                           allocations.alloc_event, allocations.free_event, allocations.category,
                           allocations.phase, allocations.step, allocations.operation,
                           allocations.owner, allocations.site)), want)
        has_ranks = rows(db, "SELECT count(*) FROM sqlite_master WHERE name = 'vramscope_ranks'")
        want_ranks = rows(db, "SELECT label, rank, device, peak_allocated_bytes, "
                          "peak_reserved_bytes, peak_step, peak_phase, reported FROM "
                          "vramscope_ranks ORDER BY rowid") if has_ranks[0][0] else []
        check(f"{name} ranks", [(r.label, r.rank, r.device, r.peak_allocated, r.peak_reserved,
                                  r.peak_step, r.peak_phase, int(r.reported))
                                 for r in report.ranks()], want_ranks)
        db.close()
    print(json.dumps({"checked": len(sys.argv) - 2, "fields": fields,
                      "mismatches": mismatches}))


if __name__ == "__main__":
    main()
