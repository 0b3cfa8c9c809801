"""The device-agnostic caching allocator (PyTorch's CUDA caching allocator, in Python).

One :class:`DeviceCachingAllocator` per (backend, device), created lazily by
:func:`get_allocator`. It reproduces PyTorch's observable behaviour: size rounding, small and
large pools, best-fit lookup per stream, splitting and merging, the oversize rules, the
free-and-retry chain before an out-of-memory error, garbage collection, the per-process memory
fraction, stream-ordered frees, private pools, expandable segments, statistics, snapshots and
the history trace (see ``ALLOCATOR_SPEC.md``).

This module holds the allocation and free paths, rounding, pools and statistics; the rest of
the allocator's methods live in mixins: :mod:`._history` (trace ring buffer, stack frames),
:mod:`._segments` (snapshots), :mod:`._oom` (OOM messages and observers), :mod:`._pools`
(private pools), :mod:`._release`
(release and garbage-collection policies), :mod:`._events` (stream-ordered frees) and
:mod:`._expandable` (expandable segments). Hot-path state lives in flat attributes; see
:mod:`._stats` for the packed counters and :mod:`._lock` for the lock.

Example::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory._allocator import DeviceCachingAllocator
    >>> from accelrt.memory._config import AllocatorConfig
    >>> a = DeviceCachingAllocator(get_backend("cpu"), 0, AllocatorConfig())
    >>> p = a.malloc(3 * 2**20, 0)
    >>> a.memory_allocated(), a.memory_reserved()
    (3145728, 20971520)
    >>> a.free(p); a.empty_cache(); a.memory_reserved()
    0
"""

from __future__ import annotations

import collections
import operator
import sys
import threading
from bisect import bisect_left, insort
from collections.abc import Callable
from queue import Empty as _Empty
from typing import Any, cast

from .._backend import Backend
from .._errors import OutOfMemoryError
from .._fork import hold_across_fork, reinit_after_fork
from ._block import (
    ADDR_MASK,
    DEFAULT_POOL,
    K_MIN_BLOCK,
    K_MIN_LARGE_ALLOC,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
    KEY_SHIFT,
    Block,
    BlockPool,
    SMALL_MAX,
    PrivatePool,
    fl_add,
    fl_iter_ge,
    fl_pop_ge,
    fl_remove,
)
from ._config import SIZE_MAX, AllocatorConfig, get_config
from ._events import EventsMixin
from ._expandable import ExpandableMixin, ExpandableSegment
from ._history import CTX_ALL, CTX_ALLOC, CTX_NEVER, HistoryMixin, capture_frames
from ._lock import FastLock
from ._oom import OomMixin, format_size
from ._pools import PoolsMixin, check_pool_id
from ._release import ReleaseMixin
from ._segments import SegmentsMixin
from ._stats import FLAT_KEYS, SORTED_KEYS, DeviceStats, HotCounters

__all__ = ["DeviceCachingAllocator", "format_size", "get_allocator", "peek_allocator"]

_MAX_ALLOC = 1 << 60
_DEFAULT_POOL = DEFAULT_POOL


def _check_size(size: object) -> int:
    if isinstance(size, bool) or not hasattr(size, "__index__"):
        raise TypeError(f"allocation size must be an int, got {type(size).__name__}")
    return operator.index(size)


