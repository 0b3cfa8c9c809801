"""Shared test helpers (tests import from here, never from ``conftest``).

``ToyBackend`` is a tiny synchronous backend with call counters and deferred completion, used to
test the device-agnostic runtime (streams, events, current device/stream) without depending on
the cpu backend's internals. ``register_toy`` registers a copy under a fresh name through the
public registry.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import Counter
from typing import Any

from accelrt import backends
from accelrt._backend import Backend
from accelrt.backends import DevicePtr, EventHandle, StreamHandle

__all__ = ["ToyBackend", "register_toy", "run_in_thread"]


class ToyBackend(Backend):
    """A synchronous backend with ``num_devices`` devices.

    Work is modelled by :meth:`submit`: a stream has a count of pending work items that
    :meth:`stream_synchronize` (or :meth:`complete`) clears, so tests can observe events that
    have not completed yet. ``calls`` counts every backend method call by name.
    """

    name = "toy"

    def __init__(self, num_devices: int = 2, priority_range: tuple[int, int] = (0, -2),
                 ) -> None:
        self.num_devices = num_devices
        self.prange = priority_range
        self.calls: Counter[str] = Counter()
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.streams: dict[int, int] = {}         # handle -> device index (live streams)
        self.pending: dict[int, int] = {}         # stream handle -> pending work items
        self.events: dict[int, dict[str, Any]] = {}
        self.inited: set[tuple[int, int]] = set()  # (thread id, index)

    def _call(self, what: str) -> None:
        self.calls[what] += 1

    # discovery
    def device_count(self) -> int:
        return self.num_devices

    def get_device_properties(self, index: int) -> dict[str, Any]:
        return {"name": f"Toy device {index}", "total_memory": 1 << 20,
                "multi_processor_count": 1}

    def get_memory_info(self, index: int) -> tuple[int, int]:
        return (1 << 20, 1 << 20)

    def init_device(self, index: int) -> None:
        self._call("init_device")
        self.inited.add((threading.get_ident(), index))

    # memory (unused by runtime tests)
    def malloc(self, index: int, size: int) -> DevicePtr:
        return 0

    def free(self, index: int, ptr: DevicePtr) -> None:
        pass

    def memcpy(self, index: int, dst: int, src: int, nbytes: int, kind: str,
               stream: StreamHandle) -> None:
        pass

    def memset(self, index: int, ptr: int, value: int, nbytes: int,
               stream: StreamHandle) -> None:
        pass

    # streams
    def default_stream(self, index: int) -> StreamHandle:
        return 0

    def stream_priority_range(self, index: int) -> tuple[int, int]:
        return self.prange

    def stream_create(self, index: int, priority: int) -> StreamHandle:
        self._call("stream_create")
        h = 0x1000 + next(self._ids)
        with self._lock:
            self.streams[h] = index
        return h

    def stream_destroy(self, index: int, stream: StreamHandle) -> None:
        self._call("stream_destroy")
        with self._lock:
            del self.streams[stream]

    def stream_is_valid(self, index: int, stream: StreamHandle) -> bool:
        return stream == 0 or self.streams.get(stream) == index

    def submit(self, stream: int, n: int = 1) -> None:
        """Pretend ``n`` work items were queued on ``stream``."""
        self.pending[stream] = self.pending.get(stream, 0) + n

    def complete(self, stream: int) -> None:
        self.pending[stream] = 0

    def stream_query(self, index: int, stream: StreamHandle) -> bool:
        self._call("stream_query")
        return not self.pending.get(stream, 0)

    def stream_synchronize(self, index: int, stream: StreamHandle) -> None:
        self._call("stream_synchronize")
        self.complete(stream)

    def stream_wait_event(self, index: int, stream: StreamHandle, event: EventHandle) -> None:
        self._call("stream_wait_event")
        self.events[event]["waited_by"].append(stream)

    def synchronize(self, index: int) -> None:
        self._call("synchronize")
        for h, dev in list(self.streams.items()) + [(0, index)]:
            if dev == index:
                self.complete(h)

    # events
    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> EventHandle:
        self._call("event_create")
        h = 0x9000 + next(self._ids)
        self.events[h] = {"index": index, "timing": enable_timing, "stream": None, "t": 0.0,
                          "waited_by": []}
        return h

    def event_destroy(self, index: int, event: EventHandle) -> None:
        self._call("event_destroy")
        del self.events[event]

    def event_record(self, index: int, event: EventHandle, stream: StreamHandle) -> None:
        self._call("event_record")
        e = self.events[event]
        e["stream"] = stream
        e["t"] = time.perf_counter()
        e["ticket"] = self.pending.get(stream, 0)

    def event_query(self, index: int, event: EventHandle) -> bool:
        e = self.events[event]
        return not (e["ticket"] and self.pending.get(e["stream"], 0))

    def event_synchronize(self, index: int, event: EventHandle) -> None:
        self._call("event_synchronize")
        self.complete(self.events[event]["stream"])

    def event_elapsed_time(self, index: int, start: EventHandle, end: EventHandle) -> float:
        return (self.events[end]["t"] - self.events[start]["t"]) * 1000.0


def register_toy(**kwargs: Any) -> tuple[str, ToyBackend]:
    """Register a fresh :class:`ToyBackend` under a unique name; return ``(name, instance)``."""
    name = "toy_" + uuid.uuid4().hex[:8]
    cls = type(f"Toy_{name}", (ToyBackend,), {"name": name})
    inst = cls(**kwargs)
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
