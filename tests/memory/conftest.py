"""Fixtures of the memory tests: a fresh simulated backend per test (``dev``), optionally made
the current accelerator (``current``). A test module may define its own ``dev``."""

from __future__ import annotations

import itertools

import pytest

from accelrt import _device, backends
from accelrt.testing._simulated import SimulatedBackend

_names = itertools.count()


@pytest.fixture
def dev() -> str:
    """A fresh two-device simulated backend (1 GiB each) under a new name."""
    name = f"memsim{next(_names)}"
    backends.register(name, lambda: SimulatedBackend(name=name, capacity=1 << 30,
                                                     device_count=2))
    return name


@pytest.fixture
def current(dev: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Make the fresh simulated backend the current accelerator for one test."""
    monkeypatch.setattr(_device, "_current_backend", backends.get_backend(dev))
    monkeypatch.setattr(_device, "_current_name", dev)
    return dev
