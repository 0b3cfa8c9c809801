"""``backend:cudaMallocAsync``: the device's stream-ordered memory pool as the allocator.

With ``ACCELRT_ALLOC_CONF=backend:cudaMallocAsync`` (PyTorch's
``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``), :func:`~accelrt.memory._allocator.
get_allocator` gives every device whose backend has a stream-ordered pool
(``Capabilities.stream_ordered_memory``: CUDA's default mempool, and the cpu backend's model
of it) a :class:`MallocAsyncAllocator` instead of the caching allocator, so every public
memory call routes to it. It is PyTorch's ``CudaMallocAsyncAllocator``:

* ``malloc``/``free`` are ``cudaMallocAsync``/``cudaFreeAsync`` on the allocation's stream
  (the pool caches; the driver reuses freed memory in stream order);
* ``record_stream``: the free waits for every recorded stream: it is issued on a stream of the
  device's stream pool that first waits for an event recorded on the allocation's stream and
  on each recorded stream (PyTorch's "unifying free stream");
* statistics: only ``allocated_bytes.all``, ``active_bytes.all`` (the pool's used memory)
  and ``reserved_bytes.all`` (its reserved memory) ``current``/``peak``, read from the pool's
  attributes; every other key is 0. ``reset_peak_memory_stats`` resets the pool's
  high-water marks; ``reset_accumulated_memory_stats`` has no effect (a warning, once);
* ``empty_cache`` synchronizes the device and trims its pool to 0;
* ``set_per_process_memory_fraction`` caps the bytes this allocator has handed out
  (``OutOfMemoryError`` beyond it);
* snapshots, memory history, OOM observers and IPC sharing raise PyTorch's errors (the pool
  does not track blocks).

Example::

    >>> from accelrt.backends.cpu import CpuBackend
    >>> from accelrt.memory._malloc_async import MallocAsyncAllocator
    >>> a = MallocAsyncAllocator(CpuBackend(name="asyncdoc"), 0)
    >>> p = a.malloc(1000, 0)
    >>> a.memory_allocated(), a.memory_reserved()
    (1024, 1024)
    >>> a.free(p); a.memory_allocated(), a.memory_reserved()
    (0, 1024)
    >>> a.empty_cache(); a.memory_reserved()
    0
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, SupportsIndex

from .. import _checked
from .._errors import OutOfMemoryError, type_shown
from .._stream_callback import refuse
from .._fork import reinit_after_fork
from .._handles import DevicePtr, EventHandle, StreamHandle
from ._config import AllocatorConfig, check_fraction
from ._events import check_device
from ._oom import format_size
from ._replaced import ReplacedAllocator
from ._stats import FLAT_KEYS

if TYPE_CHECKING:
    from .._backend import Backend

__all__ = ["NAME", "MallocAsyncAllocator"]

#: The ``backend`` option value, and what ``get_allocator_backend()`` says.
NAME: Final = "cudaMallocAsync"
_UINT64_MAX: Final = 2**64 - 1
_STAT_KEYS: Final = {
    "allocated_bytes.all.current": "used_mem_current",
    "allocated_bytes.all.peak": "used_mem_high",
    "active_bytes.all.current": "used_mem_current",
    "active_bytes.all.peak": "used_mem_high",
    "reserved_bytes.all.current": "reserved_mem_current",
    "reserved_bytes.all.peak": "reserved_mem_high",
}
_warned: set[str] = set()   # the warnings PyTorch gives once per process


def _warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        warnings.warn(message, UserWarning, stacklevel=3)


class _Alloc:
    """One live allocation: its size, creation stream, recorded streams (``(device index,
    stream)``: PyTorch's ``UsageStream``, which may be of another device), capture flag."""

    __slots__ = ("captured", "recorded", "size", "stream")

    def __init__(self, size: int, stream: int, captured: bool) -> None:
        self.size = size
        self.stream = stream
        self.recorded: list[tuple[int, int]] = []
        self.captured = captured


class MallocAsyncAllocator(ReplacedAllocator):
    """The allocator of one device under ``backend:cudaMallocAsync`` (PyTorch's
    ``CudaMallocAsyncAllocator``); see the module docstring.

    Args:
        backend: a backend whose ``capabilities(index).stream_ordered_memory`` is True.
        index: the device index.
        config: the options in force (only ``backend`` matters here).
    """

    allocator_backend = NAME
    unsupported_name = NAME

    def __init__(self, backend: Backend, index: int, config: AllocatorConfig | None = None
                 ) -> None:
        if not backend.capabilities(index).stream_ordered_memory:
            raise ValueError(f"backend:{NAME} needs a stream-ordered memory pool, which device "
                             f"{backend.name}:{index} does not have (its capabilities() has "
                             "stream_ordered_memory=False); use backend:native")
        super().__init__(backend, index, config)
        # re-entrant: a garbage collection inside a locked section may free an array
        self._alock = reinit_after_fork(threading.RLock())
        self._live: dict[int, _Alloc] = {}            # guarded by _alock
        self._used = 0                                # guarded by _alock (pytorch_used_bytes)
        self._limit = _UINT64_MAX                     # guarded by _alock (the fraction's cap)
        self._initialized = False                     # guarded by _alock (lazy_init_device)
        self._capturing = False                       # guarded by _alock
        self._capture_deferred: list[int] = []        # guarded by _alock

    def _init_locked(self) -> None:
        """PyTorch's ``lazy_init_device``: keep all freed memory in the pool across
        synchronizations (release threshold ``UINT64_MAX``)."""
        if not self._initialized:
            self._b.mempool_set_attribute(self._index, "release_threshold", _UINT64_MAX)
            self._initialized = True

    # ------------------------------------------------------------------ configuration
    def configure(self, cfg: AllocatorConfig) -> None:
        """Keep the options (the caching allocator's tuning, expandable segments included,
        does not apply to the pool)."""
        self._cfg = cfg

    def set_caching(self, enabled: bool) -> None:
        """No effect: the pool cannot be turned off (PyTorch's ``enable`` does nothing)."""

    @property
    def caching(self) -> bool:
        return True

    # ------------------------------------------------------------------ allocation
    def malloc(self, size: SupportsIndex, stream: int = 0) -> int:
        """``cudaMallocAsync`` of ``size`` bytes on ``stream``.

        Raises:
            OutOfMemoryError: the pool cannot grow, or the bytes handed out would exceed
                :meth:`set_memory_fraction`'s cap (PyTorch's message).
        """
        size = self.check_request(size)
        if size == 0:
            return 0
        with self._alock:
            if not self._capturing and self._capture_deferred:
                self._free_deferred_locked()
            self._init_locked()
            ptr = 0
            if self._used + size <= self._limit:
                anyb: Any = self._b   # called untyped: the compiled build would cast it
                ptr = _checked.address(
                    anyb, ("mempool_alloc_async", (self._index, size, stream)),
                    anyb.mempool_alloc_async(self._index, size, StreamHandle(stream)),
                    oom=True, held=self._live)
            if not ptr:
                raise self._pool_oom(size)
            self._live[ptr] = _Alloc(size, stream, self._capturing)
            self._used += size
            return ptr

    def _pool_oom(self, size: int) -> OutOfMemoryError:
        free, total = self._b.get_memory_info(self._index)
        return OutOfMemoryError(
            f"Allocation on device {self._index} would exceed allowed memory. (out of memory)"
            f"\nCurrently allocated     : {format_size(self._used)}"
            f"\nRequested               : {format_size(size)}"
            f"\nDevice limit            : {format_size(total)}"
            f"\nFree (according to {self._name.upper()}): {format_size(free)}"
            f"\nPyTorch limit (set by user-supplied memory fraction)"
            # (no fraction set: torch prints its UINT64_MAX limit, 17179869184.00 GiB, too)
            f"\n                        : {format_size(self._limit)}", size, free, total)

    def free(self, ptr: int, nonblocking: bool = False) -> None:
        """``cudaFreeAsync`` in the allocation's stream order (after every recorded stream's
        work queued so far, see :meth:`record_stream`).

        Raises:
            ValueError: ``ptr`` is not a live allocation of this allocator.
        """
        with self._alock:
            info = self._live.get(ptr) if type(ptr) is int else None
            if info is None:
                raise self._bad_async_ptr(ptr)
            if self._capturing and not info.captured:
                _warn_once("freeAsync() was called on an uncaptured allocation during graph "
                           "capture; its free waits until the capture ends")
                self._capture_deferred.append(ptr)
                return
            self._free_locked_async(ptr, info)

    def _bad_async_ptr(self, ptr: object) -> Exception:
        if not isinstance(ptr, int) or isinstance(ptr, bool):
            return TypeError(f"pointer must be an int, got {type_shown(ptr)}")
        return ValueError(f"pointer {ptr:#x} is not a live allocation of the {NAME} allocator "
                          f"of {self._name}:{self._index} (double free?)")

    def _free_locked_async(self, ptr: int, info: _Alloc) -> None:
        b, idx = self._b, self._index
        if not info.recorded:
            b.mempool_free_async(idx, DevicePtr(ptr), StreamHandle(info.stream))
        else:
            self._free_unified(ptr, info)
        del self._live[ptr]
        self._used -= info.size

    def _free_unified(self, ptr: int, info: _Alloc) -> None:
        """Free on a stream of the device's pool that waits for the creation stream and every
        recorded stream (PyTorch's dummy unifying free stream), given back to the pool after
        (destroyed if the pool is full: ``_stream._give_back``).

        Takes no other lock under ``_alock``: :meth:`record_stream` made the pool before it
        took the lock, here it is only looked up (and ``create`` takes no lock). A thread that
        holds ``_stream._pools_lock`` may run a finaliser that frees an allocation of this
        allocator (waiting for ``_alock``): taking the pools' lock here would deadlock. Without
        a pool (``register(..., replace=True)`` dropped it: the backend's name names another
        instance now) the device (and that of each recorded stream of another device) is
        synchronized and the free issued on the creation stream.
        """
        from .. import _stream
        b, idx = self._b, self._index
        per = _stream._pools.get(b)
        pool = per.get(idx) if per is not None else None
        if pool is None:
            # the recorded streams' work (and all else) is done, on every device they are on
            for dev in sorted({idx, *(d for d, _ in info.recorded)}):
                b.synchronize(dev)
            anyb0: Any = b
            default = _checked.handle(b, ("default_stream", (idx,)), anyb0.default_stream(idx),
                                      "a stream handle", nonzero=False)
            b.mempool_free_async(idx, DevicePtr(ptr), StreamHandle(default))
            return
        free0 = pool.free0
        try:
            unifier = free0.pop()
        except IndexError:
            unifier = pool.create(0)
        anyb: Any = b   # called untyped: the compiled build would cast the result
        try:
            for dev, s in ((idx, info.stream), *info.recorded):
                # a stream of another device: its event is made and recorded on that device
                # (PyTorch's CUDAGuard on the usage stream's device), the wait is cross-device
                if not b.stream_is_valid(dev, StreamHandle(s)):
                    b.synchronize(dev)   # a destroyed stream: wait for its device's work instead
                    continue
                ev = _checked.temporary_event(b, dev, anyb.event_create(dev, False, False, False))
                try:
                    b.event_record(dev, EventHandle(ev), StreamHandle(s))
                    b.stream_wait_event(idx, unifier, EventHandle(ev))
                finally:
                    b.event_destroy(dev, EventHandle(ev))
            b.mempool_free_async(idx, DevicePtr(ptr), unifier)
        finally:
            # back to the pool (its queued work stays ordered), or destroyed when it is full
            _stream._give_back(b, idx, unifier, free0)

    def free_from_finalizer(self, ptr: int) -> None:
        try:
            self.free(ptr)
        except Exception:  # noqa: BLE001 - a finalizer must not raise
            logging.getLogger("accelrt.memory").exception(
                "Exception ignored in the %s free of pointer %#x:", NAME, ptr)

    def drain_pending(self) -> bool:
        return True

    def record_stream(self, ptr: int, stream: int, device: int | None = None) -> None:
        """Make the free of ``ptr`` wait for the work queued by then on ``stream`` of device
        ``device`` (default: this allocator's; another device of the backend is allowed, as
        PyTorch's ``UsageStream`` carries its device).

        Raises:
            ValueError: ``ptr`` is not a live allocation, ``device`` is not a device index of
                the backend, or ``stream`` not a live stream of device ``device``.
            TypeError: ``device`` is not an int.
        """
        if device is not None and device != self._index:
            device = check_device(self._b, self._name, device)   # as the caching allocator's
        if not ptr:
            return
        from .. import _stream
        # the pool of the unifying free stream, made before the lock (see _free_unified)
        _stream._pool_of_current(self._b, self._index)
        with self._alock:
            info = self._live.get(ptr) if type(ptr) is int else None
            if info is None:
                raise self._bad_async_ptr(ptr)
            dev = self._index if device is None else device
            if stream == info.stream and dev == self._index:
                _warn_once("Called record_stream on tensor whose original creation stream "
                           "matches the recorded stream. This is unnecessary and has no effect.")
                return
            if not self._b.stream_is_valid(dev, StreamHandle(stream)):
                raise ValueError(f"record_stream: {stream!r} is not a live stream handle of "
                                 f"{self._name}:{dev}")
            use = (dev, stream)
            if use not in info.recorded:
                info.recorded.append(use)

    def empty_cache(self, pool_id: tuple[int, int] | None = None) -> None:
        """Synchronize the device and release every unused byte of its pool
        (``cudaDeviceSynchronize`` + ``cudaMemPoolTrimTo(pool, 0)``)."""
        refuse("empty_cache")   # (it waits for the streams: not from a host function)
        with self._alock:
            if not self._initialized:
                return
            if not self._capturing and self._capture_deferred:
                self._free_deferred_locked()
            self._b.synchronize(self._index)
            self._b.mempool_trim_to(self._index, 0)

    def segment_of(self, ptr: int) -> tuple[int, int, bool] | None:
        raise self.unsupported("shareIpcHandle")

    # ------------------------------------------------------------------ fraction
    def set_memory_fraction(self, fraction: object) -> None:
        """Cap the bytes this allocator hands out at ``fraction`` of the device's memory."""
        value = check_fraction(fraction)
        with self._alock:
            self._init_locked()
            _, total = self._b.get_memory_info(self._index)
            self._limit = int(value * total)

    def get_memory_fraction(self) -> float:
        """The cap of :meth:`set_memory_fraction` as a fraction (1.0 while there is none)."""
        limit = self._limit
        if limit == _UINT64_MAX:
            return 1.0
        return limit / self._b.get_memory_info(self._index)[1]

    # ------------------------------------------------------------------ statistics
    def pool_stats(self) -> dict[str, int]:
        """PyTorch's keys; only the pool's used and reserved bytes are non-zero."""
        vals = dict.fromkeys(FLAT_KEYS, 0)
        with self._alock:
            if self._initialized:
                b, idx = self._b, self._index
                attrs = {a: b.mempool_get_attribute(idx, a) for a in set(_STAT_KEYS.values())}
                for key, attr in _STAT_KEYS.items():
                    vals[key] = attrs[attr]
        return vals

    def pool_counter(self, name: str) -> int:
        """The pool's attribute ``name`` (0 before the first allocation)."""
        with self._alock:
            if not self._initialized:
                return 0
            return self._b.mempool_get_attribute(self._index, name)

    def reset_peak_stats(self) -> None:
        """Reset the pool's high-water marks to the current values."""
        with self._alock:
            self._init_locked()
            self._b.mempool_set_attribute(self._index, "reserved_mem_high", 0)
            self._b.mempool_set_attribute(self._index, "used_mem_high", 0)

    def reset_accumulated_stats(self) -> None:
        """No effect (the pool keeps no accumulated counts); warns once, as PyTorch."""
        _warn_once(f"For backend:{NAME}, resetAccumulatedStats has no effect.")

    # ------------------------------------------------------------------ unsupported
    def snapshot_segments(self, pool_id: tuple[int, int] | None = None) -> list[dict[str, Any]]:
        raise self._no_snapshot()

    def trace_entries(self) -> list[dict[str, Any]]:
        # (read only by a snapshot, which reads the traces first: PyTorch's snapshot refuses)
        raise self._no_snapshot()

    @staticmethod
    def _no_snapshot() -> RuntimeError:
        """PyTorch's error for a snapshot of this backend."""
        return RuntimeError(f"Calling snapshot with backend:{NAME} is not meaningful. (For "
                            "backend:native, snapshot returns a detailed summary of all blocks "
                            f"tracked by the allocator, but the {NAME} backend does not track "
                            "individual blocks.)")

    def record_annotation(self, metadata: dict[str, Any]) -> None:
        """Ignored, as PyTorch ignores memory metadata with this backend."""

    # ------------------------------------------------------------------ captures and pools
    def begin_allocate_to_pool(self, pool_id: tuple[int, int],
                               stream_filter: Callable[[int], bool] | None = None,
                               capture: bool = False) -> None:
        """A capture begins: allocations made now belong to it; frees of older allocations
        wait until it ends (PyTorch's notifyCaptureBegin)."""
        with self._alock:
            if self._capturing:
                raise RuntimeError("Only one capture at a time is allowed in a process.")
            self._capturing = True

    def end_allocate_to_pool(self, pool_id: tuple[int, int]) -> None:
        """The capture ends; the frees it deferred run at the next allocation (as
        PyTorch's mallocAsync does) or at :meth:`empty_cache`."""
        with self._alock:
            self._capturing = False

    def _free_deferred_locked(self) -> None:
        deferred, self._capture_deferred = self._capture_deferred, []
        for ptr in deferred:
            info = self._live.get(ptr)
            if info is not None:
                self._free_locked_async(ptr, info)

    def __repr__(self) -> str:
        return f"<{NAME} allocator {self._name}:{self._index} used={self._used}>"
