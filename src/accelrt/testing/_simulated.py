"""The simulated backend: devices that hand out address ranges and count bytes and calls,
touching no memory. It is accelrt's one fake device.

:class:`SimulatedBackend` lets the caching allocator run anywhere at full speed: ``accelrt
replay`` drives an 8 GB training trace through it on a laptop, ``accelrt tune`` and the
benchmarks measure the allocator on it, and accelrt's own tests use it wherever they need a
device they can fill, count and stall at will. It is public as
``accelrt.testing.SimulatedBackend``; this module keeps its historical path.

What it simulates:

* **devices and capacity**: ``device_count`` devices of ``capacity`` bytes each; ``malloc``
  returns ``0`` and ``vm_map`` returns ``False`` once the capacity would be exceeded, exactly as
  a real backend reports plain out-of-memory; :attr:`~SimulatedBackend.used` is the bytes in
  use. Pinned host memory is counted too (``host_capacity`` limits it).
* **virtual memory** (``vm_*``) with a configurable granularity (2 MiB, CUDA's, by default),
  or none at all (``vm=False``), so expandable segments replay too.
* **a deterministic address layout**: device ``i``'s ``malloc`` addresses start at
  ``(i + 1) << 44``, are multiples of 512 and are handed out by a bump pointer (ranges are
  reused first-fit only once its 8 TiB run out); virtual reservations come from the upper 8 TiB
  of the device's range, each followed by a one-granule guard. The same calls give the same
  device addresses in every run. Pinned host memory is real host memory (accelrt reads and
  writes it: staging, ``pin_memory``), aligned to 512 bytes; its contents are whatever was
  written there, as the device copies into it copy nothing.
* **call counting**: :meth:`~SimulatedBackend.calls` counts every successful operation per
  device, by name (:data:`CALL_NAMES`).
* **completion**: with ``auto_complete=True`` (the default) all work completes at once, and a
  host function runs at its launch. With ``auto_complete=False`` every operation queued on a
  stream (copies, memsets, fills, event records, host functions, :meth:`~SimulatedBackend.
  launch_work`) stays pending until :meth:`~SimulatedBackend.complete_stream`,
  :meth:`~SimulatedBackend.complete_all`, or a synchronization that waits for it
  (``stream_synchronize``, ``event_synchronize``, ``synchronize``): a test decides when a
  stream-ordered free becomes reusable, with no thread and no sleep. Host functions then run
  when their stream's work completes up to them; the first exception one raises is kept and
  raised by the next synchronization of its stream or device, as on a device.

Example::

    >>> from accelrt.testing import SimulatedBackend
    >>> b = SimulatedBackend(capacity=1 << 30, auto_complete=False)
    >>> p = b.malloc(0, 4096)
    >>> b.get_memory_info(0)[0] == (1 << 30) - 4096, b.used
    (True, 4096)
    >>> s = b.stream_create(0, 0)
    >>> e = b.event_create(0, False, False, False)
    >>> b.event_record(0, e, s)
    >>> b.event_query(0, e)            # pending until the test completes the stream
    False
    >>> b.complete_stream(s)
    >>> b.event_query(0, e)
    True
    >>> b.free(0, p)
    >>> b.calls(0)["malloc"], b.calls(0)["event_record"], b.used
    (1, 1, 0)
"""

from __future__ import annotations

import itertools
import threading
from bisect import bisect_left
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from .._backend import Backend, Capabilities
from .._errors import OutOfMemoryError, type_shown
from .._fork import reinit_after_fork
from .._handles import DevicePtr, EventHandle, StreamHandle
from ..backends._common import (KeptErrors, bad_handle, check_byte, check_index, check_int,
                                check_ptr, check_size, fill_pattern)
from ._sim_device import vm_map_range, vm_unmap_range

__all__ = ["CALL_NAMES", "SimulatedBackend"]

