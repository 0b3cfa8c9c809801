"""Shared test helpers (tests import from here, never from ``conftest``).

``register_toy`` registers a fresh :class:`accelrt.testing.SimulatedBackend` (call counters,
work that completes when the test says) under a new name through the public registry, to test
the device-agnostic runtime (streams, events, current device/stream) without depending on the
cpu backend's internals.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from accelrt import backends
from accelrt.testing import SimulatedBackend

__all__ = ["register_toy", "run_in_thread"]


def register_toy(num_devices: int = 2, priority_range: tuple[int, int] = (0, -2),
                 cls: type[SimulatedBackend] = SimulatedBackend,
                 ) -> tuple[str, SimulatedBackend]:
    """Register a fresh :class:`~accelrt.testing.SimulatedBackend` (or a subclass ``cls``
    that hooks a method) under a unique name and return ``(name, instance)``: ``num_devices``
    devices whose work stays pending until the test completes it (``auto_complete=False``),
    with two stream priorities."""
    name = "toy_" + uuid.uuid4().hex[:8]
    inst = cls(device_count=num_devices, priority_range=priority_range,
                            auto_complete=False, name=name)
    backends.register(name, lambda: inst)
    return name, inst


def run_in_thread(fn: Any, *args: Any) -> Any:
    """Run ``fn(*args)`` in a new thread and return its result (re-raising its exception)."""
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller
            out["error"] = exc

    t = threading.Thread(target=target)
    t.start()
    t.join(30)
    if "error" in out:
        raise out["error"]
    return out.get("value")
