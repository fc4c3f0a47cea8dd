"""The answer of :func:`vramscope.plan` (``vramscope predict --plan``): the set-ups that make a
training step fit a budget, cheapest first by the cost model (docs/guide/predict.md, "--plan")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping


@dataclass(frozen=True)
class PlanOption:
    """One set-up that fits: its techniques in words, the flags that set it (for
    :func:`vramscope.predict`, as keyword arguments: ``option.options``), its peak reserved per
    GPU, the host memory it needs, and what it adds to the step's time by the cost model."""
    techniques: tuple[str, ...]
    flags: tuple[str, ...]
    peak_reserved: int
    host_bytes: int
    added_seconds: float
    changes_training: bool

    @property
    def options(self) -> dict[str, Any]:
        """The flags as keyword arguments of :func:`vramscope.predict`."""
        out: dict[str, Any] = {}
        i = 0
        while i < len(self.flags):
            name = self.flags[i][2:].replace("-", "_")
            if i + 1 < len(self.flags) and not self.flags[i + 1].startswith("--"):
                value: Any = self.flags[i + 1]
                out[name] = int(value) if value.isdigit() else value
                i += 2
            else:
                out[name] = True
                i += 1
        return out


@dataclass(frozen=True)
class Plan:
    """Whether the set-up fits the budget as asked, and if not, the options that do (empty with
    ``nothing_fits`` saying why when none does)."""
    budget: str
    gpus: int
    capacity: int
    baseline_peak_reserved: int
    baseline_fits: bool
    step_seconds: float
    options: tuple[PlanOption, ...]
    nothing_fits: str
    simulations: int
    json: Mapping[str, Any]

    def __bool__(self) -> bool:
        """True when the set-up fits as asked or some option does."""
        return self.baseline_fits or bool(self.options)


def plan_from_json(document: Mapping[str, Any]) -> Plan:
    p = document["plan"]
    options = tuple(PlanOption(tuple(o["techniques"]), tuple(o["flags"]), o["peak_reserved_bytes"],
                               o["host_bytes"], float(o["added_seconds"]), o["changes_training"])
                    for o in p["options"])
    return Plan(p["budget"], p["gpus"], p["capacity_bytes"], p["baseline_peak_reserved_bytes"],
                p["baseline_fits"], float(p["step_seconds"]), options, p["nothing_fits"],
                p["simulations"], document)