#: The operations a :class:`SimulatedBackend` counts per device (:meth:`~SimulatedBackend.calls`),
#: each once per successful call. The memory ones stand for driver calls: ``malloc``/``free``
#: (cuMemAlloc/cuMemFree), ``vm_map`` (one mapping: cuMemCreate + cuMemMap + cuMemSetAccess),
#: ``vm_unmap`` (calls; ``vm_unmapped_mappings`` counts the mappings they removed, one
#: cuMemUnmap + cuMemRelease each), ``vm_reserve``/``vm_release`` (cuMemAddressReserve/
#: cuMemAddressFree). The rest are the contract's stream, event and copy operations.
CALL_NAMES = ("malloc", "free", "vm_map", "vm_unmap", "vm_unmapped_mappings", "vm_reserve",
              "vm_release", "memcpy", "memset", "fill", "init_device", "stream_create",
              "stream_destroy",
              "stream_query", "stream_synchronize", "stream_wait_event", "synchronize",
              "launch_host_func", "event_create", "event_destroy", "event_record",
              "event_query", "event_synchronize", "event_elapsed_time")

_GIB = 1 << 30
_VM_GRANULARITY = 2 << 20         # 2 MiB, as CUDA's minimum granularity on current GPUs
_MALLOC_ALIGN = 512               # addresses returned by malloc are multiples of this
_DEVICE_STRIDE = 1 << 44          # address space of one device (16 TiB) ...
_VM_OFFSET = 1 << 43              # ... whose upper half holds virtual reservations
_MAX_DEVICES = 64
_KINDS = frozenset(("h2d", "d2h", "d2d", "h2h"))


def _describe(key: tuple[int, int]) -> str:
    return f"simulated: a host function on stream {key[1]} of simulated:{key[0]} raised"


def _check_size(size: object, what: str) -> int:
    if not isinstance(size, int) or isinstance(size, bool):
        raise TypeError(f"{what} size must be an int, got {type_shown(size)}")
    if size < 0:
        raise ValueError(f"{what} size must not be negative, got {size}")
    return size


def _check_int(value: object, what: str, lo: int, hi: int | None = None) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{what} must be an int, got {type_shown(value)}")
    if value < lo or (hi is not None and value > hi):
        bound = f"in {lo}..{hi}" if hi is not None else f"at least {lo}"
        raise ValueError(f"{what} must be {bound}, got {value}")
    return value


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

    __slots__ = ("base", "blocks", "calls", "destroyed", "done", "host_funcs", "map_starts",
                 "mappings", "next_addr", "next_vm", "queued", "reservations", "used", "waits")

    def __init__(self, index: int) -> None:
        base = (index + 1) * _DEVICE_STRIDE
        self.used = 0                                   # bytes of malloc + mapped pages
        self.base = base
        self.next_addr = base                           # bump pointer for malloc
        self.next_vm = base + _VM_OFFSET                # bump pointer for vm_reserve
        self.blocks: dict[int, int] = {}                # malloc'd ptr -> size
        self.reservations: dict[int, int] = {}          # reserved base -> size
        self.mappings: dict[int, int] = {}              # vm_map'd base -> size
        self.map_starts: list[int] = []                 # the bases of mappings, sorted
        # successful calls at the backend boundary, by name (see SimulatedBackend.calls)
        self.calls = dict.fromkeys(CALL_NAMES, 0)
        # work on each stream: numbered in submission order; done up to done[stream]
        self.queued: dict[int, int] = {}
        self.done: dict[int, int] = {}
        self.destroyed: set[int] = set()                # destroyed stream handles
        # host functions waiting for their stream: stream -> [(work number, fn)]
        self.host_funcs: dict[int, list[tuple[int, Callable[[], None]]]] = {}
        # waits for an event still pending when the wait was queued: stream -> [(work number
        # of the wait, device, stream and work number of the event's record)]
        self.waits: dict[int, list[tuple[int, int, int, int]]] = {}


