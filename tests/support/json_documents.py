"""Which schema (schemas/<name>.schema.json) a verb's --json document follows: the one rule, for
tests/e2e/conftest.py (which validates every document the tests make) and
scripts/json_schemas.py (which writes the schemas)."""

from __future__ import annotations

from typing import Any, Optional

VERBS = ("report", "predict", "run", "simulate", "explain", "diff", "split")


def document_name(verb: str, document: dict[str, Any]) -> Optional[str]:
    """report, predict-layout, predict-fit, predict-plan, simulate, explain or diff; None for a verb without
    a --json document."""
    if verb not in VERBS:
        return None
    if verb in ("report", "predict", "run"):
        if "parallel" in document:
            return "predict-layout"  # predict --tp/--pp/--cp/--ep/--dp: per rank role
        if "plan" in document and "devices" not in document:
            return "predict-plan"  # predict --plan: the options that fit a budget
        if "fit" in document and "devices" not in document:
            return "predict-fit"  # predict --fit when not even size 1 fits
        return "report"
    return verb
