"""Shared test helpers (tests import from here, never from ``conftest``).

``register_toy`` registers a fresh :class:`accelrt.testing.SimulatedBackend` (call counters,
work that completes when the test says) under a new name through the public registry, to test
the device-agnostic runtime (streams, events, current device/stream) without depending on the
cpu backend's internals.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

from accelrt import backends
from accelrt.testing import SimulatedBackend

__all__ = ["CpuHandles", "IntSubclass", "cpu_handles", "register_toy", "run_in_thread"]


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


class IntSubclass(int):
    """An ``int`` subclass: a hostile handle or index that equals a valid one."""


class CpuHandles(NamedTuple):
    """What :func:`cpu_handles` makes: a 2-device cpu backend ``b``, a stream ``s1`` of device 1,
    events ``e0`` (device 0) and ``e1`` (device 1, timing), and ``dead``, a destroyed event."""

    b: Any
    s1: int
    e0: int
    e1: int
    dead: int


@contextlib.contextmanager
def cpu_handles(async_streams: bool) -> Iterator[CpuHandles]:
    """A fresh 2-device :class:`~accelrt.backends.cpu.CpuBackend` (not registered) with live and
    destroyed handles to aim hostile arguments at; closed afterwards."""
    from accelrt.backends.cpu import CpuBackend

    b = CpuBackend(num_devices=2, async_streams=async_streams)
    try:
        s1 = b.stream_create(1, 0)                       # a stream of the last device
        e0 = b.event_create(0, False, False, False)
        e1 = b.event_create(1, True, False, False)
        dead = b.event_create(0, False, False, False)
        b.event_destroy(0, dead)
        yield CpuHandles(b, s1, e0, e1, dead)
    finally:
        b.close()
