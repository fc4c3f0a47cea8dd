"""The result of :func:`vramscope.diff`: two reports compared at their peaks, the memory that grows
step over step on each side, and the ``fail_if`` gates. ``.json`` is the whole versioned document
of ``diff --json`` (schema ``schemas/diff.schema.json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class Change:
    """One figure on both sides: a category, an owner (``"category: owner"``), a site or a step
    (``"step N"``). ``a``/``b`` is ``None`` where that side does not have it."""
    what: str
    a: Optional[int]
    b: Optional[int]

    @property
    def delta(self) -> int:
        return (self.b or 0) - (self.a or 0)


@dataclass(frozen=True)
class Growth:
    """Memory live as each step begins that rises at every step from the second on: by
    ``bytes_per_step``, with the owners that rise (owner label, bytes per step)."""
    first_step: int
    last_step: int
    bytes_per_step: int
    owners: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class DeviceComparison:
    device_a: int
    device_b: int
    peak_allocated: Change
    peak_reserved: Change
    categories_at_peak: tuple[Change, ...]
    owners_at_peak: tuple[Change, ...]
    sites_at_peak: tuple[Change, ...]
    step_peaks: tuple[Change, ...]
    growth_a: Optional[Growth]
    growth_b: Optional[Growth]


@dataclass(frozen=True)
class GateOutcome:
    """One ``fail_if`` gate on one device pair: B's value against the limit it makes."""
    gate: str
    metric: str
    device: int
    a: int
    b: int
    limit: int
    failed: bool


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    devices: tuple[DeviceComparison, ...]
    gates: tuple[GateOutcome, ...]
    failed: bool
    json: Mapping[str, Any] = field(repr=False)

    def __bool__(self) -> bool:
        """True when no gate failed (``assert vramscope.diff(a, b, fail_if=[...])``)."""
        return not self.failed


def _change(c: Mapping[str, Any]) -> Change:
    return Change(str(c["what"]), c.get("a_bytes"), c.get("b_bytes"))


def _growth(g: Any) -> Optional[Growth]:
    if not isinstance(g, dict):
        return None
    return Growth(int(g["first_step"]), int(g["last_step"]), int(g["bytes_per_step"]),
                  tuple((str(o["owner"]), int(o["bytes_per_step"])) for o in g["owners"]))


def comparison_from_json(document: Mapping[str, Any]) -> Comparison:
    """The Comparison of a ``diff --json`` document (schema version 1)."""
    devices = tuple(DeviceComparison(
        device_a=int(d["device_a"]), device_b=int(d["device_b"]),
        peak_allocated=_change(d["peak_allocated"]), peak_reserved=_change(d["peak_reserved"]),
        categories_at_peak=tuple(_change(c) for c in d["categories_at_peak"]),
        owners_at_peak=tuple(_change(c) for c in d["owners_at_peak"]),
        sites_at_peak=tuple(_change(c) for c in d["sites_at_peak"]),
        step_peaks=tuple(_change(c) for c in d["step_peaks"]),
        growth_a=_growth(d.get("growth_a")), growth_b=_growth(d.get("growth_b")))
        for d in document.get("devices", []))
    gates = tuple(GateOutcome(str(g["gate"]), str(g["metric"]), int(g["device"]), int(g["a"]),
                              int(g["b"]), int(g["limit"]), bool(g["failed"]))
                  for g in document.get("gates", []))
    return Comparison(str(document["a"]["input"]), str(document["b"]["input"]), devices, gates,
                      bool(document.get("failed")), document)
