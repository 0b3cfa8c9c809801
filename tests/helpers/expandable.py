"""Switching expandable segments on in a test (shared by the torch-suite memory tests)."""

from __future__ import annotations

from typing import Any

import pytest


def switch_on_or_skip(m: Any) -> None:
    """``expandable_segments:True`` on device module ``m`` (test_cuda_expandable_segments.py's
    setting), or a skip where this process cannot have it: the option is process-wide and is
    refused while an allocator of a backend without virtual memory (OpenCL) is open
    (docs/differences.md)."""
    try:
        m.set_allocator_settings("expandable_segments:True")
    except ValueError as e:
        if "needs virtual memory support" not in str(e):
            raise
        pytest.skip(f"expandable segments cannot be switched on in this process: {e}")
