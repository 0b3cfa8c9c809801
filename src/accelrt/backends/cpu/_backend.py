"""The cpu backend: the reference :class:`~accelrt.backends.Backend` with simulated devices.

Device memory is host memory (numpy buffers at real addresses, or ``mmap`` pages for the
virtual-memory operations) charged against a per-device budget. Stream work runs inline in the
caller (``sync`` mode, the default: every query is True and calls are very cheap) or on one
worker thread per stream (``async`` mode: real ordering, waits and completion). Graph capture
records the work submitted to a capturing stream and replays it in order.

Example::

    >>> import numpy as np
    >>> from accelrt.backends import StreamHandle
    >>> from accelrt.backends.cpu import CpuBackend
    >>> b = CpuBackend(num_devices=2, memory_limit="64MiB")
    >>> ptr = b.malloc(0, 16)
    >>> src = np.arange(16, dtype=np.uint8)
    >>> b.memcpy(0, ptr, src.ctypes.data, 16, "h2d", StreamHandle(0))
    >>> b.get_memory_info(0) == (64 * 2**20 - 16, 64 * 2**20)
    True
    >>> b.free(0, ptr)
"""

from __future__ import annotations

import ctypes
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, ClassVar

import numpy as np

from ..._backend import Capabilities
from ..._stream_callback import refuse
from ..._errors import DeviceError, map_backend_errors
from ..._fork import reinit_after_fork
from ..._handles import DevicePtr, EventHandle, GraphHandle, StreamHandle
from ._config import (
    ENV_MEMORY,
    CpuConfig,
    budget_advice,
    config_error,
    device_properties,
    resolve_config,
)
from ._memory import VM_GRANULARITY, DeviceMemory, HostMemory, host_view, vm_available
from ._ipc import IpcEventState
from ._live import (CpuEvent, drop_event, event_idle, live_event, live_stream, new_event,
                    record_idle, wait_idle)
from ._mempool import StreamOrderedPool, check_attribute
from .._common import (
    HandleTable,
    KeptErrors,
    bad_handle,
    capture_refuses_sync,
    check_int,
    check_size,
)
from .._table_backend import TableBackend
from ._graphs import CpuGraphs
from ._streams import Capture, CpuStream, Record, describe, stamp, work_error

__all__ = ["CpuBackend"]

_now = time.perf_counter_ns
_PRIORITY_LEAST, _PRIORITY_GREATEST = 0, -1
#: The capture modes of graph_capture_begin_mode (CUDA's cudaStreamCaptureMode).
_CAPTURE_MODES = ("global", "thread_local", "relaxed")
# largest vm_reserve size: the reservation plus one alignment granule must fit in a signed size
_MAX_RESERVATION = (1 << 63) - 2 * VM_GRANULARITY


def _fill(ptr: int, nbytes: int, dtype: Any, value: Any) -> None:
    host_view(ptr, nbytes).view(dtype)[:] = value


def _close_all(default: list[CpuStream], streams: dict[int, CpuStream]) -> None:
    for s in itertools.chain(default, list(streams.values())):
        s.close()


