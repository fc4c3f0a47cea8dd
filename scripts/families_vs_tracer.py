#!/usr/bin/env python3
"""The built-in families against the tracer: regenerates the section of docs/accuracy.md that
compares them (--write docs/accuracy.md), or prints it. The comparison lives with its test in
tests/tracer/ (families_vs_tracer.py: the code; families_vs_tracer_data.py: the cases and the
open classes of difference, with their exact counts); this script only runs it. The history of
the classes fixed since is in docs/accuracy.md, outside the section --write replaces.

    PYTHONPATH=python python3 scripts/families_vs_tracer.py [--vramscope build/vramscope]
        [--case NAME ...] [--write docs/accuracy.md] [--keep DIR] [--json out.json]

Exits 1 when a case does not come out as the data says (the same check as the test).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "tracer"))

import families_vs_tracer  # noqa: E402

if __name__ == "__main__":
    sys.exit(families_vs_tracer.main())
