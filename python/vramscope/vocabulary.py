"""The one vocabulary of vramscope, as the C++ side holds it (src/model/vocabulary.h): the phase
names each producer writes (the report's, the capture bootstrap's, the tracer's), the allocator's
pool codes, and what a capture records at most. Read from vocabulary.json beside this module, the
table's export that vocabulary_test keeps byte for byte equal to the C++ table; nothing here
spells a phase or a limit of its own."""

from __future__ import annotations

import json
import os

with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "vocabulary.json"),
          encoding="utf-8") as _f:
    _TABLE = json.load(_f)

# name -> the report's phase it means, per producer, in the table's order
REPORT_PHASES: dict[str, str] = dict(_TABLE["phases"]["report"])
CAPTURE_PHASES: dict[str, str] = dict(_TABLE["phases"]["capture"])
TRACER_PHASES: dict[str, str] = dict(_TABLE["phases"]["tracer"])
POOLS: dict[str, int] = dict(_TABLE["pools"])  # name -> code
CAPTURE_LIMITS: dict[str, int] = dict(_TABLE["capture_limits"])


def capture_phase(name: str) -> str:
    """`name` if the capture bootstrap may write it; a ValueError (a bug in the bootstrap) else."""
    if name not in CAPTURE_PHASES:
        raise ValueError(f"{name!r} is no capture phase of src/model/vocabulary.h "
                         f"({', '.join(CAPTURE_PHASES)})")
    return name


def tracer_phase(name: str) -> str:
    """`name` if the tracer's stream may carry it; a ValueError (a bug in the tracer) else."""
    if name not in TRACER_PHASES:
        raise ValueError(f"{name!r} is no tracer phase of src/model/vocabulary.h "
                         f"({', '.join(TRACER_PHASES)})")
    return name