class CpuBackend(TableBackend[CpuStream, CpuEvent]):
    """The reference backend: simulated cpu devices with budgets, streams, events and graphs.

    Args:
        num_devices: number of simulated devices (default ``ACCELRT_CPU_DEVICES`` or 1).
        memory_limit: per-device budget, bytes or a size string like ``"8GiB"`` (default
            ``ACCELRT_CPU_MEMORY`` or the physical memory).
        async_streams: run stream work on worker threads (default ``ACCELRT_CPU_STREAMS ==
            "async"``; synchronous otherwise).
        name: the registry name of this instance (default ``"cpu"``); set it when registering
            a variant under another name.
        shared_memory: allocate device memory from POSIX shared memory so that
            :mod:`accelrt.multiprocessing` can share arrays with other processes (default
            ``ACCELRT_CPU_SHARED_MEMORY`` or off).

    Raises:
        TypeError: an argument has the wrong type.
        ValueError: an argument or environment variable is malformed (the message names it
            and the expected form).

    Example::

        >>> from accelrt import backends
        >>> from accelrt.backends.cpu import CpuBackend
        >>> backends.register(
        ...     "cpudoc", lambda: CpuBackend(num_devices=2, async_streams=True, name="cpudoc"),
        ...     replace=True)
        >>> b = backends.get_backend("cpudoc")
        >>> b.name, b.device_count(), b.get_device_properties(1)["async_streams"]
        ('cpudoc', 2, True)
    """

    name: ClassVar[str] = "cpu"
    family: ClassVar[str] = "cpu"
    #: how to get more devices, for out-of-range index errors
    more_devices_hint: str = (
        "set ACCELRT_CPU_DEVICES=N before the first use of accelrt for N simulated cpu "
        "devices, e.g. ACCELRT_CPU_DEVICES=4")

    def __init__(self, num_devices: int | None = None, memory_limit: int | str | None = None,
                 async_streams: bool | None = None, *, name: str | None = None,
                 shared_memory: bool | None = None) -> None:
        self._closed = False   # Backend._closed on the instance: each operation reads it
        self._config: CpuConfig = resolve_config(num_devices, memory_limit, async_streams,
                                                 shared_memory=shared_memory)
        #: where the budget came from, for out-of-memory messages
        self._budget_source = (f"memory_limit={memory_limit!r}" if memory_limit is not None
                               else "env" if os.environ.get(ENV_MEMORY, "").strip()
                               else "default")
        self._set_name(name)
        n = self._config.num_devices
        self._n = n
        if num_devices is None:     # the count came from ACCELRT_CPU_DEVICES (or its default)
            self._index_detail = (f"this backend has {n} device(s) (set ACCELRT_CPU_DEVICES "
                                  "for more)")
        else:                       # the variable does not change an explicit count
            self.more_devices_hint = (f"this instance was made with num_devices={n}; make it "
                                      "with CpuBackend(num_devices=N) for N devices")
            self._index_detail = f"this backend has {n} device(s) ({self.more_devices_hint})"
        self._async = self._config.async_streams
        self._mem = [DeviceMemory(i, self._config.memory_limit, self._config.shared_memory)
                     for i in range(n)]
        self._host = HostMemory()
        # device index -> its stream-ordered pool (mempool_*), made on first use; guarded by _lock
        self._mempools: dict[int, StreamOrderedPool] = {}
        # guards creation/removal below; re-entrant because a garbage collection can run an
        # Event/Stream finalizer (event_destroy, stream_destroy) inside a locked section
        self._lock = reinit_after_fork(threading.RLock())
        self._handles = itertools.count(1)
        # the first exception of each stream's work, raised by its next synchronization
        self._kept: KeptErrors[CpuStream] = KeptErrors()
        self._default = [CpuStream(i, 0, 0, self._kept, self.name) for i in range(n)]
        self._streams: dict[int, CpuStream] = {}      # guarded by _lock (writes)
        # destroyed streams whose queued work may still run (CUDA's model: the work completes,
        # and free, vm_unmap and synchronize wait for it); see _retiring
        self._retired: list[CpuStream] = []           # guarded by _lock
        self._events: HandleTable[CpuEvent] = HandleTable(self._lock, self._handles)
        # graph capture and captured graphs; _capturing is its dict of capturing streams,
        # read on the fast paths (stream -> open capture)
        self._graphs = CpuGraphs(self._lock, self._handles)
        self._capturing: dict[CpuStream, Capture] = self._graphs.capturing
        # device index -> handles of its live streams (0 included): the fast paths' check
        self._valid: list[set[int]] = [{0} for _ in range(n)]  # guarded by _lock (writes)
        # the contract's hint (Backend.streams_idle), also this backend's own fast-path
        # switch: False in async mode and while a capture is open
        self.streams_idle = not self._async           # guarded by _lock (writes)
        self._finalizer = weakref.finalize(self, _close_all, self._default, self._streams)
        # every device answers the same (device memory is host memory; graphs are recorded
        # work; interprocess events live in POSIX shared memory, see _ipc)
        self._caps = Capabilities(
            virtual_memory=vm_available(), graphs=True, graph_capture_modes=True,
            graph_dot=True, pinned_host_memory=True,
            page_locked_host_memory=True, host_functions=True, peer_copies=True,
            interprocess_events=True,
            interprocess_memory=self._config.shared_memory, host_accessible=True,
            adopt_memory=True, fork_shares_memory=self._config.shared_memory,
            stream_ordered_memory=True, device_fill=True)

    # ------------------------------------------------------------------ leak checks
    def live_handles(self) -> dict[str, int]:
        """How many streams (default streams not counted), events and graphs made through
        this backend are alive (not destroyed): a read-only count for leak checks
        (``accelrt.testing.leak_check``).

        Example::

            >>> from accelrt.backends.cpu import CpuBackend
            >>> b = CpuBackend()
            >>> e = b.event_create(0, False, False, False)
            >>> b.live_handles()
            {'streams': 0, 'events': 1, 'graphs': 0}
            >>> b.event_destroy(0, e)
        """
        if self._closed:
            raise self._closed_error("live_handles")
        return {"streams": len(self._streams), "events": len(self._events),
                "graphs": len(self._graphs)}

    # ------------------------------------------------------------------ discovery
    @classmethod
    def unavailable_reason(cls) -> str | None:
        """``None``, or a sentence naming a malformed ``ACCELRT_CPU_*`` variable.

        Example::

            >>> from accelrt.backends.cpu import CpuBackend
            >>> CpuBackend.unavailable_reason() is None
            True
        """
        return config_error()

    @property
    def config(self) -> CpuConfig:
        """The resolved settings (devices, budget, stream mode) of this instance."""
        return self._config

    def close(self, timeout: float | None = 10.0) -> None:
        """Stop every stream's worker thread once its queued work is done, then close the
        instance (:meth:`Backend.close`: later operations raise; idempotent).

        Args:
            timeout: seconds to wait for each worker to finish its queue (``None``: forever).

        Example::

            >>> from accelrt.backends import StreamHandle
            >>> from accelrt.backends.cpu import CpuBackend
            >>> b = CpuBackend(async_streams=True)
            >>> b.launch_host_func(0, lambda: None, StreamHandle(0))
            >>> b.close()
        """
        if self.closed:
            return
        streams = list(itertools.chain(self._default, list(self._streams.values()),
                                       self._retiring()))
        self._finalizer()
        me = threading.current_thread()
        for s in streams:
            thread = s.thread
            if thread is not None and thread is not me:
                thread.join(timeout)
        super().close()

    def get_device_properties(self, index: int) -> dict[str, Any]:
        """``name`` (processor model), ``total_memory`` (the budget), ``multi_processor_count``
        (``os.cpu_count()``), ``uuid`` (derived from this machine's id, the backend name and
        the index: stable across processes), ``L2_cache_size``, ``is_integrated`` (True),
        ``warp_size`` and ``max_threads_per_multi_processor`` (1), plus ``async_streams``, ``vm_supported``, ``vm_granularity``,
        ``host_accessible`` (:func:`~accelrt._properties.make_properties` adds the rest of
        torch's attributes).

        Example::

            >>> from accelrt.backends.cpu import CpuBackend
            >>> CpuBackend(memory_limit=1000).get_device_properties(0)["total_memory"]
            1000
        """
        self._check_index(index)
        return device_properties(self._config, self.name, index)

    def get_memory_info(self, index: int) -> tuple[int, int]:
        """``(budget - used, budget)`` of device ``index``."""
        mem = self._mem[self._check_index(index)]
        return mem.budget - mem.used, mem.budget

    def oom_advice(self, index: int) -> str:
        """The sentence an out-of-memory error on device ``index`` ends with: the budget, where
        it came from, and how to raise it (``ACCELRT_CPU_MEMORY``)."""
        mem = self._mem[self._check_index(index)]
        return budget_advice(self.name, mem.budget, self._budget_source)

    # ------------------------------------------------------------------ memory
    def malloc(self, index: int, size: int) -> DevicePtr:
        """Allocate ``size`` (> 0) bytes, 256-byte aligned; ``0`` if over the budget."""
        if self._closed:
            raise self._closed_error("malloc")
        mem = self._mem[self._check_index(index)]
        return DevicePtr(mem.malloc(check_size(size)))

    def free(self, index: int, ptr: DevicePtr) -> None:
        """Free a :meth:`malloc` pointer (after pending stream work, in async mode)."""
        if self._closed:
            raise self._closed_error("free")
        self._after_work(index, ptr).free(ptr)

    def adopt_memory(self, index: int, ptr: int, size: int) -> None:
        """Treat ``size`` bytes of host memory at ``ptr``, allocated by someone else (a
        pluggable allocator's library), as memory of device ``index`` until
        :meth:`disown_memory` (capability ``adopt_memory``)."""
        if self._closed:
            raise self._closed_error("adopt_memory")
        mem = self._mem[self._check_index(index)]
        mem.adopt(self._check_ptr(ptr), check_size(size))

    def disown_memory(self, index: int, ptr: int) -> None:
        """End :meth:`adopt_memory`, after the work queued on every stream (in async mode),
        so the owner may free the memory at once."""
        if self._closed:
            raise self._closed_error("disown_memory")
        self._after_work(index, ptr).disown(ptr)

    # ------------------------------------------------------------------ stream-ordered pool
    def _mempool(self, index: int) -> StreamOrderedPool:
        pool = self._mempools.get(index)
        if pool is None:
            with self._lock:
                pool = self._mempools.get(index)
                if pool is None:
                    pool = self._mempools[index] = StreamOrderedPool(self._mem[index])
        return pool

    def mempool_alloc_async(self, index: int, size: int, stream: StreamHandle) -> DevicePtr:
        """A block of the device's stream-ordered pool for use on ``stream`` (reused from an
        earlier free on the same stream, or from a completed free on any); ``0`` over the
        budget. Not permitted on a capturing stream (a graph records no allocations here)."""
        if self._closed:
            raise self._closed_error("mempool_alloc_async")
        s = self._stream(index, stream)
        self._check_not_capturing(s, "mempool_alloc_async")
        return DevicePtr(self._mempool(index).alloc(check_size(size), s))

    def mempool_free_async(self, index: int, ptr: DevicePtr, stream: StreamHandle) -> None:
        """Free a pool block once the work queued on ``stream`` so far is done."""
        if self._closed:
            raise self._closed_error("mempool_free_async")
        s = self._stream(index, stream)
        self._check_not_capturing(s, "mempool_free_async")
        rec = Record(s, s.submitted) if s.completed < s.submitted else None
        self._mempool(index).free(self._check_ptr(ptr), s, rec)

    def mempool_trim_to(self, index: int, keep: int) -> None:
        """Release completed free blocks of the pool until it reserves at most ``keep``."""
        if self._closed:
            raise self._closed_error("mempool_trim_to")
        self._check_index(index)
        self._mempool(index).trim_to(check_size(keep, "keep", allow_zero=True))

    def mempool_get_attribute(self, index: int, attr: str) -> int:
        """``release_threshold``, ``reserved_mem_current``/``_high`` or
        ``used_mem_current``/``_high`` of the device's pool, in bytes."""
        if self._closed:
            raise self._closed_error("mempool_get_attribute")
        self._check_index(index)
        return self._mempool(index).attribute(check_attribute(attr))

    def mempool_set_attribute(self, index: int, attr: str, value: int) -> None:
        """Set the pool's ``release_threshold`` (unused memory kept across
        synchronizations), or reset ``reserved_mem_high``/``used_mem_high`` (``value`` 0)."""
        if self._closed:
            raise self._closed_error("mempool_set_attribute")
        self._check_index(index)
        self._mempool(index).set_attribute(
            check_attribute(attr), check_size(value, "value", allow_zero=True))

    def _after_sync(self, index: int) -> None:
        pool = self._mempools.get(index)
        if pool is not None:
            pool.after_sync()

    def ipc_mem_handle(self, index: int, ptr: DevicePtr) -> bytes:
        """The interprocess handle of the allocation starting at ``ptr`` (shared-memory
        option only; ValueError naming the reason and the fix otherwise)."""
        if self._closed:
            raise self._closed_error("ipc_mem_handle")
        mem = self._mem[self._check_index(index)]
        return mem.ipc_handle(self._check_ptr(ptr))

    def ipc_open_mem_handle(self, index: int, handle: bytes) -> tuple[DevicePtr, int]:
        """Map another process's allocation as memory of device ``index``: ``(ptr, size)``."""
        if self._closed:
            raise self._closed_error("ipc_open_mem_handle")
        mem = self._mem[self._check_index(index)]
        ptr, size = mem.ipc_open(handle)
        return DevicePtr(ptr), size

    def ipc_close_mem_handle(self, index: int, ptr: DevicePtr) -> None:
        """Unmap memory from :meth:`ipc_open_mem_handle` (after pending stream work)."""
        if self._closed:
            raise self._closed_error("ipc_close_mem_handle")
        self._after_work(index, ptr).ipc_close(ptr)

    def _after_work(self, index: int, ptr: int) -> DeviceMemory:
        """The memory of device ``index`` once the work queued on every stream is done
        (``ptr`` checked): before memory goes away under it."""
        mem = self._mem[self._check_index(index)]
        self._check_ptr(ptr)
        self._drain()
        return mem

    def _drain(self) -> None:
        """Async mode: wait for all submitted work of every stream, destroyed streams
        included (errors stay kept)."""
        if not self._async:
            return
        me = threading.current_thread()
        for s in itertools.chain(self._default, list(self._streams.values()), self._retiring()):
            if s.thread is not me and s not in self._capturing:
                s.wait(s.submitted)

    def _retiring(self, index: int | None = None) -> list[CpuStream]:
        """Destroyed streams (of device ``index``, or of all) whose work may still run or
        whose kept error was not raised yet; finished ones are forgotten here."""
        if not self._retired:
            return []
        with self._lock:
            self._retired = [s for s in self._retired
                             if s.completed < s.submitted or self._kept.has(s)]
            return [s for s in self._retired if index is None or s.device == index]

    # ------------------------------------------------------------------ virtual memory
    def _vm_mem(self, index: int) -> DeviceMemory:
        mem = self._mem[self._check_index(index)]
        if not vm_available():
            raise NotImplementedError("the cpu backend's virtual memory needs Linux (mmap); "
                                      "do not enable expandable_segments on this platform")
        return mem

    def vm_granularity(self, index: int) -> int:
        """2 MiB."""
        if self._closed:
            raise self._closed_error("vm_granularity")
        self._check_index(index)
        return VM_GRANULARITY

    def vm_reserve(self, index: int, size: int) -> DevicePtr:
        """Reserve ``size`` bytes (a multiple of 2 MiB) of address space; no budget used.

        Raises :class:`~accelrt.DeviceError` when the OS refuses the reservation (``mmap``
        fails, e.g. not enough address space).
        """
        if self._closed:
            raise self._closed_error("vm_reserve")
        mem = self._vm_mem(index)
        size = check_size(size)
        if size > _MAX_RESERVATION:
            raise ValueError(f"vm_reserve: size={size} does not fit in the 64-bit address "
                             "space; reserve less")
        with map_backend_errors(self.name, f"vm_reserve of {size} bytes"):
            return DevicePtr(mem.vm_reserve(size))

    def vm_release(self, index: int, ptr: DevicePtr, size: int) -> None:
        """Release a whole, fully unmapped reservation."""
        if self._closed:
            raise self._closed_error("vm_release")
        mem = self._vm_mem(index)
        ptr, size = DevicePtr(self._check_ptr(ptr)), check_size(size)
        with map_backend_errors(self.name, "vm_release"):
            mem.vm_release(ptr, size)

    def vm_map(self, index: int, ptr: int, size: int) -> bool:
        """Make reserved pages read/write; False when the budget would be exceeded."""
        if self._closed:
            raise self._closed_error("vm_map")
        mem = self._vm_mem(index)
        ptr, size = self._check_ptr(ptr), check_size(size)
        with map_backend_errors(self.name, "vm_map"):
            return mem.vm_map(ptr, size)

    def vm_unmap(self, index: int, ptr: int, size: int) -> None:
        """Drop mapped pages (after pending stream work) and give their budget back."""
        if self._closed:
            raise self._closed_error("vm_unmap")
        mem = self._vm_mem(index)
        ptr, size = self._check_ptr(ptr), check_size(size)
        self._drain()
        with map_backend_errors(self.name, "vm_unmap"):
            mem.vm_unmap(ptr, size)

    # ------------------------------------------------------------------ stream plumbing
    def _stream(self, index: int, stream: int) -> CpuStream:
        if type(stream) is int and type(index) is int:
            if stream == 0:
                if 0 <= index < self._n:
                    return self._default[index]
            else:
                s = self._streams.get(stream)
                if s is not None and s.device == index:
                    return s
        self._check_index(index)
        raise bad_handle("stream", stream, f" of {self.name}:{index}",
                         "use 0 (the default stream) or a handle from stream_create")

    def _event(self, event: int, index: int | None = None) -> CpuEvent:
        if index is None:
            ev = self._events.get(event) if type(event) is int else None
        else:
            ev = live_event(self._events, index, event)
        if ev is None:
            if index is not None:
                self._check_index(index)
            where = f" of {self.name}:{index}" if index is not None else ""
            raise bad_handle("event", event, where,
                             "use a handle from event_create that was not destroyed")
        return ev

    def _memory(self, index: int) -> DeviceMemory:
        return self._mem[index]

    def _submit(self, s: CpuStream, fn: Callable[[], object]) -> None:
        if self._capturing:
            cap = self._capturing.get(s)
            if cap is not None:
                cap.ops.append(("call", fn))
                cap.node(s)
                return
        if self._async:
            s.submit(fn)
            return
        try:
            fn()
        except Exception as exc:
            raise work_error(s, exc, self.name) from exc

    _host_call = _submit   # every piece of work on a cpu stream is a host call

    def _describe(self, s: CpuStream) -> str:
        return describe(s, self.name)

    def _raise_kept(self, streams: Iterable[CpuStream]) -> None:
        self._kept.raise_for(streams, self._describe)

    def _check_sync_allowed(self, index: int) -> None:
        """Refuse a synchronize of device ``index`` in the calling thread while one of its
        streams captures in a mode that forbids it (:func:`.._common.capture_refuses_sync`);
        the capturing streams have nothing queued since their capture began, so the wait
        skips nothing."""
        me = threading.get_ident()
        for s, cap in list(self._capturing.items()):
            if s.device == index:
                why = capture_refuses_sync(self.name, f"{self.name}:{s.device}", str(s.handle),
                                           cap.thread, cap.mode, me)
                if why is not None:
                    raise DeviceError(why)

    def _check_not_capturing(self, s: CpuStream, what: str) -> None:
        if s in self._capturing:
            raise DeviceError(f"{self.name}: {what} is not permitted while stream {s.handle} "
                              f"of {self.name}:{s.device} is capturing a graph; end the "
                              "capture first")

    # ------------------------------------------------------------------ copies
    def _queue_copy(self, s: CpuStream, kind: str, dst: int, src: int, nbytes: int) -> None:
        self._submit(s, partial(ctypes.memmove, dst, src, nbytes))

    def memcpy_peer(self, dst_index: int, dst: int, src_index: int, src: int, nbytes: int,
                    stream: StreamHandle) -> None:
        """Copy from device ``src_index`` to ``dst_index``, ordered on ``stream`` of the source."""
        if self._closed:
            raise self._closed_error("memcpy_peer")
        self._check_index(dst_index)
        s = self._stream(src_index, stream)
        nbytes = check_size(nbytes, "nbytes", allow_zero=True)
        dst, src = self._check_ptr(dst, "dst"), self._check_ptr(src, "src")
        self._mem[dst_index].check_range(dst, nbytes, "memcpy_peer dst")
        self._mem[src_index].check_range(src, nbytes, "memcpy_peer src")
        if nbytes:
            self._submit(s, partial(ctypes.memmove, dst, src, nbytes))

    def _queue_memset(self, s: CpuStream, ptr: int, value: int, nbytes: int) -> None:
        self._submit(s, partial(ctypes.memset, ptr, value, nbytes))

    def _queue_fill(self, s: CpuStream, ptr: int, pattern: bytes, dtype: Any,
                    nbytes: int) -> None:
        value = np.frombuffer(pattern, dtype=dtype)[0]
        self._submit(s, partial(_fill, ptr, nbytes, dtype, value))

    def can_access_peer(self, index: int, peer: int) -> bool:
        """True for every pair of cpu devices."""
        self._check_index(index)
        self._check_index(peer)
        return True

    # ------------------------------------------------------------------ streams
    def stream_priority_range(self, index: int) -> tuple[int, int]:
        """``(0, -1)``: 0 is the normal priority, -1 the high one (as CUDA)."""
        self._check_index(index)
        return (_PRIORITY_LEAST, _PRIORITY_GREATEST)

    def stream_create(self, index: int, priority: int) -> StreamHandle:
        """Create a stream; ``priority`` is clamped to ``[-1, 0]`` as CUDA clamps it."""
        if self._closed:
            raise self._closed_error("stream_create")
        self._check_index(index)
        check_int(priority, "stream priority")
        priority = min(_PRIORITY_LEAST, max(_PRIORITY_GREATEST, priority))
        with self._lock:
            handle = next(self._handles)
            self._streams[handle] = CpuStream(index, handle, priority, self._kept, self.name)
            self._valid[index].add(handle)
        return StreamHandle(handle)

    def stream_destroy(self, index: int, stream: StreamHandle) -> None:
        """Destroy a stream and return at once, as ``cudaStreamDestroy``: its queued work
        still runs to completion (then its worker exits), and :meth:`free`, :meth:`vm_unmap`
        and :meth:`synchronize` of the device wait for that work as for any stream's."""
        if self._closed:
            raise self._closed_error("stream_destroy")
        s = self._stream(index, stream)
        if s.handle == 0:
            raise ValueError(f"the default stream of {self.name}:{index} cannot be destroyed")
        self._check_not_capturing(s, "stream_destroy")
        with self._lock:
            self._streams.pop(s.handle, None)
            self._valid[index].discard(s.handle)
            if s.completed < s.submitted or self._kept.has(s):
                self._retired.append(s)
        s.close()

    def stream_is_valid(self, index: int, stream: StreamHandle) -> bool:
        """True for 0 and for live handles from :meth:`stream_create` on ``index``."""
        if self._closed:
            raise self._closed_error("stream_is_valid")
        if isinstance(stream, bool) or not isinstance(stream, int):
            return False
        if stream == 0:
            return type(index) is int and 0 <= index < self._n
        s = self._streams.get(stream)
        return s is not None and type(index) is int and s.device == index

    def stream_query(self, index: int, stream: StreamHandle) -> bool:
        """True if all work on ``stream`` completed; raises a kept worker error."""
        if self._closed:
            raise self._closed_error("stream_query")
        if self.streams_idle and live_stream(self._valid, index, stream):
            return True
        s = self._stream(index, stream)
        self._check_not_capturing(s, "stream_query")
        self._raise_kept((s,))
        return s.completed >= s.submitted

    def stream_synchronize(self, index: int, stream: StreamHandle) -> None:
        """Block until ``stream``'s work completed; raises a kept worker error."""
        if self._closed:
            raise self._closed_error("stream_synchronize")
        # the common case, compiled: a live stream, no queued work, no capture
        if not (self.streams_idle and live_stream(self._valid, index, stream)):
            s = self._stream(index, stream)
            self._check_not_capturing(s, "stream_synchronize")
            if self._async:
                refuse("stream_synchronize")
                s.wait(s.submitted)
                self._raise_kept((s,))
        if self._mempools:
            self._after_sync(index)

    def stream_wait_event(self, index: int, stream: StreamHandle, event: EventHandle) -> None:
        """Make later work on ``stream`` wait for ``event``'s current record (any device)."""
        if self._closed:
            raise self._closed_error("stream_wait_event")
        if self.streams_idle and wait_idle(self._events, self._valid, index, stream, event):
            return   # the common case, compiled: live handles, no queued work, no capture
        s = self._stream(index, stream)
        ev = self._event(event)
        if ev.ipc is not None:
            self._check_not_capturing(s, "waiting on an interprocess event")
            ev.ipc.wait_on(s, self._async)
            return
        self._wait(s, ev)

    def _wait(self, s: CpuStream, ev: CpuEvent) -> None:
        if self._capturing:
            cap = self._capturing.get(s)
            ecap = ev.capture
            if ecap is not None:
                if cap is None:
                    # fork: the waiting stream joins the capture (work is kept in order)
                    with self._lock:
                        self._capturing[s] = ecap
                        ecap.streams.add(s)
                        ecap.waited(s, ev)
                    return
                if cap is not ecap:
                    raise DeviceError(f"{self.name}: a stream cannot wait on an event recorded in "
                                      "another open capture")
                cap.waited(s, ev)
                return
            if cap is not None:
                cap.ops.append(("wait", ev))
                return
        if not self._async:
            return
        rec = ev.record
        if rec is None or rec.stream is s or rec.done():
            return
        s.submit(partial(rec.stream.wait, rec.seq))

    def synchronize(self, index: int) -> None:
        """Block until every stream of device ``index`` finished; raises kept worker errors."""
        if self._closed:
            raise self._closed_error("synchronize")
        self._check_index(index)
        if self.streams_idle:
            if self._mempools:
                self._after_sync(index)
            return
        streams = [self._default[index]]
        streams += [s for s in list(self._streams.values()) if s.device == index]
        if self._capturing:
            self._check_sync_allowed(index)
        streams += self._retiring(index)   # destroyed streams' work completes first too
        if self._async:
            refuse("synchronize")
            for s in streams:
                s.wait(s.submitted)
            self._raise_kept(streams)
        if self._mempools:
            self._after_sync(index)

    # ------------------------------------------------------------------ events
    def _new_event(self, index: int, timing: bool, interprocess: bool) -> CpuEvent:
        self._check_index(index)
        ipc = None
        if interprocess:
            if timing:
                raise ValueError("an interprocess event cannot have enable_timing=True (as "
                                 "CUDA's); create it with enable_timing=False")
            ipc = IpcEventState.create()
        # an interprocess event's shared words are unmapped when its state is collected,
        # after any completion write or wait still queued on a stream (they refer to it)
        return CpuEvent(index, timing, ipc)

    def event_create(self, index: int, enable_timing: bool, blocking: bool,
                     interprocess: bool) -> EventHandle:
        """Create an event; an ``interprocess`` one keeps its state in shared memory."""
        if self._closed:
            raise self._closed_error("event_create")
        h = new_event(self._events, self._n, index, enable_timing, interprocess)
        if h:
            return EventHandle(h)   # the common case, compiled: a device of this backend
        return super().event_create(index, enable_timing, blocking, interprocess)

    def event_destroy(self, index: int, event: EventHandle) -> None:
        """Destroy an event (a pending record still completes harmlessly)."""
        if self._closed:
            raise self._closed_error("event_destroy")
        if not drop_event(self._events, index, event):   # the common case, compiled
            super().event_destroy(index, event)   # (its checks raise)

    def event_record(self, index: int, event: EventHandle, stream: StreamHandle) -> None:
        """Record ``event`` at the end of ``stream``; replaces the previous record."""
        if self._closed:
            raise self._closed_error("event_record")
        if self.streams_idle and record_idle(self._events, self._valid, index, event, stream):
            return   # the common case, compiled: live handles, no queued work, not interprocess
        ev = self._event(event, index)
        s = self._stream(index, stream)
        if ev.ipc is not None:
            self._check_not_capturing(s, "recording an interprocess event")
            ev.ipc.record_on(s, self._async)
        else:   # (streams_idle may have changed since: the general record holds either way)
            self._record(ev, s)

    def event_record_external(self, index: int, event: EventHandle,
                              stream: StreamHandle) -> None:
        """:meth:`event_record`; inside a capture, a record node only: every replay records
        the event, and the event stays usable outside the open capture (it is not one of
        the capture's events that streams joining by waiting on it)."""
        if self._closed:
            raise self._closed_error("event_record_external")
        ev = self._event(event, index)
        s = self._stream(index, stream)
        cap = self._capturing.get(s) if self._capturing and ev.ipc is None else None
        if cap is None:
            self.event_record(index, event, stream)
            return
        cap.ops.append(("record", ev))
        cap.node(s)

    def stream_wait_event_external(self, index: int, stream: StreamHandle,
                                   event: EventHandle) -> None:
        """:meth:`stream_wait_event`; inside a capture, a wait node only: every replay waits
        for the event's latest record (an external event never joins a stream to a
        capture)."""
        if self._closed:
            raise self._closed_error("stream_wait_event_external")
        s = self._stream(index, stream)
        ev = self._event(event)
        cap = self._capturing.get(s) if self._capturing and ev.ipc is None else None
        if cap is None:
            self.stream_wait_event(index, stream, event)
            return
        cap.ops.append(("wait", ev))
        cap.node(s)

    def _record(self, ev: CpuEvent, s: CpuStream) -> None:
        if self._capturing:
            cap = self._capturing.get(s)
            if cap is not None:
                cap.ops.append(("record", ev))
                ev.capture = cap
                cap.events.add(ev)
                cap.recorded(ev, s)
                return
        # an eager record replaces a record in an open capture: a stream that waits on the
        # event now waits eagerly, it does not join that capture (as CUDA's)
        ev.capture = None
        if self._async:
            rec = Record(s, 0)
            rec.seq = s.submit(partial(stamp, rec))
            ev.record = rec
            ev.ts = None
        else:
            ev.ts = _now()
            ev.record = None

    def _event_state(self, ev: CpuEvent, what: str) -> Record | None:
        if ev.capture is not None:
            raise DeviceError(f"{self.name}: {what} is not permitted on an event recorded in an open "
                              "graph capture; end the capture first")
        rec = ev.record
        if rec is not None:
            self._raise_kept((rec.stream,))
        return rec

    def event_query(self, index: int, event: EventHandle) -> bool:
        """True if the work before the last record completed (True if never recorded)."""
        if self._closed:
            raise self._closed_error("event_query")
        ev = live_event(self._events, index, event)
        if ev is None:   # not live (or not an int): the full check raises
            ev = self._event(event, index)
        if ev.ipc is not None:
            return ev.ipc.query()
        if self.streams_idle or (ev.record is None and ev.capture is None):
            return True
        rec = self._event_state(ev, "event_query")
        return rec is None or rec.done()

    def event_synchronize(self, index: int, event: EventHandle) -> None:
        """Block until the last record completed; raises a kept error of its stream."""
        if self._closed:
            raise self._closed_error("event_synchronize")
        if event_idle(self._events, index, event):
            return   # the common case, compiled: a live event with no pending record
        ev = self._event(event, index)
        refuse("event_synchronize")   # (a host function's thread must not wait)
        if ev.ipc is not None:
            ev.ipc.wait(ev.ipc.target())
            return
        rec = self._event_state(ev, "event_synchronize")
        if rec is not None:
            rec.stream.wait(rec.seq)
            self._raise_kept((rec.stream,))

    def _timestamp(self, ev: CpuEvent, handle: int) -> int:
        return ev.timestamp(handle, self.name)

    def event_ipc_handle(self, index: int, event: EventHandle) -> bytes:
        """The handle of an interprocess event made in this process."""
        if self._closed:
            raise self._closed_error("event_ipc_handle")
        ev = self._event(event, index)
        if ev.ipc is None:
            raise ValueError(f"event {event} was created without interprocess=True; only "
                             "interprocess events have IPC handles")
        if ev.ipc.seg.fd < 0:
            raise ValueError(f"event {event} was opened from another process's handle; share "
                             "that process's handle instead")
        return ev.ipc.handle()

    def event_from_ipc_handle(self, index: int, handle: bytes) -> EventHandle:
        """Open another process's interprocess event from its :meth:`event_ipc_handle`."""
        if self._closed:
            raise self._closed_error("event_from_ipc_handle")
        self._check_index(index)
        ipc = IpcEventState.open(handle)
        return EventHandle(self._events.add(CpuEvent(index, False, ipc)))

    # ------------------------------------------------------------------ graphs
    def graph_capture_begin(self, index: int, stream: StreamHandle) -> None:
        """Start recording the work submitted to ``stream`` (not the default stream), in the
        cpu backend's own capture mode, ``"global"``."""
        if self._closed:
            raise self._closed_error("graph_capture_begin")
        self._begin_capture(index, stream, "global")

    def graph_capture_begin_mode(self, index: int, stream: StreamHandle, mode: str) -> None:
        """:meth:`graph_capture_begin` in capture ``mode`` (``"global"``,
        ``"thread_local"`` or ``"relaxed"``), which decides the threads whose
        :meth:`synchronize` of the device the capture refuses (as CUDA's modes decide)."""
        if self._closed:
            raise self._closed_error("graph_capture_begin_mode")
        if mode not in _CAPTURE_MODES:
            raise ValueError(f"capture mode must be one of {_CAPTURE_MODES}, got {mode!r}")
        self._begin_capture(index, stream, mode)

    def _begin_capture(self, index: int, stream: StreamHandle, mode: str) -> None:
        s = self._stream(index, stream)
        with self._lock:
            self._graphs.begin(index, s, mode)
            self.streams_idle = False

    def graph_capture_end(self, index: int, stream: StreamHandle) -> GraphHandle:
        """Stop the capture begun on ``stream``; return the graph handle."""
        if self._closed:
            raise self._closed_error("graph_capture_end")
        s = self._stream(index, stream)
        with self._lock:
            handle = self._graphs.end(index, s)
            self.streams_idle = not (self._async or self._capturing)
        return handle

    def graph_replay(self, index: int, graph: GraphHandle, stream: StreamHandle) -> None:
        """Submit the captured work, in order, on ``stream``."""
        if self._closed:
            raise self._closed_error("graph_replay")
        s = self._stream(index, stream)
        for kind, arg in self._graphs.get(index, graph).ops:
            if kind == "call":
                self._submit(s, arg)
            elif kind == "record":
                self._record(arg, s)
            else:
                self._wait(s, arg)

    def graph_instantiate(self, index: int, graph: GraphHandle) -> int:
        """A recorded graph replays as it is: check the handle and return a new executable
        id."""
        if self._closed:
            raise self._closed_error("graph_instantiate")
        self._graphs.get(index, graph, self._check_index)
        return next(self._handles)

    def graph_debug_dot(self, index: int, graph: GraphHandle, path: str,
                        verbose: bool) -> None:
        """Write the recorded operations to ``path`` as a DOT digraph: one node per operation
        (a call with its function's name, an event record or wait with the event), edges in
        replay order (a replay runs them in that order on one stream); ``verbose`` adds each
        call's full description."""
        if self._closed:
            raise self._closed_error("graph_debug_dot")
        self._graphs.get(index, graph, self._check_index)
        self._graphs.write_dot(index, graph, path, verbose)

    def graph_destroy(self, index: int, graph: GraphHandle) -> None:
        """Forget a captured graph."""
        if self._closed:
            raise self._closed_error("graph_destroy")
        self._graphs.destroy(index, graph)

    def graph_node_count(self, index: int, graph: GraphHandle) -> int | None:
        """Number of recorded operations of a live graph (``None`` for an unknown handle)."""
        if self._closed:
            raise self._closed_error("graph_node_count")
        return self._graphs.node_count(index, graph)

    def stream_is_capturing(self, index: int, stream: StreamHandle) -> bool:
        """True while ``stream`` records work into a capture."""
        if self._closed:
            raise self._closed_error("stream_is_capturing")
        return self._stream(index, stream) in self._capturing

    def __repr__(self) -> str:
        mode = "async" if self._async else "sync"
        return (f"<accelrt backend {self.name!r}: {self._n} device(s), "
                f"{self._config.memory_limit} bytes each, {mode} streams>")
