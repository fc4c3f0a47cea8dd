"""The result of :func:`vramscope.simulate`: the allocator model's replay of a recording and its
what-if runs, per device. ``.json`` is the whole versioned document of ``simulate --json``
(schema ``schemas/simulate.schema.json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional


@dataclass(frozen=True)
class SimulationRun:
    """One run of the allocator model: the replay under the recorded settings, or a what-if.
    ``out_of_memory_event`` is where it ran out (``None``: it fit); ``address_match_rate`` how
    many allocations the replay put at their recorded address (``None`` for a what-if)."""
    kind: str
    alloc_conf: str
    peak_allocated: int
    peak_reserved: int
    fragmentation_at_peak: float
    cuda_mallocs: int
    out_of_memory_event: Optional[int]
    address_match_rate: Optional[float]
    json: Mapping[str, Any] = field(repr=False)

    @property
    def fits(self) -> bool:
        return self.out_of_memory_event is None


@dataclass(frozen=True)
class DeviceSimulation:
    device: int
    recorded_peak_allocated: int
    recorded_peak_reserved: int
    replay: Optional[SimulationRun]
    what_if: tuple[SimulationRun, ...]


@dataclass(frozen=True)
class Simulation:
    devices: tuple[DeviceSimulation, ...]
    json: Mapping[str, Any] = field(repr=False)

    @property
    def fits(self) -> bool:
        """Whether every what-if run of every device fit."""
        return all(run.fits for d in self.devices for run in d.what_if)


def _run(r: Mapping[str, Any]) -> SimulationRun:
    oom = r.get("oom")
    comparison = r.get("comparison")
    settings = r.get("settings") or {}
    return SimulationRun(
        kind=str(r.get("kind", "")), alloc_conf=str(settings.get("alloc_conf", "")),
        peak_allocated=int(r.get("peak_allocated_bytes", 0)),
        peak_reserved=int(r.get("peak_reserved_bytes", 0)),
        fragmentation_at_peak=float(r.get("fragmentation_at_peak", 0.0)),
        cuda_mallocs=int(r.get("cuda_mallocs", 0)),
        out_of_memory_event=int(oom["event"]) if isinstance(oom, dict) else None,
        address_match_rate=(float(comparison["address_match_rate"])
                            if isinstance(comparison, dict) else None), json=r)


def simulation_from_json(document: Mapping[str, Any]) -> Simulation:
    """The Simulation of a ``simulate --json`` document."""
    devices = tuple(DeviceSimulation(
        device=int(d["device"]),
        recorded_peak_allocated=int(d.get("recorded_peak_allocated_bytes", 0)),
        recorded_peak_reserved=int(d.get("recorded_peak_reserved_bytes", 0)),
        replay=_run(d["replay"]) if isinstance(d.get("replay"), dict) else None,
        what_if=tuple(_run(r) for r in d.get("what_if", [])))
        for d in document.get("devices", []))
    return Simulation(devices, document)
