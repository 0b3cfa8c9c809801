"""A fake backend for allocator tests: fake pointers, counted bytes, controllable events.

``FakeBackend`` hands out address ranges from a bump pointer and counts bytes; it never
touches memory. It supports the ``vm_*`` calls (configurable granularity), a configurable
capacity (``malloc`` returns 0 and ``vm_map`` False when it would be exceeded), and events
whose completion the test controls: with ``auto_complete=False`` a recorded event stays
incomplete until :meth:`FakeBackend.complete_stream`, :meth:`FakeBackend.complete_all` or an
``event_synchronize``/``stream_synchronize``.

Example::

    >>> from helpers.fake_backend import FakeBackend
    >>> b = FakeBackend(capacity=1 << 30)
    >>> p = b.malloc(0, 4096); b.used
    4096
    >>> b.free(0, p); b.used
    0
"""

from __future__ import annotations

import bisect
import itertools
import threading
from typing import Any

from accelrt._backend import Backend
from accelrt.backends import Capabilities, DevicePtr, EventHandle, StreamHandle

GiB = 1 << 30
MiB = 1 << 20


class FakeBackend(Backend):
    """Fake device memory for allocator tests (see the module docstring).

    Args:
        capacity: bytes the fake device holds (mallocs and mappings beyond it fail).
        granularity: ``vm_granularity`` in bytes.
        vm: whether ``vm_supported`` is True.
        auto_complete: events complete as soon as they are recorded.
        devices: number of devices.
        base: first fake address.
    """

    name = "fake"

    def __init__(self, capacity: int = 80 * GiB, granularity: int = 2 * MiB, vm: bool = True,
                 auto_complete: bool = True, devices: int = 1, base: int = 0x7F0000000000,
                 name: str = "fake") -> None:
        self.name = name  # type: ignore[misc]
        self.capacity = capacity
        self.granularity = granularity
        self.vm = vm
        self._caps = Capabilities(virtual_memory=vm)
        self.auto_complete = auto_complete
        self.devices = devices
        self._lock = threading.Lock()
        self._next_addr = base          # guarded by _lock
        self.used = 0                   # guarded by _lock: bytes malloc'd or mapped
        self.allocs: dict[int, int] = {}        # guarded by _lock: ptr -> size
        self.reservations: dict[int, int] = {}  # guarded by _lock: base -> size
        self.mappings: dict[int, int] = {}      # guarded by _lock: ptr -> size
        self._map_starts: list[int] = []        # guarded by _lock: sorted mapping starts
        self.malloc_calls = 0
        self.free_calls = 0
        self.map_calls = 0
        self.unmap_calls = 0
        self._ids = itertools.count(1)
        self._stream_seq: dict[int, int] = {}   # stream -> last submitted work number
        self._stream_done: dict[int, int] = {}  # stream -> last completed work number
        self._events: dict[int, tuple[int, int] | None] = {}  # event -> (stream, seq)
        self.events_recorded = 0
        self.destroyed: set[int] = set()     # destroyed stream handles
        self.fail_event_record = False       # make event_record raise (error-path tests)
        self.synchronize_calls = 0

    # ------------------------------------------------------------------ discovery
    def device_count(self) -> int:
        return self.devices

    def get_device_properties(self, index: int) -> dict[str, Any]:
        return {"name": "Fake device", "total_memory": self.capacity,
                "multi_processor_count": 1}

    def get_memory_info(self, index: int) -> tuple[int, int]:
        return self.capacity - self.used, self.capacity

    # ------------------------------------------------------------------ memory
    def _take(self, size: int) -> int:
        addr = self._next_addr
        # keep allocations apart and aligned like a real device allocator
        self._next_addr += -(-size // self.granularity) * self.granularity + self.granularity
        return addr

    def malloc(self, index: int, size: int) -> DevicePtr:
        with self._lock:
            self.malloc_calls += 1
            if self.used + size > self.capacity:
                return 0
            ptr = self._take(size)
            self.allocs[ptr] = size
            self.used += size
            return ptr

    def free(self, index: int, ptr: DevicePtr) -> None:
        with self._lock:
            size = self.allocs.pop(ptr)  # KeyError on a foreign pointer: a test failure
            self.used -= size
            self.free_calls += 1

    def capabilities(self, index: int) -> Capabilities:
        return self._caps

    def vm_granularity(self, index: int) -> int:
        if not self.vm:
            raise NotImplementedError("The 'vm_granularity' method must be implemented.")
        return self.granularity

    def vm_reserve(self, index: int, size: int) -> DevicePtr:
        if not self.vm:
            raise NotImplementedError("The 'vm_reserve' method must be implemented.")
        assert size % self.granularity == 0, size
        with self._lock:
            base = self._take(size)
            self.reservations[base] = size
            return base

    def vm_release(self, index: int, ptr: DevicePtr, size: int) -> None:
        with self._lock:
            assert self.reservations.pop(ptr) == size
            i = bisect.bisect_left(self._map_starts, ptr)
            assert i == len(self._map_starts) or self._map_starts[i] >= ptr + size, \
                "releasing a reservation with mappings"

    def _check_range(self, ptr: int, size: int) -> None:
        assert size > 0 and ptr % self.granularity == 0 and size % self.granularity == 0
        for base, rsize in self.reservations.items():
            if base <= ptr and ptr + size <= base + rsize:
                return
        raise AssertionError(f"range {ptr:#x}+{size} is not inside a reservation")

    def vm_map(self, index: int, ptr: int, size: int) -> bool:
        with self._lock:
            self._check_range(ptr, size)
            self.map_calls += 1
            if self.used + size > self.capacity:
                return False
            i = bisect.bisect_left(self._map_starts, ptr)
            if i < len(self._map_starts):
                assert ptr + size <= self._map_starts[i], "mapping over a mapped range"
            if i > 0:
                m = self._map_starts[i - 1]
                assert m + self.mappings[m] <= ptr, "mapping over a mapped range"
            self._map_starts.insert(i, ptr)
            self.mappings[ptr] = size
            self.used += size
            return True

    def vm_unmap(self, index: int, ptr: int, size: int) -> None:
        with self._lock:
            assert self.mappings.pop(ptr, None) == size, "unmapping a range that was not mapped"
            del self._map_starts[bisect.bisect_left(self._map_starts, ptr)]
            self.used -= size
            self.unmap_calls += 1

    # ------------------------------------------------------------------ copies
    def memcpy(self, index: int, dst: int, src: int, nbytes: int, kind: str,
               stream: StreamHandle) -> None:
        self._submit(stream)

    def memset(self, index: int, ptr: int, value: int, nbytes: int,
               stream: StreamHandle) -> None:
        self._submit(stream)

    # ------------------------------------------------------------------ streams
    def _submit(self, stream: int) -> int:
        with self._lock:
            seq = self._stream_seq.get(stream, 0) + 1
            self._stream_seq[stream] = seq
            if self.auto_complete:
                self._stream_done[stream] = seq
            return seq

    def launch_work(self, stream: int) -> None:
        """Queue one unit of (pending, unless auto_complete) work on ``stream``."""
        self._submit(stream)

    def stream_create(self, index: int, priority: int) -> StreamHandle:
        return next(self._ids) + 1000

    def stream_destroy(self, index: int, stream: StreamHandle) -> None:
        """Destroy a stream; its queued work still completes (as in CUDA)."""
        self.destroyed.add(stream)

    def stream_is_valid(self, index: int, stream: StreamHandle) -> bool:
        return isinstance(stream, int) and stream >= 0 and stream not in self.destroyed

    def stream_query(self, index: int, stream: StreamHandle) -> bool:
        with self._lock:
            return self._stream_done.get(stream, 0) >= self._stream_seq.get(stream, 0)

    def stream_synchronize(self, index: int, stream: StreamHandle) -> None:
        self.complete_stream(stream)

    def stream_wait_event(self, index: int, stream: StreamHandle, event: EventHandle) -> None:
        pass

    def synchronize(self, index: int) -> None:
        self.synchronize_calls += 1
        self.complete_all()

    def complete_stream(self, stream: int) -> None:
        """Complete every piece of work queued on ``stream`` so far."""
        with self._lock:
            self._stream_done[stream] = self._stream_seq.get(stream, 0)

    def complete_all(self) -> None:
        """Complete all queued work on every stream."""
        with self._lock:
            for s, seq in self._stream_seq.items():
                self._stream_done[s] = seq

    # ------------------------------------------------------------------ events
    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> EventHandle:
        with self._lock:
            ev = next(self._ids)
            self._events[ev] = None
            return ev

    def event_destroy(self, index: int, event: EventHandle) -> None:
        with self._lock:
            del self._events[event]

    def event_record(self, index: int, event: EventHandle, stream: StreamHandle) -> None:
        if not self.stream_is_valid(index, stream):
            raise ValueError(f"stream {stream} is not a live stream")
        if self.fail_event_record:
            raise RuntimeError("fake event_record failure")
        seq = self._submit(stream)
        with self._lock:
            self._events[event] = (stream, seq)
            self.events_recorded += 1

    def event_query(self, index: int, event: EventHandle) -> bool:
        with self._lock:
            rec = self._events[event]
            if rec is None:
                return True
            stream, seq = rec
            return self._stream_done.get(stream, 0) >= seq

    def event_synchronize(self, index: int, event: EventHandle) -> None:
        with self._lock:
            rec = self._events[event]
            if rec is None:
                return
            stream, seq = rec
            if self._stream_done.get(stream, 0) < seq:
                self._stream_done[stream] = seq

    def event_elapsed_time(self, index: int, start: EventHandle, end: EventHandle) -> float:
        return 0.0
