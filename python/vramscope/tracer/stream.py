"""The stream writer: events to a JSON Lines file, in order (docs/design/tracer.md, the output
format)."""

from __future__ import annotations

import json


class EventWriter:
    """Events, in order, to a file. The last event is held back so that relabelling the allocation
    just made (a parameter, an optimizer state) folds into its alloc line instead of a ``set``."""

    def __init__(self, path: str):
        self._file = open(path, "w", encoding="utf-8")
        self._held: dict | None = None
        self._pending: list | None = None  # events held back by hold(), until release()
        self.allocs = 0
        self.frees = 0
        self.closed = False

    def _write(self, event: dict) -> None:
        self._file.write(json.dumps(event) + "\n")

    def emit(self, event: dict) -> None:
        if self.closed:
            return
        if self._pending is not None:
            self._pending.append(event)
            return
        if self._held is not None:
            self._write(self._held)
        self._held = event
        if event["ev"] == "alloc":
            self.allocs += 1
        elif event["ev"] == "free":
            self.frees += 1

    def relabel(self, alloc_id: int, category: str, name: str) -> None:
        held = self._pending[-1] if self._pending else self._held
        if held is not None and held["ev"] == "alloc" and held["id"] == alloc_id:
            held["category"], held["name"] = category, name
            return
        self.emit({"ev": "set", "id": alloc_id, "category": category, "name": name})

    def hold(self) -> None:
        """From now on events are kept back (not counted, not written) until ``release``."""
        if self._pending is None:
            self._pending = []

    def release(self, dropped: set) -> None:
        """Writes the events kept back since ``hold``, in order, but those of the allocations
        in ``dropped`` (their alloc, relabels and free): they never happened."""
        pending, self._pending = self._pending or [], None
        for event in pending:
            if event.get("id") not in dropped:
                self.emit(event)

    def close(self) -> None:
        if self.closed:
            return
        self.release(set())
        if self._held is not None:
            self._write(self._held)
            self._held = None
        self._write({"ev": "end", "allocs": self.allocs, "frees": self.frees,
                     "live_at_end": self.allocs - self.frees})
        self.closed = True
        self._file.close()

    def abandon(self) -> None:
        self.closed = True
        self._file.close()
