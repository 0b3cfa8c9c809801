"""Mismatches with the project's API.md contract (shared/) and torch 2.15 found by the session-41 audit.

1. An empty device string: torch 2.15 raises ``RuntimeError: Device string must not be
   empty`` (``torch.device("")``, ``torch.Stream("")``, ``torch.cuda.memory_stats("")``);
   accelrt raised "Invalid device string: ''", which a caller matching PyTorch's words misses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import accelrt as acc


@pytest.mark.parametrize("call", [
    lambda: acc.device(""),
    lambda: acc.device("", 0),
    lambda: acc.Stream(""),
    lambda: acc.Event(""),
    lambda: acc.current_stream(""),
    lambda: acc.memory.memory_stats(""),
], ids=["device", "device-index", "Stream", "Event", "current_stream", "memory_stats"])
def test_empty_device_string_is_pytorchs_error(call: Callable[[], Any]) -> None:
    with pytest.raises(RuntimeError, match=r"^Device string must not be empty") as info:
        call()
    assert isinstance(info.value, ValueError)     # accelrt's AcceleratorValueError


def test_other_malformed_strings_keep_the_invalid_device_string_error() -> None:
    for text in ("cpu:", ":0", " cpu", "cpu:01"):
        with pytest.raises(RuntimeError, match=r"^Invalid device string: "):
            acc.device(text)
