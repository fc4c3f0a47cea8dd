"""Lets ``pytest tests/tracer`` import ``vramscope`` from python/ without PYTHONPATH."""

import sys
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parents[2] / "python"
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

# CI (scripts/test.sh, through CTest) sets VRAMSCOPE_REQUIRE_TORCH=1: there the tracer's tests
# must run, not skip because torch or transformers went missing.
import os

if os.environ.get("VRAMSCOPE_REQUIRE_TORCH") == "1":
    import importlib

    for _module in ("torch", "transformers", "peft"):
        importlib.import_module(_module)


def require_binary(path: str) -> None:
    """Skips the caller when the vramscope binary is absent, except in CI
    (VRAMSCOPE_REQUIRE_TORCH=1, which CTest sets with VRAMSCOPE_BIN): there it fails."""
    import pytest
    from pathlib import Path

    if Path(path).exists():
        return
    if os.environ.get("VRAMSCOPE_REQUIRE_TORCH") == "1":
        pytest.fail(f"no vramscope binary at {path}, where CI built it (VRAMSCOPE_BIN)")
    pytest.skip(f"no vramscope binary at {path} (set VRAMSCOPE_BIN)")