class SimulatedBackend(Backend):
    """A backend whose devices only count bytes and calls: nothing is read or written, and
    work completes at once or when the caller says (see the module docstring).

    Args:
        capacity: bytes each device holds (default 80 GiB); allocations and mappings beyond
            it fail as plain out-of-memory.
        device_count: number of devices (1 to 64, default 1).
        granularity: ``vm_granularity`` in bytes, a power of two (default 2 MiB).
        vm: whether the devices have virtual memory (``capabilities().virtual_memory``).
        auto_complete: work completes as soon as it is queued (default); False keeps it
            pending until :meth:`complete_stream`, :meth:`complete_all` or a synchronization.
        host_capacity: bytes of pinned host memory ``host_malloc`` gives before it returns 0
            (default: unlimited).
        priority_range: ``stream_priority_range()``, ``(least, greatest)`` (default
            ``(0, 0)``: one priority).
        name: the backend's name, to register an instance under another name (default
            the class's, ``"simulated"``).

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument is out of range (capacity not positive, granularity not a
            power of two, a name that is not a lower-case identifier, ...).

    Example::

        >>> from accelrt.testing import SimulatedBackend
        >>> b = SimulatedBackend(capacity=2 << 20, device_count=2)
        >>> b.malloc(0, 4 << 20)   # more than the capacity: plain out-of-memory
        0
        >>> hex(b.malloc(1, 1000))  # device 1's first address (the layout is deterministic)
        '0x200000000000'
    """

    name = "simulated"

    def __init__(self, capacity: int = 80 * _GIB, device_count: int = 1, *,
                 granularity: int = _VM_GRANULARITY, vm: bool = True,
                 auto_complete: bool = True, host_capacity: int | None = None,
                 priority_range: tuple[int, int] = (0, 0), name: str | None = None) -> None:
        self._closed = False   # Backend._closed on the instance: each operation reads it
        if not isinstance(capacity, int) or isinstance(capacity, bool):
            raise TypeError(f"capacity must be an int number of bytes, got {type_shown(capacity)}")
        if not isinstance(device_count, int) or isinstance(device_count, bool):
            raise TypeError(f"device_count must be an int, got {type_shown(device_count)}")
        if capacity <= 0:
            raise ValueError(f"capacity must be positive, got {capacity}")
        if not 0 < device_count <= _MAX_DEVICES:
            raise ValueError(f"device_count must be in 1..{_MAX_DEVICES}, got {device_count}")
        _check_int(granularity, "granularity", 512, _VM_OFFSET)
        if granularity & (granularity - 1):
            raise ValueError(f"granularity must be a power of two, got {granularity}")
        if host_capacity is not None:
            _check_int(host_capacity, "host_capacity", 0)
        if (not isinstance(priority_range, tuple) or len(priority_range) != 2
                or not all(isinstance(p, int) for p in priority_range)
                or priority_range[1] > priority_range[0]):
            raise ValueError(f"priority_range must be a (least, greatest) pair of ints with "
                             f"greatest <= least, as CUDA's, got {priority_range!r}")
        for flag, what in ((vm, "vm"), (auto_complete, "auto_complete")):
            if not isinstance(flag, bool):
                raise TypeError(f"{what} must be a bool, got {type_shown(flag)}")
        if name is not None:
            from .._backend import _check_name
            self.name = _check_name(name)  # type: ignore[misc]  # shadows the class's name
        self.capacity = capacity
        self.granularity = granularity
        self.host_capacity = host_capacity
        self.auto_complete = auto_complete
        self._priority_range = priority_range
        self._caps = Capabilities(virtual_memory=vm, pinned_host_memory=True,
                                  page_locked_host_memory=True, host_functions=True,
                                  device_fill=True)
        self._lock = reinit_after_fork(threading.Lock())
        self._devices = [_Device(i) for i in range(device_count)]
        self._handles = itertools.count(1)              # streams and events
        self._streams: set[int] = set()                 # live streams made, guarded by _lock
        # event -> (device, stream, work number) of its last record, or None; guarded by _lock
        self._events: dict[int, tuple[int, int, int] | None] = {}
        # pinned ptr -> (size, the buffer holding it), guarded by _lock
        self._host: dict[int, tuple[int, np.ndarray]] = {}
        # the first exception of a host function per (device, stream), raised by the next sync
        self._kept: KeptErrors[tuple[int, int]] = KeptErrors()

    # ------------------------------------------------------------------ queries
    def capabilities(self, index: int) -> Capabilities:
        """Virtual memory (unless ``vm=False``), pinned host memory and host functions."""
        self._device(index)
        return self._caps

    def device_count(self) -> int:
        return len(self._devices)

    def get_device_properties(self, index: int) -> dict[str, Any]:
        self._device(index)
        return {"name": "accelrt simulated device", "total_memory": self.capacity,
                "multi_processor_count": 1}

    def get_memory_info(self, index: int) -> tuple[int, int]:
        return (self.capacity - self._device(index).used, self.capacity)

    @property
    def used(self) -> int:
        """Bytes of device memory in use (``malloc``'d or mapped) on all devices together."""
        with self._lock:
            return sum(dev.used for dev in self._devices)

    @property
    def reservations(self) -> dict[int, int]:
        """The live virtual reservations of all devices, base address -> size (a copy)."""
        with self._lock:
            return {base: size for dev in self._devices
                    for base, size in dev.reservations.items()}

    def calls(self, index: int = 0) -> dict[str, int]:
        """Successful calls made on device ``index`` so far, by operation (:data:`CALL_NAMES`).

        Example::

            >>> from accelrt.testing import SimulatedBackend
            >>> b = SimulatedBackend()
            >>> b.free(0, b.malloc(0, 512))
            >>> b.calls(0)["malloc"], b.calls(0)["free"], b.calls(0)["vm_map"]
            (1, 1, 0)
        """
        if self._closed:
            raise self._closed_error("calls")
        with self._lock:
            return dict(self._device(index).calls)

    def live_handles(self) -> dict[str, int]:
        """Streams made and not destroyed, and events not destroyed (read by
        :func:`accelrt.testing.leak_check`)."""
        if self._closed:
            raise self._closed_error("live_handles")
        with self._lock:
            return {"streams": len(self._streams), "events": len(self._events), "graphs": 0}

    def last_record(self, event: EventHandle) -> tuple[int, StreamHandle] | None:
        """``(device, stream)`` of the last :meth:`event_record` of ``event`` (``None``:
        never recorded)."""
        if self._closed:
            raise self._closed_error("last_record")
        rec = self._event(event)
        return None if rec is None else (rec[0], StreamHandle(rec[1]))

    def init_device(self, index: int) -> None:
        """Counted only (``calls(index)["init_device"]``): the core calls it once per thread
        and device before the first operation there, as it would make a context current."""
        if self._closed:
            raise self._closed_error("init_device")
        self._count(index, "init_device")

    def _device(self, index: object) -> _Device:
        """Device ``index``'s book-keeping; TypeError for a non-int index (``bool`` too),
        IndexError for one out of range (a negative index named the last devices)."""
        devices = self._devices
        if type(index) is int and 0 <= index < len(devices):
            return devices[index]
        return devices[check_index(index, len(devices), "simulated",
                                   f"this backend has {len(devices)} device(s)")]

    def _stream_arg(self, index: int, stream: object, what: str,
                    live: bool = True) -> StreamHandle:
        """``stream`` if it names a stream of device ``index``: any non-negative int (that
        was not destroyed, with ``live``: :meth:`stream_is_valid`; the work of a destroyed
        stream may still be queried and waited for); TypeError or ValueError naming
        ``what``."""
        dev = self._device(index)
        if type(stream) is int and stream >= 0 and not (live and stream in dev.destroyed):
            return cast("StreamHandle", stream)
        raise bad_handle("stream", stream, f" of simulated:{index}",
                         f"{what} on a stream handle from stream_create (or 0)"
                         + (" that was not destroyed" if live else ""))

    def _count(self, index: int, what: str) -> _Device:
        dev = self._device(index)
        with self._lock:
            dev.calls[what] += 1
        return dev

    # ------------------------------------------------------------------ memory
    def malloc(self, index: int, size: int) -> DevicePtr:
        if self._closed:
            raise self._closed_error("malloc")
        _check_size(size, "malloc")
        dev = self._device(index)
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
        if self._closed:
            raise self._closed_error("free")
        dev = self._device(index)
        with self._lock:
            size = dev.blocks.pop(ptr, None)
            if size is None:
                raise ValueError(f"simulated device {index}: free of {ptr:#x}, which malloc "
                                 "did not return or which was already freed")
            dev.used -= size
            dev.calls["free"] += 1

    def host_malloc(self, size: int) -> int:
        if self._closed:
            raise self._closed_error("host_malloc")
        _check_size(size, "host_malloc")
        with self._lock:
            if (self.host_capacity is not None
                    and self._host_used() + size > self.host_capacity):
                return 0
            # real memory: the core reads and writes pinned memory on the host
            buf = np.empty(max(size, 1) + _MALLOC_ALIGN, np.uint8)
            ptr = buf.ctypes.data + (-buf.ctypes.data % _MALLOC_ALIGN)
            self._host[ptr] = (size, buf)
        return ptr

    def _host_used(self) -> int:
        return sum(size for size, _ in self._host.values())

    def host_free(self, ptr: int) -> None:
        if self._closed:
            raise self._closed_error("host_free")
        with self._lock:
            if self._host.pop(ptr, None) is None:
                raise ValueError(f"simulated host_free of {ptr:#x}, which host_malloc did not "
                                 "return or which was already freed")

    def host_bytes(self) -> int:
        """Bytes of simulated pinned host memory currently allocated."""
        if self._closed:
            raise self._closed_error("host_bytes")
        with self._lock:
            return self._host_used()

    # ------------------------------------------------------------------ virtual memory
    def _check_vm(self, what: str) -> None:
        if not self._caps.virtual_memory:
            raise NotImplementedError(
                f"the {self.name} backend was made with vm=False, so it does not implement "
                f"{what} (its capabilities() has virtual_memory=False); check "
                "backend.capabilities(index).virtual_memory before calling it")

    def vm_granularity(self, index: int) -> int:
        if self._closed:
            raise self._closed_error("vm_granularity")
        self._check_vm("vm_granularity")
        return self.granularity

    def _check_aligned(self, ptr: int, size: int, what: str) -> None:
        g = self.granularity
        if ptr % g or size % g or size <= 0:
            raise ValueError(f"{what}: [{ptr:#x}, +{size}) is not a non-empty range aligned to "
                             f"the {g}-byte granularity")

    def vm_reserve(self, index: int, size: int) -> DevicePtr:
        if self._closed:
            raise self._closed_error("vm_reserve")
        self._check_vm("vm_reserve")
        _check_size(size, "vm_reserve")
        self._check_aligned(0, size, "vm_reserve")
        dev, g = self._device(index), self.granularity
        with self._lock:
            ptr, limit = dev.next_vm, dev.base + _DEVICE_STRIDE
            step = size + g                             # a guard granule after each reservation
            if ptr + step > limit:          # the bump pointer ran out: reuse a released range
                ptr = _first_fit(dev.reservations, dev.base + _VM_OFFSET, limit, step, g, g)
                if not ptr:
                    raise OutOfMemoryError(f"simulated device {index}: no {size}-byte range "
                                           "of virtual addresses is left", size)
            dev.next_vm = max(dev.next_vm, ptr + step)
            dev.reservations[ptr] = size
            dev.calls["vm_reserve"] += 1
        return DevicePtr(ptr)

    def vm_release(self, index: int, ptr: DevicePtr, size: int) -> None:
        if self._closed:
            raise self._closed_error("vm_release")
        self._check_vm("vm_release")
        dev = self._device(index)
        with self._lock:
            if dev.reservations.get(ptr) != size:
                raise ValueError(f"vm_release: [{ptr:#x}, +{size}) is not a reservation")
            starts = dev.map_starts
            i = bisect_left(starts, ptr)
            if i < len(starts) and starts[i] < ptr + size:
                raise ValueError(f"vm_release: [{ptr:#x}, +{size}) still has mapped pages")
            del dev.reservations[ptr]
            dev.calls["vm_release"] += 1

    def vm_map(self, index: int, ptr: int, size: int) -> bool:
        """Back ``[ptr, ptr+size)`` with one mapping (as cuMemCreate + cuMemMap would): it can
        only be unmapped whole, alone or with adjacent mappings."""
        if self._closed:
            raise self._closed_error("vm_map")
        dev = self._device(index)
        if not self._caps.virtual_memory:
            self._check_vm("vm_map")
        with self._lock:
            mapped = vm_map_range(dev.reservations, dev.mappings, dev.map_starts, ptr, size,
                                  self.granularity, self.capacity - dev.used)
            if not mapped:
                return False
            dev.used += mapped
            dev.calls["vm_map"] += 1
        return True

    def vm_unmap(self, index: int, ptr: int, size: int) -> None:
        """Unmap ``[ptr, ptr+size)``: a run of whole mappings made by :meth:`vm_map` (a range
        that cuts a mapping raises ``ValueError``, as on CUDA)."""
        if self._closed:
            raise self._closed_error("vm_unmap")
        dev = self._device(index)
        if not self._caps.virtual_memory:
            self._check_vm("vm_unmap")
        with self._lock:
            starts = dev.map_starts
            count = len(starts)
            dev.used -= vm_unmap_range(dev.reservations, dev.mappings, starts, ptr, size,
                                       self.granularity)
            calls = dev.calls
            calls["vm_unmap"] += 1
            calls["vm_unmapped_mappings"] += count - len(starts)

    # ------------------------------------------------------------------ work and completion
    def _submit(self, index: int, stream: int, what: str,
                fn: Callable[[], None] | None = None) -> int:
        """Queue one operation on ``stream``; return its work number."""
        dev = self._device(index)
        with self._lock:
            dev.calls[what] += 1
            seq = dev.queued.get(stream, 0) + 1
            dev.queued[stream] = seq
            if fn is not None and not self.auto_complete:
                dev.host_funcs.setdefault(stream, []).append((seq, fn))
                return seq
            if self.auto_complete:
                dev.done[stream] = seq
        if fn is not None:
            self._run_host_func(index, stream, fn)
        return seq

    def _run_host_func(self, index: int, stream: int, fn: Callable[[], None]) -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - kept and raised by the next sync
            self._kept.keep((index, stream), exc)

    def _complete(self, index: int, stream: int, upto: int | None = None) -> None:
        """Complete the work queued on ``stream`` (up to work number ``upto``), running the
        host functions it reaches, in order, outside the lock. The work that a wait it reaches
        waits for (:meth:`stream_wait_event`) completes first, as a device runs a stream past
        a wait only once the event completed."""
        dev = self._device(index)
        while True:
            with self._lock:
                last = dev.queued.get(stream, 0)
                target = last if upto is None else min(upto, last)
                if dev.done.get(stream, 0) >= target:
                    return
                waits = dev.waits.get(stream, ())
                due = [w for w in waits if w[0] <= target]
                if not due:
                    break
                later = [w for w in waits if w[0] > target]
                if later:
                    dev.waits[stream] = later
                else:
                    del dev.waits[stream]
            for _, src_index, src_stream, src_seq in due:
                self._complete(src_index, src_stream, src_seq)
        with self._lock:
            if dev.done.get(stream, 0) >= target:
                return
            dev.done[stream] = target
            waiting = dev.host_funcs.get(stream)
            ready: list[Callable[[], None]] = []
            if waiting:
                while waiting and waiting[0][0] <= target:
                    ready.append(waiting.pop(0)[1])
                if not waiting:
                    del dev.host_funcs[stream]
        for fn in ready:
            self._run_host_func(index, stream, fn)

    def launch_work(self, stream: int, index: int = 0) -> None:
        """Queue one operation on ``stream`` of device ``index`` (it stays pending unless
        ``auto_complete``): what a kernel launch would do to the stream's completion."""
        if self._closed:
            raise self._closed_error("launch_work")
        dev = self._device(index)
        with self._lock:
            seq = dev.queued.get(stream, 0) + 1
            dev.queued[stream] = seq
            if self.auto_complete:
                dev.done[stream] = seq

    def complete_stream(self, stream: int, index: int = 0) -> None:
        """Complete every operation queued on ``stream`` of device ``index`` so far."""
        if self._closed:
            raise self._closed_error("complete_stream")
        self._complete(index, stream)

    def complete_all(self) -> None:
        """Complete every operation queued so far on every stream of every device."""
        if self._closed:
            raise self._closed_error("complete_all")
        for index, dev in enumerate(self._devices):
            with self._lock:
                streams = list(dev.queued)
            for stream in streams:
                self._complete(index, stream)

    def close(self) -> None:
        """Complete the work still queued (running its host functions), then close (see
        :meth:`Backend.close`)."""
        if not self.closed:
            self.complete_all()
        super().close()

    # ------------------------------------------------------------------ copies (no memory)
    def memcpy(self, index: int, dst: int, src: int, nbytes: int, kind: str,
               stream: StreamHandle) -> None:
        """Queue a copy that copies nothing: a simulated device holds no data."""
        if self._closed:
            raise self._closed_error("memcpy")
        # (the checks of a real backend's, but the ranges: the device holds no memory)
        stream = self._stream_arg(index, stream, "memcpy")
        if kind not in _KINDS:
            raise ValueError(f"memcpy kind {kind!r} must be one of 'h2d', 'd2h', 'd2d', 'h2h'")
        check_size(nbytes, "nbytes", allow_zero=True)
        check_ptr(dst, "dst")
        check_ptr(src, "src")
        self._submit(index, stream, "memcpy")

    def memset(self, index: int, ptr: int, value: int, nbytes: int,
               stream: StreamHandle) -> None:
        """Queue a memset that writes nothing: a simulated device holds no data."""
        if self._closed:
            raise self._closed_error("memset")
        stream = self._stream_arg(index, stream, "memset")
        check_byte(value)
        check_size(nbytes, "nbytes", allow_zero=True)
        check_ptr(ptr)
        self._submit(index, stream, "memset")

    def fill(self, index: int, ptr: int, pattern: bytes, count: int,
             stream: StreamHandle) -> None:
        """Queue a fill that writes nothing: a simulated device holds no data."""
        if self._closed:
            raise self._closed_error("fill")
        stream = self._stream_arg(index, stream, "fill")
        fill_pattern(pattern)
        check_size(count, "count", allow_zero=True)
        check_ptr(ptr)
        self._submit(index, stream, "fill")

    # ------------------------------------------------------------------ streams
    def stream_priority_range(self, index: int) -> tuple[int, int]:
        self._device(index)
        return self._priority_range

    def stream_create(self, index: int, priority: int) -> StreamHandle:
        if self._closed:
            raise self._closed_error("stream_create")
        check_int(priority, "stream priority")
        self._count(index, "stream_create")
        with self._lock:
            stream = next(self._handles)
            self._streams.add(stream)
        return StreamHandle(stream)

    def stream_destroy(self, index: int, stream: StreamHandle) -> None:
        """Forget ``stream``; its queued work still completes (as in CUDA) and
        :meth:`synchronize` still waits for it."""
        if self._closed:
            raise self._closed_error("stream_destroy")
        stream = self._stream_arg(index, stream, "stream_destroy", live=False)
        dev = self._count(index, "stream_destroy")
        with self._lock:
            dev.destroyed.add(stream)
            self._streams.discard(stream)

    def stream_is_valid(self, index: int, stream: StreamHandle) -> bool:
        """Any non-negative int names a stream until it is destroyed (a test may queue work
        on stream 3 without making it)."""
        if self._closed:
            raise self._closed_error("stream_is_valid")
        if isinstance(stream, bool) or not isinstance(stream, int) or stream < 0:
            return False
        return stream not in self._device(index).destroyed

    def stream_query(self, index: int, stream: StreamHandle) -> bool:
        if self._closed:
            raise self._closed_error("stream_query")
        stream = self._stream_arg(index, stream, "stream_query", live=False)
        dev = self._count(index, "stream_query")
        self._kept.raise_for([(index, stream)], _describe)
        with self._lock:
            return dev.done.get(stream, 0) >= dev.queued.get(stream, 0)

    def stream_synchronize(self, index: int, stream: StreamHandle) -> None:
        if self._closed:
            raise self._closed_error("stream_synchronize")
        stream = self._stream_arg(index, stream, "stream_synchronize", live=False)
        self._count(index, "stream_synchronize")
        self._complete(index, stream)
        self._kept.raise_for([(index, stream)], _describe)

    def stream_wait_event(self, index: int, stream: StreamHandle, event: EventHandle) -> None:
        """Make the work queued on ``stream`` after this call wait for ``event``'s record as it
        is now: a wait for a record still pending is one more operation of ``stream``, and
        completing it (:meth:`complete_stream`, a synchronization) completes the recording
        stream up to the record first, as on a device (PyTorch's ``test_events_wait``: a
        stream synchronized after waiting on an event leaves the event complete). A wait for
        an unrecorded or completed event is counted only."""
        if self._closed:
            raise self._closed_error("stream_wait_event")
        stream = self._stream_arg(index, stream, "stream_wait_event")
        rec = self._event(event)
        dev = self._count(index, "stream_wait_event")
        if rec is None:
            return
        src_index, src_stream, src_seq = rec
        with self._lock:
            if self._devices[src_index].done.get(src_stream, 0) >= src_seq:
                return
            seq = dev.queued.get(stream, 0) + 1
            dev.queued[stream] = seq
            dev.waits.setdefault(stream, []).append((seq, src_index, src_stream, src_seq))

    def synchronize(self, index: int) -> None:
        if self._closed:
            raise self._closed_error("synchronize")
        dev = self._count(index, "synchronize")
        with self._lock:
            streams = list(dev.queued)
        for stream in streams:
            self._complete(index, stream)
        self._kept.raise_first(lambda key: key[0] == index, _describe)

    def launch_host_func(self, index: int, fn: Callable[[], None], stream: StreamHandle) -> None:
        """Run ``fn`` once the work queued on ``stream`` before it completes (at once with
        ``auto_complete``); an exception it raises is kept and raised by the next
        synchronization of the stream or device, as on a device."""
        if self._closed:
            raise self._closed_error("launch_host_func")
        stream = self._stream_arg(index, stream, "launch_host_func")
        if not callable(fn):
            raise TypeError(f"launch_host_func needs a callable, got {type_shown(fn)}")
        self._submit(index, stream, "launch_host_func", fn)

    # ------------------------------------------------------------------ events
    def _event(self, event: int) -> tuple[int, int, int] | None:
        try:
            return self._events[event]
        except (KeyError, TypeError):
            raise bad_handle("event", event, " of the simulated backend",
                             "use a handle from event_create that was not destroyed") from None

    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> EventHandle:
        if self._closed:
            raise self._closed_error("event_create")
        self._count(index, "event_create")
        with self._lock:
            event = next(self._handles)
            self._events[event] = None
        return EventHandle(event)

    def event_destroy(self, index: int, event: EventHandle) -> None:
        if self._closed:
            raise self._closed_error("event_destroy")
        self._event(event)
        self._count(index, "event_destroy")
        with self._lock:
            self._events.pop(event, None)

    def event_record(self, index: int, event: EventHandle, stream: StreamHandle) -> None:
        """Record ``event`` on ``stream``: one more operation of the stream, which completes
        with it."""
        if self._closed:
            raise self._closed_error("event_record")
        self._event(event)
        if not self.stream_is_valid(index, stream):
            raise bad_handle("stream", stream, f" of simulated:{index}",
                             "record on a stream that was not destroyed")
        seq = self._submit(index, stream, "event_record")
        with self._lock:
            self._events[event] = (index, stream, seq)

    def event_query(self, index: int, event: EventHandle) -> bool:
        if self._closed:
            raise self._closed_error("event_query")
        rec = self._event(event)
        self._count(index, "event_query")
        if rec is None:
            return True
        dev_index, stream, seq = rec
        dev = self._devices[dev_index]
        with self._lock:
            return dev.done.get(stream, 0) >= seq

    def event_synchronize(self, index: int, event: EventHandle) -> None:
        if self._closed:
            raise self._closed_error("event_synchronize")
        rec = self._event(event)
        self._count(index, "event_synchronize")
        if rec is not None:
            dev_index, stream, seq = rec
            self._complete(dev_index, stream, seq)
            self._kept.raise_for([(dev_index, stream)], _describe)

    def event_elapsed_time(self, index: int, start: EventHandle, end: EventHandle) -> float:
        """0.0: simulated work takes no time."""
        if self._closed:
            raise self._closed_error("event_elapsed_time")
        self._event(start)
        self._event(end)
        self._count(index, "event_elapsed_time")
        return 0.0
