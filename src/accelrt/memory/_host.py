"""Pinned (page-locked) host memory: a caching pool per backend, like PyTorch's
``CachingHostAllocator``.

Requests are rounded up to the next power of two and served from free lists bucketed by
``ceil(log2(size))``; blocks are never split. A freed block that was used on streams (see
:meth:`HostCachingAllocator.record_event`) becomes reusable only once an event recorded on each
of those streams at free time has completed, so an asynchronous copy still reading it is never
overwritten; a block used on no stream is reusable at once. A block larger than
``pinned_max_cached_size_mb`` is neither rounded up nor cached: it goes back to the backend when
it becomes reusable. ``empty_cache`` returns every cached block to the backend. Statistics use
PyTorch's ``host_memory_stats`` keys.

Three allocator options (``ACCELRT_ALLOC_CONF``) change the pool as they change PyTorch's:

* ``pinned_reserve_segment_size_mb:N`` -- the first new block pins one segment of ``N`` MiB
  and new blocks are carved from it (4 KiB-aligned, bump allocation) until it is full, so many
  small pinned buffers cost one pinning call. Carved blocks are cached like any other but never
  returned one by one; ``empty_cache`` returns the whole segment once none of its blocks is in
  use, and the next new block reserves a fresh one.
* ``pinned_use_background_threads:True`` -- ``malloc`` does not query the events of freed blocks
  (a miss checks only the blocks of its own size); a background thread, running while freed
  blocks wait on events, polls them every 100 us and makes them reusable.
* ``pinned_free_catch_all:True`` -- an exception raised by the backend while ``free`` records the
  block's stream events is logged (``accelrt.memory``) instead of raised, for frees that run
  during shutdown; the block is then never reused.

Example::

    >>> from accelrt.memory._host import HostCachingAllocator
    >>> from accelrt.testing._simulated import SimulatedBackend
    >>> pool = HostCachingAllocator(SimulatedBackend())
    >>> p = pool.malloc(3000)          # rounded up to 4096 bytes
    >>> pool.free(p)
    >>> pool.malloc(4000) == p         # the cached block is reused
    True
"""

from __future__ import annotations

import bisect
import logging
import threading
import time
import weakref
from typing import Any

from .. import _checked
from .._errors import OutOfMemoryError, type_shown
from .._fork import hold_across_fork, reinit_after_fork
from ._config import get_config
from ._oom import format_size
from ._stats import Stat

__all__ = ["HostCachingAllocator", "get_host_allocator", "host_allocators",
           "peek_host_allocator"]

_STAT_NAMES = ("allocations", "allocated_bytes", "active_requests", "active_bytes")
_DURATIONS = ("host_alloc_time", "host_free_time")


_RESERVE_ALIGN = 4096          # carved blocks start on 4 KiB boundaries, as in PyTorch
_POLL_SECONDS = 100e-6         # the background thread's event polling period (PyTorch's)


class _Block:
    __slots__ = ("allocated", "carved", "events", "ptr", "size", "streams")

    def __init__(self, ptr: int, size: int, carved: bool = False) -> None:
        self.ptr = ptr
        self.size = size
        self.allocated = True
        self.carved = carved                             # from the reserve segment
        self.streams: set[tuple[int, int]] = set()       # (device index, stream handle)
        self.events: list[tuple[int, int]] = []          # (device index, event handle)