class DeviceCachingAllocator(PoolsMixin, HistoryMixin, SegmentsMixin, OomMixin, ReleaseMixin,
                             EventsMixin, ExpandableMixin):
    """The caching allocator of one device of one backend.

    Args:
        backend: the :class:`~accelrt.backends.Backend` owning the device.
        index: the device index (already range-checked).
        config: options; default: the process-wide ones (``ACCELRT_ALLOC_CONF``).

    Every method is thread-safe (one lock per allocator).

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> p = a.malloc(1000, 0)
        >>> a.stats()["allocated_bytes.small_pool.current"]
        1024
        >>> a.free(p)
    """

    def __init__(self, backend: Backend, index: int, config: AllocatorConfig | None = None) -> None:
        cfg = config if config is not None else get_config()
        self._b = backend                    # immutable
        self._index = index                  # immutable
        self._name: str = backend.name       # immutable
        self._lock = hold_across_fork(FastLock())
        self._acquire = self._lock.acquire                 # bound C methods of _lock
        self._release = self._lock.put                     # put(None) releases
        self._try_acquire = self._lock.try_acquire
        self._acquire_nowait = self._lock.acquire_nowait   # raises queue.Empty if held
        # Frees (int addresses) and private-pool releases (pool ids) requested by finalizers
        # while the lock was held, possibly by their own thread (see free_from_finalizer).
        # Appended without the lock (deque.append is atomic); drained under _lock.
        self._gc_pending: collections.deque[int | tuple[int, int]] = collections.deque()
        # guarded by _lock: Block objects merged away, reused by splits (at most as many as
        # the most blocks ever alive at once)
        self._spares: list[Block] = []
        self._device_total: int = int(backend.get_device_properties(index)["total_memory"])
        self._stats = DeviceStats(-1 if cfg.max_split_size >= SIZE_MAX else cfg.max_split_size)
        hot = self._stats.hot
        self._small = BlockPool(True, None, hot[1], 1)     # guarded by _lock
        self._large = BlockPool(False, None, hot[2], 2)    # guarded by _lock
        self._blocks: dict[int, Block] = {}                # guarded by _lock: every block by address
        self._events: dict[int, collections.deque[tuple[int, Block]]] = {}  # guarded by _lock
        self._event_pool: list[int] = []                   # guarded by _lock: idle event handles
        self._deferred: list[Block] = []                   # guarded by _lock: frees awaiting capture end
        self._captures: list[tuple[tuple[int, int], Callable[[int], bool] | None]] = []  # _lock
        self._private: dict[tuple[int, int], PrivatePool] = {}   # guarded by _lock
        self._freeable: dict[tuple[int, int], PrivatePool] = {}  # guarded by _lock
        self._expandable_segments: list[ExpandableSegment] = []  # guarded by _lock
        self._total_reserved = 0                           # guarded by _lock (total_allocated_memory)
        self._vm_high = 0               # guarded by _lock: most bytes ever mapped (page_reuse)
        self._allowed_max: int | None = None               # guarded by _lock
        self._oom_observers: list[Callable[[int, int, int, int], None]] = []  # guarded by _lock
        # history recording, guarded by _lock
        self._history = False          # trace entries are recorded
        self._ctx = CTX_NEVER          # stack gathering level
        self._trace: collections.deque[dict[str, Any]] = collections.deque()
        self._skip_actions: frozenset[str] = frozenset()
        self._vm_ok: bool | None = None                    # guarded by _lock: backend vm support
        self._vm_granularity: int | None = None                      # guarded by _lock: vm granularity
        self._rejected = False                             # guarded by _lock: last slow path
        self._set_config_locked(cfg)
        if cfg.per_process_memory_fraction is not None:
            self._set_fraction_locked(cfg.per_process_memory_fraction)

    # ------------------------------------------------------------------ configuration
    def _set_config_locked(self, cfg: AllocatorConfig) -> None:
        self._cfg = cfg                                           # guarded by _lock
        self._max_split_size = cfg.max_split_size                            # guarded by _lock
        self._max_non_split_rounding = cfg.max_non_split_rounding_size              # guarded by _lock
        self._large_segment_size = cfg.large_segment_size                        # guarded by _lock
        divs = cfg.roundup_power2_divisions
        self._roundup_divisions: tuple[int, ...] | None = divs if any(d > 1 for d in divs) else None  # _lock
        self._gc_threshold = cfg.garbage_collection_threshold     # guarded by _lock
        self._expandable = cfg.expandable_segments                # guarded by _lock
        self._page_reuse = cfg.page_reuse and cfg.expandable_segments  # guarded by _lock
        self._gc_on = self._gc_threshold > 0.0 and getattr(self, "_allowed_max", None) is not None
        self._update_simple()

    def _update_simple(self) -> None:
        # True when the best-fit lookup needs no oversize, GC or expandable handling.
        self._simple = (self._max_split_size >= SIZE_MAX and not self._gc_on and not self._expandable
                        and not self._expandable_segments)  # guarded by _lock
        # True when malloc needs nothing but rounding and the plain lookup (guarded by _lock)
        self._fast = (self._simple and self._roundup_divisions is None and not self._ctx
                      and not self._history and not self._events and not self._deferred
                      and not self._captures)

    def vm_supported(self) -> bool:
        """True if the backend can map virtual memory on this device (expandable segments)."""
        if self._vm_ok is None:
            try:
                self._vm_ok = bool(self._b.vm_supported(self._index))
            except NotImplementedError:
                self._vm_ok = False
        return self._vm_ok

    def _vm_error(self) -> ValueError:
        return ValueError(
            f"expandable_segments:True needs virtual memory support, which the "
            f"'{self._name}' backend does not provide on device {self._index} "
            f"(Backend.vm_supported() is False); remove expandable_segments from "
            f"ACCELRT_ALLOC_CONF / set_allocator_settings for this backend")

    def set_config(self, cfg: AllocatorConfig) -> None:
        """Apply new options (PyTorch applies runtime settings to existing allocators).

        Raises:
            ValueError: ``expandable_segments`` is on but the backend has no virtual memory.
        """
        if cfg.expandable_segments and not self.vm_supported():
            raise self._vm_error()
        with self._lock:
            self._set_config_locked(cfg)

    @property
    def config(self) -> AllocatorConfig:
        """The options in force."""
        return self._cfg

    # ------------------------------------------------------------------ public: allocation
    def malloc(self, size: int, stream: int = 0) -> int:
        """Allocate ``size`` bytes for use on ``stream`` (a raw stream handle).

        Returns:
            The address, or 0 for ``size == 0``.

        Raises:
            TypeError: ``size`` is not an int.
            ValueError: ``size`` is negative; or expandable segments are requested on a
                backend without virtual memory.
            OutOfMemoryError: the device (or the memory fraction) cannot hold the request
                even after freeing the cache.

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> p = a.malloc(3 * 2**20, 0)
            >>> a.malloc(0, 0)
            0
            >>> a.free(p)
        """
        if type(size) is not int or size <= 0 or size >= _MAX_ALLOC:
            size = self._check_request(size)
            if size == 0:
                return 0
        self._acquire()
        try:
            if self._fast:
                # Nothing special in force: default rounding and pools, no events, history,
                # captures, expandable segments or oversize limit. A cached block is split
                # and accounted for right here; anything else goes to _malloc_locked.
                rounded = (size + 511) & -512
                if rounded <= K_SMALL_SIZE:
                    pool = self._small
                    split_min = K_MIN_BLOCK
                else:
                    pool = self._large
                    split_min = K_SMALL_SIZE + 1
                fl = pool.free.get(stream)
                if fl:
                    if type(fl) is list:
                        i = bisect_left(fl, rounded << 64)
                        key = fl.pop(i) if i < len(fl) else -1
                    else:
                        # a long FreeList: its pop_ge inlined
                        maxes = fl.maxes  # type: ignore[union-attr]
                        j = bisect_left(maxes, rounded << 64)
                        if j < len(maxes):
                            sub = fl.lists[j]  # type: ignore[union-attr]
                            i = bisect_left(sub, rounded << 64)
                            key = sub.pop(i)
                            if not sub:
                                del fl.lists[j]  # type: ignore[union-attr]
                                del maxes[j]
                            elif i == len(sub):
                                maxes[j] = sub[-1]
                        else:
                            key = -1
                    if key >= 0:
                        blk = self._blocks[key & ADDR_MASK]
                        c = pool.hot
                        addr = blk.addr
                        remaining = blk.size - rounded
                        if remaining >= split_min:
                            nx = blk.next
                            raddr = addr + rounded
                            spares = self._spares
                            if not spares:
                                rem = Block(raddr, remaining, stream, pool)
                            else:
                                # a block object freed by a merge, reused
                                rem = spares.pop()
                                rem.addr = raddr
                                rem.size = remaining
                                rem.stream = stream
                                rem.pool = pool
                                rem.exp = None
                                rem.requested = 0
                                rem.frames = None
                            rem.prev = blk
                            rem.next = nx
                            blk.next = rem
                            blk.size = rounded
                            self._blocks[raddr] = rem
                            if type(fl) is not list:
                                fl.add((remaining << 64) | raddr)  # type: ignore[union-attr]
                            elif len(fl) < SMALL_MAX:
                                insort(fl, (remaining << 64) | raddr)
                            else:
                                fl_add(pool.free, stream, (remaining << 64) | raddr)
                            rem.gc_base = pool.gc_calls
                            if nx is not None or blk.prev is not None:
                                if nx is not None:
                                    nx.prev = rem
                                st = self._stats
                                if st.dirty_split:
                                    st.settle_split()
                                c.inactive_split_bytes -= rounded
                            else:
                                # a new inactive split block: update the peaks at once
                                sn = c.inactive_split + 1
                                c.inactive_split = sn
                                c.inactive_split_sum += 1
                                sb = c.inactive_split_bytes + remaining
                                c.inactive_split_bytes = sb
                                c.inactive_split_bytes_sum += remaining
                                if sn > c.inactive_split_peak:
                                    c.inactive_split_peak = sn
                                if sb > c.inactive_split_bytes_peak:
                                    c.inactive_split_bytes_peak = sb
                                o = c.other_row
                                a = c.all_row
                                sn += o.inactive_split
                                if sn > a.inactive_split_peak:
                                    a.inactive_split_peak = sn
                                sb += o.inactive_split_bytes
                                if sb > a.inactive_split_bytes_peak:
                                    a.inactive_split_bytes_peak = sb
                        elif blk.next is not None or blk.prev is not None:
                            st = self._stats
                            if st.dirty_split:
                                st.settle_split()
                            c.inactive_split_bytes -= blk.size
                            c.inactive_split -= 1
                        blk.allocated = True
                        blk.requested = size
                        bsize = blk.size
                        c.allocations += 1
                        c.allocated_bytes += bsize
                        c.requested_bytes += size
                        c.allocations_sum += 1
                        c.allocated_bytes_sum += bsize
                        c.requested_bytes_sum += size
                        st = self._stats
                        d = st.dirty
                        if d is not c:
                            st.dirty = True if d else c
                        return addr
            res = self._malloc_locked(size, stream)
        finally:
            self._release(None)
        if type(res) is int:
            return res
        self._raise_oom(*cast("tuple[str, int, int, int, int]", res))  # not an int: OOM
        raise AssertionError("unreachable")

    def _malloc_locked(self, size: int, stream: int) -> int | tuple[str, int, int, int, int]:
        """:meth:`malloc` with every option considered (``_lock`` held): the address, or the
        arguments of :meth:`_raise_oom`."""
        block = None
        fl = None
        if self._gc_pending:
            self._drain_pending_locked()
        if (self._events or self._deferred) and not self._captures:
            self._process_events()
        if self._roundup_divisions is None:
            rounded = (size + 511) & -512
        else:
            rounded = self._round_size(size)
        if self._captures:
            pool = self._get_private_pool(rounded, stream)
        elif rounded <= K_SMALL_SIZE:
            pool = self._small
        else:
            pool = self._large
        frames = capture_frames() if self._ctx else None
        if self._simple:
            # Inlined best-fit lookup (no oversize limit, GC or expandable blocks).
            fl = pool.free.get(stream)
            if fl:
                key = fl_pop_ge(fl, rounded << 64)
                if key >= 0:
                    block = self._blocks[key & ADDR_MASK]
        else:
            block = self._get_free_block(pool, stream, rounded)
        if block is None:
            fl = None
            block = self._alloc_slow(pool, stream, rounded, frames)
            if block is None:
                if self._rejected:
                    return self._prepare_rejection(rounded, size)
                return self._prepare_oom(pool, stream, rounded, frames, size)
        # ---- alloc_found_block: split, stats, trace
        blk: Block = block
        st = self._stats
        c = pool.hot
        remaining = blk.size - rounded
        addr = blk.addr
        if remaining >= K_MIN_BLOCK and not pool.no_split and (
                pool.is_small or self._expandable
                or (rounded < self._max_split_size and remaining > K_SMALL_SIZE)):
            nx = blk.next
            exp = blk.exp
            raddr = addr + rounded
            spares = self._spares
            if not spares:
                rem = Block(raddr, remaining, stream, pool, exp)
            else:
                # a block object freed by a merge, reused (fields a new one differs in)
                rem = spares.pop()
                rem.addr = raddr
                rem.size = remaining
                rem.stream = stream
                rem.pool = pool
                rem.exp = exp
                rem.requested = 0
                rem.frames = None
            rem.prev = blk
            rem.next = nx
            if nx is not None:
                nx.prev = rem
            already_split = nx is not None or blk.prev is not None
            blk.next = rem
            blk.size = rounded
            self._blocks[raddr] = rem
            fl_add(pool.free, stream, (remaining << 64) | raddr)
            rem.gc_base = pool.gc_calls
            if exp is None:
                if already_split:
                    if st.dirty_split:
                        st.settle_split()
                    c.inactive_split_bytes -= rounded
                else:
                    c.inactive_split += 1
                    c.inactive_split_sum += 1
                    c.inactive_split_bytes += remaining
                    c.inactive_split_bytes_sum += remaining
                    st.dirty_split = True
        elif blk.exp is None and (blk.next is not None or blk.prev is not None):
            if st.dirty_split:
                st.settle_split()
            c.inactive_split_bytes -= blk.size
            c.inactive_split -= 1
        blk.allocated = True
        blk.requested = size
        bsize = blk.size
        c.allocations += 1
        c.allocated_bytes += bsize
        c.requested_bytes += size
        c.allocations_sum += 1
        c.allocated_bytes_sum += bsize
        c.requested_bytes_sum += size
        d = st.dirty
        if d is not c:
            st.dirty = True if d else c
        if bsize >= self._max_split_size:
            st.oversize_allocations.increase(1)
        if frames is not None:
            blk.frames = frames
            if self._history:
                self._record("alloc", addr, size, stream,
                             frames if self._ctx >= CTX_ALLOC else None)
        elif self._history:
            self._record("alloc", addr, size, stream, None)
        return addr

    def _check_request(self, size: object) -> int:
        """Validate a ``malloc`` size outside the fast range: 0, or raise."""
        size = _check_size(size)
        if size < 0:
            raise ValueError(f"allocation size must be >= 0, got {size}")
        if size >= _MAX_ALLOC:
            raise OutOfMemoryError(
                f"{self._name} out of memory. Tried to allocate more than 1EB memory.",
                size, self.memory_allocated(), self._device_total)
        return size

    def free(self, ptr: int, nonblocking: bool = False) -> None:
        """Return memory from :meth:`malloc` (free *requested*).

        If streams were recorded with :meth:`record_stream`, the block is reused only after
        events recorded now on those streams complete.

        Args:
            ptr: the address :meth:`malloc` returned.
            nonblocking: never wait for the lock (for finalizers; see
                :meth:`free_from_finalizer`): if it is held, the free is queued.

        Raises:
            ValueError: ``ptr`` was not allocated here, or was already freed (with
                ``nonblocking`` and a held lock: printed when the queued free runs).

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> a.free(a.malloc(100, 0))
            >>> a.stats()["allocation.all.freed"]
            1
        """
        if nonblocking:
            try:
                self._acquire_nowait()
            except _Empty:
                self._gc_pending.append(ptr)
                # The holder may have passed its last drain point before the append: if the
                # lock is free now, drain here.
                self.drain_pending()
                return
            if self._gc_pending:
                try:
                    self._drain_pending_locked()
                except BaseException:
                    self._release(None)
                    raise
        else:
            self._acquire()
        try:
            blk = self._blocks.get(ptr)
            if blk is None or not blk.allocated:
                raise self._bad_ptr(ptr, blk)
            blk.allocated = False
            st = self._stats
            pool = blk.pool
            c = pool.hot
            # bool | HotCounters; typed Any so that ``d is c`` does not narrow the duck-typed
            # pool row ``c`` (whose ``o``/``a`` rows are always set) for the checker
            d: Any = st.dirty
            if d:
                if d is c and not st.pending_seen:
                    # DeviceStats.settle() for one pool type, inlined (the hot path)
                    n = c.allocations
                    b = c.allocated_bytes
                    r = c.requested_bytes
                    if n > c.allocations_peak:
                        c.allocations_peak = n
                    if b > c.allocated_bytes_peak:
                        c.allocated_bytes_peak = b
                    if r > c.requested_bytes_peak:
                        c.requested_bytes_peak = r
                    o = c.other_row
                    a = c.all_row
                    n += o.allocations
                    if n > a.allocations_peak:
                        a.allocations_peak = n
                    b += o.allocated_bytes
                    if b > a.allocated_bytes_peak:
                        a.allocated_bytes_peak = b
                    r += o.requested_bytes
                    if r > a.requested_bytes_peak:
                        a.requested_bytes_peak = r
                    st.dirty = False
                else:
                    st.settle()
            size = blk.size
            c.allocations -= 1
            c.allocated_bytes -= size
            if size >= self._max_split_size:
                st.oversize_allocations.decrease(1)
            if self._history:
                self._record("free_requested", ptr, blk.requested, blk.stream,
                             capture_frames() if self._ctx >= CTX_ALL else blk.frames)
                if blk.stream_uses:
                    self._free_pending(blk, st, c, size)
                else:
                    self._free_block(blk, False)
                return
            if blk.stream_uses is None:
                # ---- free completed at once: merge and cache (inlined _free_block)
                c.requested_bytes -= blk.requested
                stream = blk.stream
                prev = blk.prev
                nx = blk.next
                fl = pool.free.get(stream)
                if fl is None:
                    fl = pool.free[stream] = []
                if prev is None and nx is None:
                    # unsplit segment: nothing to merge
                    if type(fl) is not list:
                        fl.add((size << 64) | ptr)  # type: ignore[union-attr]  # a long FreeList
                    elif len(fl) < SMALL_MAX:
                        insort(fl, (size << 64) | ptr)
                    else:
                        fl_add(pool.free, stream, (size << 64) | ptr)
                    blk.gc_base = pool.gc_calls
                    return
                b = blk
                merged = 0
                merged_bytes = 0
                if (prev is not None and not prev.allocated and not prev.event_count
                        and not prev.stream_uses and prev.mapped):
                    psize = prev.size
                    if type(fl) is list:
                        del fl[bisect_left(fl, (psize << 64) | prev.addr)]
                    else:
                        fl.remove((psize << 64) | prev.addr)
                    merged = 1
                    merged_bytes = psize
                    del self._blocks[ptr]
                    prev.size = psize + size
                    prev.next = nx
                    if nx is not None:
                        nx.prev = prev
                    prev.requested = blk.requested
                    prev.frames = blk.frames
                    b = prev
                    self._spares.append(blk)
                if (nx is not None and not nx.allocated and not nx.event_count
                        and not nx.stream_uses and nx.mapped):
                    nsize = nx.size
                    if type(fl) is list:
                        del fl[bisect_left(fl, (nsize << 64) | nx.addr)]
                    else:
                        fl.remove((nsize << 64) | nx.addr)
                    merged += 1
                    merged_bytes += nsize
                    del self._blocks[nx.addr]
                    b.size += nsize
                    nn = nx.next
                    b.next = nn
                    if nn is not None:
                        nn.prev = b
                    self._spares.append(nx)
                if blk.exp is None:
                    # inactive_split stats; increases update the peaks at once
                    if b.prev is not None or b.next is not None:
                        # still split: this block joins them (minus the ones merged into it)
                        if merged == 2 and st.dirty_split:
                            st.settle_split()
                        if merged != 1:
                            sn = c.inactive_split + 1 - merged
                            c.inactive_split = sn
                            if not merged:
                                c.inactive_split_sum += 1
                                if sn > c.inactive_split_peak:
                                    c.inactive_split_peak = sn
                                sn += c.other_row.inactive_split
                                a = c.all_row
                                if sn > a.inactive_split_peak:
                                    a.inactive_split_peak = sn
                        sb = c.inactive_split_bytes + size
                        c.inactive_split_bytes = sb
                        c.inactive_split_bytes_sum += size
                        if sb > c.inactive_split_bytes_peak:
                            c.inactive_split_bytes_peak = sb
                        sb += c.other_row.inactive_split_bytes
                        a = c.all_row
                        if sb > a.inactive_split_bytes_peak:
                            a.inactive_split_bytes_peak = sb
                    else:
                        if st.dirty_split:
                            st.settle_split()
                        c.inactive_split -= merged
                        c.inactive_split_bytes -= merged_bytes
                if type(fl) is not list:
                    fl.add((b.size << 64) | b.addr)  # type: ignore[union-attr]  # a long FreeList
                elif len(fl) < SMALL_MAX:
                    insort(fl, (b.size << 64) | b.addr)
                else:
                    fl_add(pool.free, stream, (b.size << 64) | b.addr)
                b.gc_base = pool.gc_calls
            elif blk.stream_uses:
                self._free_pending(blk, st, c, size)
            else:
                self._free_block(blk, False)
        finally:
            self._release(None)

    def free_from_finalizer(self, ptr: int) -> None:
        """:meth:`free` for finalizers (``__del__``, ``weakref.finalize``): never blocks.

        The garbage collector may run a finalizer at any object allocation, including inside
        this allocator's critical section on the thread that holds the (non-reentrant) lock;
        a blocking :meth:`free` there would deadlock. This takes the lock only if it is free;
        otherwise the free is queued and completed by the lock holder's next drain point
        (the start of a malloc that misses the cache, :meth:`empty_cache`, the statistics
        getters, snapshots). Once no thread holds the lock, :meth:`memory_allocated` and
        :meth:`stats` are exact.

        Errors (a pointer not allocated here, a double free) cannot be raised to anyone
        meaningful: they are logged ("Exception ignored", logger ``accelrt.memory``; stderr
        when logging is not configured).

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> p = a.malloc(100, 0)
            >>> with a._lock:                # as if the GC ran a finalizer in a critical section
            ...     a.free_from_finalizer(p)
            >>> a.memory_allocated()         # the getter completes the queued free
            0
        """
        self.free(ptr, True)

    def _drain_pending_locked(self) -> None:
        """Complete the frees and pool releases queued by finalizers (``_lock`` held)."""
        q = self._gc_pending
        while q:
            item = q.popleft()
            try:
                if type(item) is int:
                    self._free_locked(item)
                else:
                    self._release_pool_locked(item)  # type: ignore[arg-type]
            except Exception as e:  # noqa: BLE001 - a finalizer's error is only reported
                _report_finalizer_error(item, e)

    def drain_pending(self) -> bool:
        """Complete the frees queued by finalizers now, unless some thread holds the lock.

        Returns:
            True if nothing is left queued.

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> DeviceCachingAllocator(get_backend("cpu"), 0).drain_pending()
            True
        """
        if self._gc_pending and self._try_acquire():
            try:
                self._drain_pending_locked()
            finally:
                self._release(None)
        return not self._gc_pending

    def _free_locked(self, ptr: int) -> None:
        """:meth:`free` with ``_lock`` held (the unhurried path, for queued frees)."""
        blk = self._blocks.get(ptr)
        if blk is None or not blk.allocated:
            raise self._bad_ptr(ptr, blk)
        blk.allocated = False
        st = self._stats
        if st.dirty:
            st.settle()
        c = blk.pool.hot
        size = blk.size
        c.allocations -= 1
        c.allocated_bytes -= size
        if size >= self._max_split_size:
            st.oversize_allocations.decrease(1)
        if self._history:
            self._record("free_requested", ptr, blk.requested, blk.stream,
                         capture_frames() if self._ctx >= CTX_ALL else blk.frames)
        if blk.stream_uses:
            self._free_pending(blk, st, c, size)
        else:
            self._free_block(blk, False)

    def _free_pending(self, blk: Block, st: DeviceStats, c: HotCounters, size: int) -> None:
        """Free of a block recorded on other streams: it completes after their events."""
        if not st.pending_seen:
            st.mark_pending()
        c.pending_frees += 1
        c.pending_bytes += size
        if self._captures:
            self._deferred.append(blk)
            self._fast = False
        else:
            self._insert_events(blk)

    def _bad_ptr(self, ptr: object, blk: Block | None) -> Exception:
        if not isinstance(ptr, int) or isinstance(ptr, bool):
            return TypeError(f"pointer must be an int, got {type(ptr).__name__}")
        if blk is None:
            return ValueError(f"pointer {ptr:#x} was not allocated by the {self._name}:"
                              f"{self._index} caching allocator")
        return ValueError(f"pointer {ptr:#x} is not allocated (double free?)")

    def record_stream(self, ptr: int, stream: int) -> None:
        """Mark the allocation at ``ptr`` as used on ``stream``: its free will wait for the
        work queued on ``stream`` at free time (PyTorch's ``recordStream``).

        Raises:
            ValueError: ``ptr`` is not a live allocation of this allocator.

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> s = get_backend("cpu").stream_create(0, 0)
            >>> p = a.malloc(100, 0)
            >>> a.record_stream(p, s)     # p is reused only after s's work queued by free()
            >>> a.free(p)
        """
        with self._lock:
            blk = self._blocks.get(ptr)
            if blk is None or not blk.allocated:
                raise self._bad_ptr(ptr, blk)
            if stream == blk.stream:
                return
            if not self._b.stream_is_valid(self._index, stream):
                raise ValueError(f"record_stream: {stream!r} is not a live stream handle of "
                                 f"{self._name}:{self._index}")
            if blk.stream_uses is None:
                blk.stream_uses = {stream}
            else:
                blk.stream_uses.add(stream)

    def empty_cache(self, pool_id: tuple[int, int] | None = None) -> None:
        """Release every cached segment that holds no allocation (waits for pending frees).

        Args:
            pool_id: only that private pool's memory (default: the default pools and every
                released private pool).

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> a.free(a.malloc(100, 0))
            >>> a.memory_reserved() > 0
            True
            >>> a.empty_cache(); a.memory_reserved()
            0
        """
        pid = _DEFAULT_POOL if pool_id is None else check_pool_id(pool_id)
        with self._lock:
            if self._gc_pending:
                self._drain_pending_locked()
            self._release_cached_blocks(pid)

    # ------------------------------------------------------------------ rounding, pools
    def _round_size(self, size: int) -> int:
        if size < K_MIN_BLOCK:
            return K_MIN_BLOCK
        divs = self._roundup_divisions
        d = 0
        if divs is not None:
            idx = size.bit_length() - 1 - 20
            d = divs[0 if idx < 0 else (min(idx, 15))]
        if d > 1 and size > K_MIN_BLOCK * d:
            return _roundup_power2_next_division(size, d)
        return (size + 511) & -512

    def round_size(self, size: int) -> int:
        """The size a request of ``size`` bytes occupies (PyTorch's ``round_size``)."""
        size = _check_size(size)
        with self._lock:
            return self._round_size(size) if self._roundup_divisions is not None else \
                max(K_MIN_BLOCK, (size + 511) & -512)

    def _allocation_size(self, rounded: int) -> int:
        if rounded <= K_SMALL_SIZE:
            return K_SMALL_BUFFER
        if rounded < K_MIN_LARGE_ALLOC:
            return self._large_segment_size
        return -(-rounded // K_ROUND_LARGE) * K_ROUND_LARGE

    # ------------------------------------------------------------------ free lists
    def _insert_free(self, b: Block) -> None:
        pool = b.pool
        fl_add(pool.free, b.stream, (b.size << KEY_SHIFT) | b.addr)
        b.gc_base = pool.gc_calls

    def _remove_free(self, b: Block) -> None:
        fl_remove(b.pool.free[b.stream], (b.size << KEY_SHIFT) | b.addr)

    def _get_free_block(self, pool: BlockPool, stream: int, rounded: int) -> Block | None:
        if self._gc_on:
            pool.gc_calls += 1
        fl = pool.free.get(stream)
        if not fl:
            return None
        blocks = self._blocks
        keys = fl_iter_ge(fl, rounded << KEY_SHIFT)
        key = next(keys, -1)
        if key < 0:
            return None
        blk = blocks[key & ADDR_MASK]
        if blk.exp is not None:
            if self._expandable:
                # among expandable candidates, prefer the one whose size including the
                # unmapped range after it is smallest (PyTorch's expandable best fit)
                size = blk.size
                nx = blk.next
                esize = size + (nx.size if nx is not None and not nx.mapped else 0)
                for k in keys:
                    nb = blocks[k & ADDR_MASK]
                    nx = nb.next
                    nsize = nb.size + (nx.size if nx is not None and not nx.mapped else 0)
                    if nsize < esize:
                        key = k
                        blk = nb
                        esize = nsize
                        if nb.exp is None:
                            break
                    else:
                        break
            else:
                for k in keys:
                    blk = blocks[k & ADDR_MASK]
                    if blk.exp is None:
                        key = k
                        break
                else:
                    return None
        bsize = blk.size
        mss = self._max_split_size
        if rounded < mss:
            if bsize >= mss:
                return None
        elif bsize >= rounded + self._max_non_split_rounding:
            return None
        fl_remove(fl, key)
        return blk

    # ------------------------------------------------------------------ allocation
    def _alloc_slow(self, pool: BlockPool, stream: int, rounded: int,
                    frames: list[dict[str, Any]] | None) -> Block | None:
        alloc_size = self._allocation_size(rounded)
        if self._expandable and not self.vm_supported():
            raise self._vm_error()
        if self._gc_on:
            self._garbage_collect()
        self._rejected = False
        blk = self._alloc_block(pool, stream, rounded, alloc_size, False, frames)
        if blk is not None or self._rejected:
            return blk
        if self._release_available_cached_blocks(pool, stream, rounded):
            blk = self._alloc_block(pool, stream, rounded, alloc_size, False, frames)
            if blk is not None:
                return blk
        if not self._captures:
            self._check_retry_sync()   # sync debug mode: the release below waits for events
            self._release_cached_blocks(_DEFAULT_POOL)
            return self._alloc_block(pool, stream, rounded, alloc_size, True, frames)
        return None

    def _alloc_block(self, pool: BlockPool, stream: int, rounded: int, alloc_size: int,
                     is_retry: bool, frames: list[dict[str, Any]] | None) -> Block | None:
        st = self._stats
        if is_retry:
            st.num_alloc_retries += 1
        if self._allowed_max is not None and self._total_reserved + alloc_size > self._allowed_max:
            if self._cfg.throw_on_malloc_oom:
                # PyTorch 2.14's throw_on_cudamalloc_oom: reject at once, no cache release
                st.num_oom_rejections += 1
                self._rejected = True
            return None
        if self._expandable and (pool.owner is None or pool.owner.allocator is None):
            return self._try_allocate_expandable(pool, stream, rounded, frames)
        if self._cfg.release_lock_on_malloc:
            # release_lock_on_cudamalloc: other threads may use the allocator meanwhile; the
            # new segment is not visible to them until it is linked below.
            self._lock.release()
            try:
                ptr = self._raw_malloc(pool, alloc_size, stream)
            finally:
                self._lock.acquire()
        else:
            ptr = self._raw_malloc(pool, alloc_size, stream)
        if not ptr:
            return None
        blk = Block(ptr, alloc_size, stream, pool)
        blk.seg_frames = frames
        self._blocks[ptr] = blk
        self._total_reserved += alloc_size
        if pool.owner is not None:
            pool.owner.reserved += alloc_size
        ti = pool.type_index
        st.segment[0].increase(1)
        st.segment[ti].increase(1)
        st.reserved_bytes[0].increase(alloc_size)
        st.reserved_bytes[ti].increase(alloc_size)
        if alloc_size >= self._max_split_size:
            st.oversize_segments.increase(1)
        st.num_device_alloc += 1
        if self._history:
            self._record("segment_alloc", ptr, alloc_size, stream,
                         frames if self._ctx >= CTX_ALLOC else None)
        return blk

    # ------------------------------------------------------------------ freeing
    def _free_block(self, blk: Block, pending: bool) -> None:
        """Free *completed*: merge with free neighbours and cache the block.

        The merge of :meth:`_merge_neighbours` is inlined here (the hot path): ``blk`` is
        mapped, so only free mapped neighbours of the same pool and stream can merge.
        :meth:`free` inlines this method once more for the common case (no history, no
        recorded streams); a change to the merge or its stats must be made in both places
        (the stateful and lazy-stats tests compare them with the model).
        """
        orig_size = blk.size
        req = blk.requested
        st = self._stats
        if self._history:
            # a direct free carries the freeing call's stack with context="all" (PyTorch)
            self._record("free_completed", blk.addr, req, blk.stream, capture_frames()
                         if self._ctx >= CTX_ALL and not pending else blk.frames)
        blk.stream_uses = None
        pool = blk.pool
        stream = blk.stream
        c = pool.hot
        if st.dirty:
            st.settle()
        fl = pool.free.get(stream)
        if fl is None:
            fl = pool.free[stream] = []
        b = blk
        prev = blk.prev
        nx = blk.next
        if prev is not None or nx is not None:
            merged = 0
            merged_bytes = 0
            if (prev is not None and not prev.allocated and not prev.event_count
                    and not prev.stream_uses and prev.mapped):
                psize = prev.size
                fl_remove(fl, (psize << KEY_SHIFT) | prev.addr)
                merged = 1
                merged_bytes = psize
                del self._blocks[blk.addr]
                prev.size = psize + orig_size
                prev.next = nx
                if nx is not None:
                    nx.prev = prev
                prev.requested = req
                prev.frames = blk.frames
                b = prev
                self._spares.append(blk)
            if (nx is not None and not nx.allocated and not nx.event_count
                    and not nx.stream_uses and nx.mapped):
                nsize = nx.size
                fl_remove(fl, (nsize << 64) | nx.addr)
                merged += 1
                merged_bytes += nsize
                del self._blocks[nx.addr]
                b.size += nsize
                nn = nx.next
                b.next = nn
                if nn is not None:
                    nn.prev = b
                self._spares.append(nx)
            if blk.exp is None:
                net_n = -merged
                net_b = -merged_bytes
                if b.prev is not None or b.next is not None:
                    net_n += 1
                    net_b += b.size
                if (net_n < 0 or net_b < 0) and st.dirty_split:
                    st.settle_split()
                if net_n:
                    c.inactive_split += net_n
                    if net_n > 0:
                        c.inactive_split_sum += net_n
                        st.dirty_split = True
                if net_b:
                    c.inactive_split_bytes += net_b
                    if net_b > 0:
                        c.inactive_split_bytes_sum += net_b
                        st.dirty_split = True
        fl_add(pool.free, stream, (b.size << KEY_SHIFT) | b.addr)
        b.gc_base = pool.gc_calls
        c.requested_bytes -= req
        if pending:
            c.pending_frees -= 1
            c.pending_bytes -= orig_size

    # ------------------------------------------------------------------ fraction
    def _set_fraction_locked(self, fraction: float) -> None:
        self._allowed_max = None if fraction == 1.0 else int(fraction * self._device_total)
        self._gc_on = self._gc_threshold > 0.0 and self._allowed_max is not None
        self._update_simple()

    def set_memory_fraction(self, fraction: float) -> None:
        """Limit this process's reserved memory on the device to ``fraction`` of its total.

        Raises:
            TypeError: ``fraction`` is not a float.
            ValueError: ``fraction`` is outside [0, 1].

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> a.set_memory_fraction(0.5); a.get_memory_fraction()
            0.5
        """
        if not isinstance(fraction, float):
            raise TypeError(f"Invalid type for fraction argument, must be `float`, got "
                            f"{type(fraction).__name__}")
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
        with self._lock:
            self._set_fraction_locked(fraction)

    def get_memory_fraction(self) -> float:
        """The fraction set by :meth:`set_memory_fraction` (1.0 when unlimited)."""
        allowed = self._allowed_max
        return 1.0 if allowed is None else allowed / self._device_total

    # ------------------------------------------------------------------ statistics
    def stats(self) -> dict[str, int]:
        """PyTorch's flat ``memory_stats`` dict (unsorted).

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> a.free(a.malloc(1000, 0))
            >>> a.stats()["requested_bytes.small_pool.freed"]
            1000
        """
        with self._lock:
            if self._gc_pending:
                self._drain_pending_locked()
            vals = self._stats.flat_values()
        return dict(zip(FLAT_KEYS, vals))

    def sorted_stats(self) -> collections.OrderedDict[str, int]:
        """:meth:`stats` as an ``OrderedDict`` sorted by key (``memory_stats()``).

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> st = a.sorted_stats()
            >>> list(st) == sorted(st), st == a.stats()
            (True, True)
        """
        with self._lock:
            if self._gc_pending:
                self._drain_pending_locked()
            vals = self._stats.sorted_values()
        return collections.OrderedDict(zip(SORTED_KEYS, vals))

    def memory_allocated(self) -> int:
        """``allocated_bytes.all.current``."""
        if self._gc_pending:
            self.drain_pending()
        h = self._stats.hot
        return h[1].allocated_bytes + h[2].allocated_bytes

    def max_memory_allocated(self) -> int:
        """``allocated_bytes.all.peak``."""
        with self._lock:
            if self._gc_pending:
                self._drain_pending_locked()
            return self._stats.max_allocated_bytes()

    def memory_reserved(self) -> int:
        """``reserved_bytes.all.current``."""
        return self._stats.reserved_bytes[0].current

    def max_memory_reserved(self) -> int:
        """``reserved_bytes.all.peak``."""
        return self._stats.reserved_bytes[0].peak

    def reset_peak_stats(self) -> None:
        """Set every peak to its current value."""
        with self._lock:
            if self._gc_pending:
                self._drain_pending_locked()
            self._stats.reset_peak()

    def reset_accumulated_stats(self) -> None:
        """Zero every ``allocated``/``freed`` sum and the ``num_*`` counters."""
        with self._lock:
            self._stats.reset_accumulated()

    # ------------------------------------------------------------------ introspection
    @property
    def device_index(self) -> int:
        return self._index

    @property
    def backend(self) -> Any:
        return self._b

    def __repr__(self) -> str:
        return (f"<DeviceCachingAllocator {self._name}:{self._index} allocated="
                f"{self.memory_allocated()} reserved={self.memory_reserved()}>")


def _report_finalizer_error(item: object, e: BaseException) -> None:
    what = f"free of pointer {item:#x}" if isinstance(item, int) else f"release_pool({item})"
    import logging   # the "accelrt" logger; with no handler configured it reaches stderr
    logging.getLogger("accelrt.memory").error("Exception ignored in a queued finalizer %s:", what,
                                              exc_info=(type(e), e, e.__traceback__))


def _roundup_power2_next_division(size: int, divisions: int) -> int:
    if size & (size - 1) == 0:
        return size
    floor_pow2 = 1 << (size.bit_length() - 1)
    step = floor_pow2 >> (divisions.bit_length() - 1)
    if step == 0:
        return 2 * floor_pow2
    f = size & ~(step - 1)
    return size if f == size else f + step


# ---------------------------------------------------------------------- registry

_lock = reinit_after_fork(threading.Lock())
_allocators: dict[tuple[str, int], DeviceCachingAllocator] = {}   # guarded by _lock


def get_allocator(backend: Backend, index: int) -> DeviceCachingAllocator:
    """The caching allocator of device ``index`` of ``backend`` (created on first use).

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import get_allocator
        >>> a = get_allocator(get_backend("cpu"), 0)
        >>> a is get_allocator(get_backend("cpu"), 0)
        True
    """
    key = (backend.name, index)
    a = _allocators.get(key)
    if a is None:
        cfg = get_config()  # outside _lock: set_allocator_settings takes the locks the other way
        with _lock:
            a = _allocators.get(key)
            if a is None:
                plug = sys.modules.get("accelrt.memory._pluggable")   # change_current_allocator
                a = plug._make_allocator(backend, index) if plug is not None else None
                if a is None:
                    a = DeviceCachingAllocator(backend, index, cfg)
                _allocators[key] = a
        latest = get_config()
        if latest is not cfg:  # settings changed while it was being created
            a.set_config(latest)
    return a


def peek_allocator(name: str, index: int) -> DeviceCachingAllocator | None:
    """The allocator of ``name:index`` if it was created, else ``None``.

    Example::

        >>> from accelrt.memory._allocator import peek_allocator
        >>> peek_allocator("nosuchbackend", 0) is None
        True
    """
    return _allocators.get((name, index))


def all_allocators() -> list[DeviceCachingAllocator]:
    """Every allocator created so far."""
    with _lock:
        return list(_allocators.values())


def _check_config_for_all(cfg: AllocatorConfig) -> None:
    if cfg.expandable_segments:
        for a in all_allocators():
            if not a.vm_supported():
                raise a._vm_error()


def _apply_config_to_all(cfg: AllocatorConfig) -> None:
    for a in all_allocators():
        a.set_config(cfg)
