"""What the GPU-session scripts' CPU tests share: the Python with torch that runs them."""

from __future__ import annotations

import os

import pytest

TORCH_PYTHON = os.environ.get("VRAMSCOPE_TORCH_PYTHON", "")


def need_torch_python() -> str:
    """The Python with torch (VRAMSCOPE_TORCH_PYTHON). Under CTest (VRAMSCOPE_REQUIRE_TORCH=1) a
    missing interpreter is a failure, never a skip."""
    if not TORCH_PYTHON:
        if os.environ.get("VRAMSCOPE_REQUIRE_TORCH"):
            pytest.fail("VRAMSCOPE_TORCH_PYTHON is not set, but CTest requires these tests to run")
        pytest.skip("VRAMSCOPE_TORCH_PYTHON is not set")
    return TORCH_PYTHON
