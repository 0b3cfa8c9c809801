"""``Stream.wait_stream`` (and every raw stream ordering through ``_stream._wait_raw``) asks
the backend nothing while its ``streams_idle`` hint holds (no stream holds queued or captured
work, ``Backend.streams_idle``), as ``Event.query()`` reads the hint; otherwise it orders the
streams through a temporary event, as before (create, record, wait, destroy)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import accelrt as acc
from accelrt import backends
from accelrt.backends.cpu import CpuBackend


class _Counting(CpuBackend):
    """A cpu backend that counts its event creations."""

    def __init__(self, async_streams: bool, name: str) -> None:
        super().__init__(num_devices=2, async_streams=async_streams, name=name)
        self.created = 0

    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> backends.EventHandle:
        self.created += 1
        return super().event_create(index, enable_timing, blocking, interprocess)


def _instance(b: CpuBackend) -> Callable[[], CpuBackend]:
    return lambda: b


def test_wait_stream_asks_nothing_while_streams_are_idle() -> None:
    for async_streams in (False, True):
        name = f"cpuwaitidle{int(async_streams)}"
        b = _Counting(async_streams, name)
        backends.register(name, _instance(b), replace=True)
        try:
            a, c, other = acc.Stream(f"{name}:0"), acc.Stream(f"{name}:0"), acc.Stream(f"{name}:1")
            a.wait_stream(c)
            a.wait_stream(other)                     # another device of the backend
            assert b.created == (2 if async_streams else 0), async_streams
            if async_streams:   # the wait still orders the work: c's gate holds a back
                gate, ran = threading.Event(), []
                c_b, c_i, c_h = c._b, c._index, c._handle

                def hold() -> None:
                    gate.wait()

                c_b.launch_host_func(c_i, hold, c_h)
                a.wait_stream(c)
                a._b.launch_host_func(a._index, lambda: ran.append(1), a._handle)
                assert not a.query() and ran == []
                gate.set()
                a.synchronize()
                assert ran == [1]
            assert b.live_handles()["events"] == 0   # every temporary event destroyed
        finally:
            b.close()
            backends.unregister(name)
