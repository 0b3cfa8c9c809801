"""A simulated device: it hands out address ranges and counts bytes, touching no memory.

:class:`SimulatedBackend` lets the caching allocator run anywhere at full speed: ``accelrt
replay`` drives an 8 GB training trace through it on a laptop, and allocator tests use it as
their fake device. Every device has a configurable capacity (default 80 GiB); ``malloc``
returns ``0`` once that capacity would be exceeded, exactly as a real backend reports plain
out-of-memory. Virtual memory (``vm_*``) is supported with a 2 MiB granularity so expandable
segments replay too. Streams and events exist only as numbers: all work completes at once.

Example::

    >>> from accelrt.memory._simulated import SimulatedBackend
    >>> b = SimulatedBackend(capacity=1 << 30)
    >>> p = b.malloc(0, 4096)
    >>> b.get_memory_info(0)[0] == (1 << 30) - 4096
    True
    >>> b.free(0, p)
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from typing import Any

from .._backend import Backend, Capabilities
from .._handles import DevicePtr, EventHandle, StreamHandle
from .._errors import OutOfMemoryError
from .._fork import reinit_after_fork
from ..backends._common import KeptErrors

__all__ = ["CALL_NAMES", "SimulatedBackend"]

#: The driver calls a :class:`SimulatedBackend` counts per device (:meth:`~SimulatedBackend.calls`):
#: ``malloc``/``free`` (cuMemAlloc/cuMemFree), ``vm_map`` (one mapping: cuMemCreate + cuMemMap +
#: cuMemSetAccess), ``vm_unmap`` (calls; ``vm_unmapped_mappings`` counts the mappings they
#: removed, one cuMemUnmap + cuMemRelease each), ``vm_reserve``/``vm_release``
#: (cuMemAddressReserve/cuMemAddressFree).
CALL_NAMES = ("malloc", "free", "vm_map", "vm_unmap", "vm_unmapped_mappings", "vm_reserve",
              "vm_release")

_GIB = 1 << 30
_VM_GRANULARITY = 2 << 20         # 2 MiB, as CUDA's minimum granularity on current GPUs
_MALLOC_ALIGN = 512               # addresses returned by malloc are multiples of this
_DEVICE_STRIDE = 1 << 44          # address space of one device (16 TiB) ...
_VM_OFFSET = 1 << 43              # ... whose upper half holds virtual reservations
_HOST_BASE = 1 << 40              # fake pinned host addresses
_CAPS = Capabilities(virtual_memory=True, pinned_host_memory=True, host_functions=True)


def _describe(key: tuple[int, int]) -> str:
    return f"simulated: a host function on stream {key[1]} of simulated:{key[0]} raised"


def _check_size(size: object, what: str) -> int:
    if not isinstance(size, int) or isinstance(size, bool):
        raise TypeError(f"{what} size must be an int, got {type(size).__name__}")
    if size < 0:
        raise ValueError(f"{what} size must not be negative, got {size}")
    return size


def _first_fit(taken: dict[int, int], lo: int, hi: int, step: int, align: int,
               pad: int) -> int:
    """Lowest ``align``-aligned address in ``[lo, hi)`` with ``step`` free bytes clear of the
    ``taken`` ranges (each followed by ``pad`` bytes), or 0 if there is none."""
    at = lo
    for start in sorted(taken):
        if start - at >= step:
            return at
        end = start + max(taken[start], 1) + pad      # an empty block still holds its address
        at = max(at, -(-end // align) * align)
    return at if hi - at >= step else 0


class _Device:
    """Book-keeping of one simulated device (all fields guarded by the backend's lock)."""

    __slots__ = ("base", "blocks", "calls", "mappings", "next_addr", "next_vm", "pages",
                 "reservations", "used")

    def __init__(self, index: int) -> None:
        base = (index + 1) * _DEVICE_STRIDE
        self.used = 0                                   # bytes of malloc + mapped pages
        self.base = base
        self.next_addr = base                           # bump pointer for malloc
        self.next_vm = base + _VM_OFFSET                # bump pointer for vm_reserve
        self.blocks: dict[int, int] = {}                # malloc'd ptr -> size
        self.reservations: dict[int, int] = {}          # reserved base -> size
        self.pages: set[int] = set()                    # addresses of mapped pages
        self.mappings: dict[int, int] = {}              # vm_map'd base -> size
        # successful calls at the backend boundary, by name (see SimulatedBackend.calls)
        self.calls = dict.fromkeys(CALL_NAMES, 0)


class SimulatedBackend(Backend):
    """A backend whose devices only count bytes: nothing is read, written or waited for.

    Args:
        capacity: bytes each device can hold (default 80 GiB).
        device_count: number of devices (default 1).

    Raises:
        TypeError: an argument is not an int.
        ValueError: capacity or device count is not positive.

    Example::

        >>> from accelrt.memory._simulated import SimulatedBackend
        >>> b = SimulatedBackend(capacity=2 << 20)
        >>> b.malloc(0, 4 << 20)   # more than the capacity: plain out-of-memory
        0
    """

    name = "simulated"

    def __init__(self, capacity: int = 80 * _GIB, device_count: int = 1) -> None:
        if not isinstance(capacity, int) or isinstance(capacity, bool):
            raise TypeError(f"capacity must be an int number of bytes, got {type(capacity).__name__}")
        if not isinstance(device_count, int) or isinstance(device_count, bool):
            raise TypeError(f"device_count must be an int, got {type(device_count).__name__}")
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        if not 0 < device_count <= 64:
            raise ValueError(f"device_count must be in 1..64, got {device_count}")
        self.capacity = capacity
        self._lock = reinit_after_fork(threading.Lock())
        self._devices = [_Device(i) for i in range(device_count)]
        self._handles = itertools.count(1)              # streams and events
        self._host: dict[int, int] = {}                 # pinned ptr -> size, guarded by _lock
        self._next_host = _HOST_BASE                    # guarded by _lock
        # the first exception of a host function per (device, stream), raised by the next sync
        self._kept: KeptErrors[tuple[int, int]] = KeptErrors()

    # ------------------------------------------------------------------ queries
    def capabilities(self, index: int) -> Capabilities:
        """Virtual memory (2 MiB granularity), pinned host memory and host functions (they
        run at once: all work completes at once)."""
        return _CAPS

    def device_count(self) -> int:
        return len(self._devices)

    def get_device_properties(self, index: int) -> dict[str, Any]:
        return {"name": "accelrt simulated device", "total_memory": self.capacity,
                "multi_processor_count": 1}

    def get_memory_info(self, index: int) -> tuple[int, int]:
        return (self.capacity - self._devices[index].used, self.capacity)

    # ------------------------------------------------------------------ memory
    def malloc(self, index: int, size: int) -> DevicePtr:
        _check_size(size, "malloc")
        dev = self._devices[index]
        with self._lock:
            if dev.used + size > self.capacity:
                return DevicePtr(0)
            step = max(_MALLOC_ALIGN, -(-size // _MALLOC_ALIGN) * _MALLOC_ALIGN)
            ptr, limit = dev.next_addr, dev.base + _VM_OFFSET
            if ptr + step > limit:          # the bump pointer ran out: reuse a freed range
                ptr = _first_fit(dev.blocks, dev.base, limit, step, _MALLOC_ALIGN, 0)
                if not ptr:
                    return DevicePtr(0)
            dev.next_addr = max(dev.next_addr, ptr + step)
            dev.used += size
            dev.blocks[ptr] = size
            dev.calls["malloc"] += 1
        return DevicePtr(ptr)

    def free(self, index: int, ptr: DevicePtr) -> None:
        dev = self._devices[index]
        with self._lock:
            size = dev.blocks.pop(ptr, None)
            if size is None:
                raise ValueError(f"simulated device {index}: free of {ptr:#x}, which malloc "
                                 "did not return or which was already freed")
            dev.used -= size
            dev.calls["free"] += 1

    def host_malloc(self, size: int) -> int:
        _check_size(size, "host_malloc")
        with self._lock:
            ptr = self._next_host
            self._next_host += max(_MALLOC_ALIGN, -(-size // _MALLOC_ALIGN) * _MALLOC_ALIGN)
            self._host[ptr] = size
        return ptr

    def host_free(self, ptr: int) -> None:
        with self._lock:
            if self._host.pop(ptr, None) is None:
                raise ValueError(f"simulated host_free of {ptr:#x}, which host_malloc did not "
                                 "return or which was already freed")

    def host_bytes(self) -> int:
        """Bytes of simulated pinned host memory currently allocated."""
        with self._lock:
            return sum(self._host.values())

    # ------------------------------------------------------------------ virtual memory
    def vm_granularity(self, index: int) -> int:
        return _VM_GRANULARITY

    def _check_aligned(self, ptr: int, size: int, what: str) -> None:
        if ptr % _VM_GRANULARITY or size % _VM_GRANULARITY or size <= 0:
            raise ValueError(f"{what}: [{ptr:#x}, +{size}) is not a non-empty range aligned to "
                             f"the {_VM_GRANULARITY}-byte granularity")

    def vm_reserve(self, index: int, size: int) -> DevicePtr:
        _check_size(size, "vm_reserve")
        self._check_aligned(0, size, "vm_reserve")
        dev = self._devices[index]
        with self._lock:
            ptr, limit = dev.next_vm, dev.base + _DEVICE_STRIDE
            step = size + _VM_GRANULARITY               # a guard page after each reservation
            if ptr + step > limit:          # the bump pointer ran out: reuse a released range
                ptr = _first_fit(dev.reservations, dev.base + _VM_OFFSET, limit, step,
                                 _VM_GRANULARITY, _VM_GRANULARITY)
                if not ptr:
                    raise OutOfMemoryError(f"simulated device {index}: no {size}-byte range "
                                           "of virtual addresses is left", size)
            dev.next_vm = max(dev.next_vm, ptr + step)
            dev.reservations[ptr] = size
            dev.calls["vm_reserve"] += 1
        return DevicePtr(ptr)

    def vm_release(self, index: int, ptr: DevicePtr, size: int) -> None:
        dev = self._devices[index]
        with self._lock:
            if dev.reservations.get(ptr) != size:
                raise ValueError(f"vm_release: [{ptr:#x}, +{size}) is not a reservation")
            if any(ptr <= p < ptr + size for p in dev.pages):
                raise ValueError(f"vm_release: [{ptr:#x}, +{size}) still has mapped pages")
            del dev.reservations[ptr]
            dev.calls["vm_release"] += 1

    def _pages(self, dev: _Device, ptr: int, size: int, what: str) -> range:
        self._check_aligned(ptr, size, what)
        for base, rsize in dev.reservations.items():
            if base <= ptr and ptr + size <= base + rsize:
                return range(ptr, ptr + size, _VM_GRANULARITY)
        raise ValueError(f"{what}: [{ptr:#x}, +{size}) is not inside a reservation")

    def vm_map(self, index: int, ptr: int, size: int) -> bool:
        """Back ``[ptr, ptr+size)`` with one mapping (as cuMemCreate + cuMemMap would): it can
        only be unmapped whole, alone or with adjacent mappings."""
        dev = self._devices[index]
        with self._lock:
            pages = self._pages(dev, ptr, size, "vm_map")
            if not dev.pages.isdisjoint(pages):
                raise ValueError(f"vm_map: [{ptr:#x}, +{size}) overlaps mapped pages")
            if dev.used + size > self.capacity:
                return False
            dev.pages.update(pages)
            dev.mappings[ptr] = size
            dev.used += size
            dev.calls["vm_map"] += 1
        return True

    def vm_unmap(self, index: int, ptr: int, size: int) -> None:
        """Unmap ``[ptr, ptr+size)``: a run of whole mappings made by :meth:`vm_map` (a range
        that cuts a mapping raises ``ValueError``, as on CUDA)."""
        dev = self._devices[index]
        with self._lock:
            pages = self._pages(dev, ptr, size, "vm_unmap")
            if not dev.pages.issuperset(pages):
                raise ValueError(f"vm_unmap: [{ptr:#x}, +{size}) is not entirely mapped")
            mappings = dev.mappings
            cur, end = ptr, ptr + size
            parts = []
            while cur < end:
                msize = mappings.get(cur)
                if msize is None or cur + msize > end:
                    raise ValueError(f"vm_unmap: [{ptr:#x}, +{size}) cuts a mapping at "
                                     f"{cur:#x}; unmap whole ranges given to vm_map")
                parts.append(cur)
                cur += msize
            for base in parts:
                del mappings[base]
            dev.pages.difference_update(pages)
            dev.used -= size
            calls = dev.calls
            calls["vm_unmap"] += 1
            calls["vm_unmapped_mappings"] += len(parts)

    def calls(self, index: int = 0) -> dict[str, int]:
        """Successful driver calls made on device ``index`` so far, by name (:data:`CALL_NAMES`).

        Example::

            >>> from accelrt.memory._simulated import SimulatedBackend
            >>> b = SimulatedBackend()
            >>> b.free(0, b.malloc(0, 512))
            >>> b.calls(0)["malloc"], b.calls(0)["free"], b.calls(0)["vm_map"]
            (1, 1, 0)
        """
        with self._lock:
            return dict(self._devices[index].calls)

    # ------------------------------------------------------------------ copies (no memory)
    def memcpy(self, index: int, dst: int, src: int, nbytes: int, kind: str,
               stream: StreamHandle) -> None:
        """Does nothing: a simulated device holds no data."""

    def memset(self, index: int, ptr: int, value: int, nbytes: int,
               stream: StreamHandle) -> None:
        """Does nothing: a simulated device holds no data."""

    def fill(self, index: int, ptr: int, pattern: bytes, count: int,
             stream: StreamHandle) -> None:
        """Does nothing: a simulated device holds no data."""

    # ------------------------------------------------------------------ streams and events
    def stream_create(self, index: int, priority: int) -> StreamHandle:
        return StreamHandle(next(self._handles))

    def stream_query(self, index: int, stream: StreamHandle) -> bool:
        self._kept.raise_for([(index, stream)], _describe)
        return True

    def stream_synchronize(self, index: int, stream: StreamHandle) -> None:
        self._kept.raise_for([(index, stream)], _describe)

    def stream_wait_event(self, index: int, stream: StreamHandle, event: EventHandle) -> None:
        return None

    def synchronize(self, index: int) -> None:
        self._kept.raise_first(lambda key: key[0] == index, _describe)

    def launch_host_func(self, index: int, fn: Callable[[], None], stream: StreamHandle) -> None:
        """Run ``fn`` at once (all work completes at once); an exception it raises is kept
        and raised by the next synchronization of the stream or device, as on a device."""
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - kept and raised by the next sync
            self._kept.keep((index, stream), exc)

    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> EventHandle:
        return EventHandle(next(self._handles))

    def event_destroy(self, index: int, event: EventHandle) -> None:
        return None

    def event_record(self, index: int, event: EventHandle, stream: StreamHandle) -> None:
        return None

    def event_query(self, index: int, event: EventHandle) -> bool:
        return True

    def event_synchronize(self, index: int, event: EventHandle) -> None:
        return None

    def event_elapsed_time(self, index: int, start: EventHandle, end: EventHandle) -> float:
        return 0.0