class _ReserveSegment:
    """One pinned segment that new blocks are carved from (PyTorch's PinnedReserveSegment)."""

    __slots__ = ("base", "blocks", "size", "used")

    def __init__(self, base: int, size: int) -> None:
        self.base = base
        self.size = size
        self.used = 0                                    # bump pointer, bytes from base
        self.blocks: list[_Block] = []

    def carve(self, size: int) -> int:
        """The address of ``size`` bytes (rounded up to 4 KiB) from the segment, or 0."""
        need = -(-size // _RESERVE_ALIGN) * _RESERVE_ALIGN
        if self.used + need > self.size:
            return 0
        ptr = self.base + self.used
        self.used += need
        return ptr


class _DurationStat:
    """Call durations in microseconds: total, count, max and min (PyTorch's DurationStat)."""

    __slots__ = ("count", "max", "min", "total")

    def __init__(self) -> None:
        self.total = self.count = self.max = self.min = 0

    def add(self, t0: float) -> None:
        us = int((time.perf_counter() - t0) * 1e6)
        self.total += us
        self.count += 1
        self.max = max(self.max, us)
        if us and (self.min == 0 or us < self.min):
            self.min = us

    def as_dict(self) -> dict[str, int]:
        return {"total": self.total, "max": self.max, "min": self.min, "count": self.count,
                "avg": self.total // self.count if self.count else 0}


def _bucket(size: int) -> int:
    return (size - 1).bit_length()                        # ceil(log2(size)), size >= 1


def _stream_key(stream: Any) -> tuple[int, int]:
    index, handle = getattr(stream, "_index", None), getattr(stream, "_handle", None)
    if not isinstance(index, int) or not isinstance(handle, int):
        raise TypeError(f"record_event() needs an accelrt.Stream, got {type_shown(stream)}")
    return index, handle


class HostCachingAllocator:
    """Caching pool of pinned host memory over one backend's ``host_malloc``/``host_free``.

    Thread-safe: every field is guarded by ``self._lock``.

    Args:
        backend: the :class:`~accelrt.backends.Backend` whose pinned memory is pooled.

    Example::

        >>> from accelrt.memory._host import HostCachingAllocator
        >>> from accelrt.testing._simulated import SimulatedBackend
        >>> pool = HostCachingAllocator(SimulatedBackend())
        >>> pool.free(pool.malloc(100))
        >>> pool.stats()["allocated_bytes.current"], pool.stats()["active_bytes.current"]
        (128, 0)
        >>> pool.empty_cache()
        >>> pool.stats()["num_host_free"]
        1
    """

    def __init__(self, backend: Any) -> None:
        self._b = backend
        self._lock = hold_across_fork(threading.Lock())
        self._blocks: dict[int, _Block] = {}                 # every block, by address
        self._starts: list[int] = []                         # their addresses, sorted
        self._gc_pending: list[int] = []   # frees from finalizers that found the lock held
        self._free: list[list[_Block]] = [[] for _ in range(65)]   # cached, by bucket
        self._pending: list[_Block] = []                     # freed, waiting on events
        self._stats = {name: Stat() for name in _STAT_NAMES}
        self._durations = {name: _DurationStat() for name in _DURATIONS}
        self._num_host_alloc = 0
        self._num_host_free = 0
        self._reserve: _ReserveSegment | None = None
        self._worker: threading.Thread | None = None         # the background event poller

    # ------------------------------------------------------------------ allocation
    def _cache(self, block: _Block) -> None:
        """A freed block became reusable: it stops being active and goes on its free list, or
        back to the backend if it is larger than ``pinned_max_cached_size`` (PyTorch's
        ``maybe_cache_block``)."""
        self._stats["active_requests"].decrease(1)
        self._stats["active_bytes"].decrease(block.size)
        if block.size > get_config().pinned_max_cached_size and not block.carved:
            self._release(block)       # (a carved block cannot go back alone: it stays cached)
            return
        self._free[_bucket(block.size)].append(block)

    def _release(self, block: _Block) -> None:
        t0 = time.perf_counter()
        self._b.host_free(block.ptr)
        self._durations["host_free_time"].add(t0)
        self._forget(block)
        self._num_host_free += 1
        self._stats["allocations"].decrease(1)
        self._stats["allocated_bytes"].decrease(block.size)

    def _forget(self, block: _Block) -> None:
        """Drop ``block`` from the address index (it goes back to the backend)."""
        del self._blocks[block.ptr]
        del self._starts[bisect.bisect_left(self._starts, block.ptr)]

    def _containing(self, ptr: int, nbytes: int) -> _Block | None:
        """The live (allocated) block holding the ``nbytes`` bytes at ``ptr``, else None."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            return None
        block = self._blocks[self._starts[i]]
        if not block.allocated or ptr + max(nbytes, 1) > block.ptr + block.size:
            return None
        return block

    def _drain_gc_pending(self) -> None:
        """Do the frees that finalizers queued while the lock was held (``_lock`` held); a
        failing one is logged, not raised into the unrelated call that drains it."""
        while self._gc_pending:
            ptr = self._gc_pending.pop()
            try:
                self._free_locked(ptr)
            except Exception:  # noqa: BLE001 (a finalizer's free has no caller to raise to)
                logging.getLogger("accelrt.memory").warning(
                    "exception in a queued free of %#x in the %s host pool", ptr, self._b.name,
                    exc_info=True)

    def _process_events(self, bucket: int | None = None) -> None:
        """Cache the freed blocks whose events have completed (only those of ``bucket`` if
        given: PyTorch's ``process_events_for_specific_size``)."""
        if not self._pending:
            return
        still: list[_Block] = []
        query = self._b.event_query
        for block in self._pending:
            if bucket is not None and _bucket(block.size) != bucket:
                still.append(block)
            elif all(query(i, e) for i, e in block.events):
                for i, e in block.events:
                    _checked.destroy_event(self._b, i, e)
                block.events.clear()
                self._cache(block)
            else:
                still.append(block)
        self._pending = still

    def _release_cached(self) -> None:
        carved: list[_Block] = []
        for bucket in self._free:
            while bucket:
                block = bucket.pop()
                if block.carved:
                    carved.append(block)
                else:
                    self._release(block)
        reserve = self._reserve
        if reserve is not None and len(carved) == len(reserve.blocks):
            # none of the segment's blocks is in use: the whole segment goes back
            for block in carved:
                self._forget(block)
                self._stats["allocations"].decrease(1)
                self._stats["allocated_bytes"].decrease(block.size)
            self._reserve = None
            t0 = time.perf_counter()
            self._b.host_free(reserve.base)
            self._durations["host_free_time"].add(t0)
            self._num_host_free += 1
            return
        for block in carved:
            self._free[_bucket(block.size)].append(block)

    def malloc(self, size: int) -> int:
        """Return a pinned block of at least ``size`` bytes (``0`` for ``size == 0``).

        Sizes up to ``pinned_max_round_threshold_mb`` and ``pinned_max_cached_size_mb``
        (default: all) are rounded up to the next power of two.

        Raises:
            TypeError: ``size`` is not an int.
            ValueError: ``size`` is negative.
            OutOfMemoryError: the backend cannot pin more memory even after the cache is
                emptied.
        """
        if not isinstance(size, int) or isinstance(size, bool):
            raise TypeError(f"size must be an int, got {type_shown(size)}")
        if size < 0:
            raise ValueError(f"size must not be negative, got {size}")
        if size == 0:
            return 0
        cfg = get_config()
        small = size <= cfg.pinned_max_round_threshold and size <= cfg.pinned_max_cached_size
        rounded = 1 << _bucket(size) if small else size
        background = cfg.pinned_use_background_threads
        with self._lock:
            self._drain_gc_pending()
            if not background:
                self._process_events()
            block = self._cached_block(size)
            if block is None and background and self._pending:
                # the background thread polls the rest: check only this size's blocks
                self._process_events(_bucket(size))
                block = self._cached_block(size)
            if block is None:
                block = self._new_block(rounded, cfg.pinned_reserve_segment_size)
            block.allocated = True
            self._stats["active_requests"].increase(1)
            self._stats["active_bytes"].increase(block.size)
            return block.ptr

    def _cached_block(self, size: int) -> _Block | None:
        bucket = self._free[_bucket(size)]
        for j in range(len(bucket) - 1, -1, -1):
            if bucket[j].size >= size:
                return bucket.pop(j)
        return None

    def _host_malloc(self, size: int, what: str) -> int:
        """``host_malloc`` (timed and counted); on failure the cache is emptied and it is tried
        once more. Raises OutOfMemoryError naming ``what`` if that fails too."""
        for attempt in range(2):
            t0 = time.perf_counter()
            b: Any = self._b   # called untyped: a compiled caller would cast the result
            ptr = _checked.address(b, ("host_malloc", (size,)), b.host_malloc(size), oom=True,
                                   held=self._blocks)
            self._durations["host_alloc_time"].add(t0)
            if ptr:
                self._num_host_alloc += 1
                return ptr
            if attempt == 0:
                self._process_events()
                self._release_cached()
        pinned = self._stats["allocated_bytes"].current
        raise OutOfMemoryError(
            f"{self._b.name.upper()} out of memory. Tried to allocate {format_size(size)} of "
            f"pinned host memory {what}with {format_size(pinned)} already pinned; free pinned "
            "buffers or call empty_host_cache()", size, pinned)

    def _new_block(self, size: int, reserve_size: int) -> _Block:
        reserve = self._reserve
        if reserve_size and reserve is None:
            base = self._host_malloc(reserve_size, "for the reserve segment "
                                     "(pinned_reserve_segment_size_mb; lower it) ")
            reserve = self._reserve = _ReserveSegment(base, reserve_size)
        ptr = reserve.carve(size) if reserve is not None else 0
        if reserve is not None and ptr:
            block = _Block(ptr, size, carved=True)
            reserve.blocks.append(block)
        else:
            block = _Block(self._host_malloc(size, ""), size)
        self._blocks[block.ptr] = block
        bisect.insort(self._starts, block.ptr)
        self._stats["allocations"].increase(1)
        self._stats["allocated_bytes"].increase(size)
        return block

    def free(self, ptr: int, nonblocking: bool = False) -> None:
        """Return a block from :meth:`malloc`; it is reused once its streams' events complete.

        Until then it still counts in ``active_requests`` / ``active_bytes``, as in PyTorch.

        Args:
            ptr: the address :meth:`malloc` returned.
            nonblocking: never wait for the lock (for finalizers: the garbage collector may
                run one while this thread holds it); if it is held, the free is queued and
                done by the next call that takes the lock.

        Raises:
            ValueError: ``ptr`` is not a live block of this pool (a queued free logs it).
        """
        if ptr == 0:
            return
        lock = self._lock
        if nonblocking:
            if not lock.acquire(blocking=False):
                self._gc_pending.append(ptr)
                # the holder may have passed its last drain point before the append
                if lock.acquire(blocking=False):
                    try:
                        self._drain_gc_pending()
                    finally:
                        lock.release()
                return
        else:
            lock.acquire()
        try:
            self._drain_gc_pending()
            self._free_locked(ptr)
        finally:
            lock.release()

    def _free_locked(self, ptr: int) -> None:
        block = self._blocks.get(ptr)
        if block is None or not block.allocated:
            raise ValueError(f"host pointer {ptr:#x} is not a live pinned block of the "
                             f"{self._b.name} host pool (double free, or not from it)")
        block.allocated = False
        if not block.streams:
            self._cache(block)
            return
        try:
            b: Any = self._b   # called untyped: a compiled caller would cast the result
            for index, handle in block.streams:
                event = _checked.event(b, index, b.event_create(index, False, False, False))
                block.events.append((index, event))
                self._b.event_record(index, event, handle)
        except Exception:
            if not get_config().pinned_free_catch_all:
                raise
            # the streams' work cannot be waited for: the block is never reused
            logging.getLogger("accelrt.memory").warning(
                "pinned_free_catch_all: exception ignored in the %s host pool's free() of "
                "%#x (the block is not reused)", self._b.name, ptr, exc_info=True)
            for index, event in block.events:
                try:
                    _checked.destroy_event(self._b, index, event)
                except Exception:  # noqa: BLE001 (best effort: the backend is failing)
                    pass
            block.events.clear()
            return
        block.streams.clear()
        self._pending.append(block)
        if get_config().pinned_use_background_threads:
            self._start_worker()

    def _start_worker(self) -> None:
        """Start the background event poller unless it runs (``_lock`` held)."""
        if self._worker is not None and self._worker.is_alive():
            return
        self._worker = threading.Thread(target=_poll_events, args=(weakref.ref(self),),
                                        name=f"accelrt-{self._b.name}-host-events", daemon=True)
        self._worker.start()

    def record_event(self, ptr: int, stream: Any) -> bool:
        """Mark the block holding address ``ptr`` (its start or any byte inside, as for a view
        of a pinned array) as used by ``stream`` (an :class:`accelrt.Stream`).

        Its free then waits for the work queued on ``stream`` at that time.

        Returns:
            True if ``ptr`` lies in a live block of this pool, else False (nothing recorded).

        Raises:
            TypeError: ``stream`` is not a stream.
            ValueError: ``stream`` belongs to another backend.
        """
        key = _stream_key(stream)
        owner = getattr(stream, "_b", self._b)
        if owner is not self._b:
            raise ValueError(f"record_event() got a stream of backend "
                             f"{getattr(owner, 'name', owner)!r}; the {self._b.name!r} host pool "
                             "can only wait for streams of its own backend")
        with self._lock:
            block = self._containing(ptr, 1)
            if block is None:
                return False
            block.streams.add(key)
            return True

    def contains(self, ptr: int, nbytes: int) -> bool:
        """True if the ``nbytes`` bytes at ``ptr`` lie inside one live (allocated) block.

        Example::

            >>> from accelrt.memory._host import HostCachingAllocator
            >>> from accelrt.testing._simulated import SimulatedBackend
            >>> pool = HostCachingAllocator(SimulatedBackend())
            >>> p = pool.malloc(100)
            >>> pool.contains(p + 8, 64), pool.contains(p, 4096)
            (True, False)
            >>> pool.free(p)
        """
        with self._lock:
            return self._containing(ptr, nbytes) is not None

    def empty_cache(self) -> None:
        """Return every cached (free, no pending event) block to the backend."""
        with self._lock:
            self._drain_gc_pending()
            self._process_events()
            self._release_cached()

    def stats(self) -> dict[str, int]:
        """Flat statistics with PyTorch's ``host_memory_stats`` keys (unsorted)."""
        out: dict[str, int] = {}
        with self._lock:
            for name, st in self._stats.items():
                for k, v in st.as_dict().items():
                    out[f"{name}.{k}"] = v
            for name, d in self._durations.items():
                for k, v in d.as_dict().items():
                    out[f"{name}.{k}"] = v
            out["num_host_alloc"] = self._num_host_alloc
            out["num_host_free"] = self._num_host_free
        return out

    def reset_accumulated_stats(self) -> None:
        """Zero the ``allocated``/``freed`` counters, call counts and durations."""
        with self._lock:
            for st in self._stats.values():
                st.reset_accumulated()
            self._durations = {name: _DurationStat() for name in _DURATIONS}
            self._num_host_alloc = self._num_host_free = 0

    def reset_peak_stats(self) -> None:
        """Set every ``peak`` to its ``current``."""
        with self._lock:
            for st in self._stats.values():
                st.reset_peak()


def _poll_events(ref: weakref.ref[HostCachingAllocator]) -> None:
    """The background thread of ``pinned_use_background_threads``: makes freed blocks reusable
    as their events complete; ends when none is pending or the pool is gone."""
    while True:
        pool = ref()
        if pool is None:
            return
        with pool._lock:
            pool._process_events()
            if not pool._pending:
                pool._worker = None
                return
        del pool
        time.sleep(_POLL_SECONDS)


_registry_lock = reinit_after_fork(threading.Lock())
_pools: dict[str, HostCachingAllocator] = {}               # guarded by _registry_lock


def get_host_allocator(backend: Any) -> HostCachingAllocator:
    """The process-wide host pool of ``backend`` (made on first use).

    Example::

        >>> from accelrt.memory._host import get_host_allocator, peek_host_allocator
        >>> from accelrt.testing._simulated import SimulatedBackend
        >>> pool = get_host_allocator(SimulatedBackend())
        >>> peek_host_allocator("simulated") is pool
        True
    """
    pool = _pools.get(backend.name)
    if pool is not None and pool._b is backend:
        return pool
    with _registry_lock:
        pool = _pools.get(backend.name)
        if pool is None or pool._b is not backend:
            pool = _pools[backend.name] = HostCachingAllocator(backend)
        return pool


def peek_host_allocator(name: str) -> HostCachingAllocator | None:
    """The host pool of backend ``name`` if one was made, else None."""
    return _pools.get(name)


def zero_stats() -> dict[str, int]:
    """:meth:`HostCachingAllocator.stats` of a pool that allocated nothing: every key at 0
    (what PyTorch's ``host_memory_stats()`` reports once CUDA is initialised, before the first
    pinned allocation).

    Example::

        >>> from accelrt.memory._host import zero_stats
        >>> zero_stats()["allocations.current"], len(zero_stats())
        (0, 28)
    """
    out = {f"{name}.{k}": 0 for name in _STAT_NAMES for k in Stat().as_dict()}
    out.update({f"{name}.{k}": 0 for name in _DURATIONS for k in _DurationStat().as_dict()})
    out["num_host_alloc"] = out["num_host_free"] = 0
    return out


def host_allocators() -> list[HostCachingAllocator]:
    """Every host pool made so far (one per backend name)."""
    return list(_pools.values())
