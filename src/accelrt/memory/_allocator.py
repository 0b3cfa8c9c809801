"""The device-agnostic caching allocator (PyTorch's CUDA caching allocator, in Python).

One :class:`DeviceCachingAllocator` per (backend, device), created lazily by
:func:`get_allocator`. It reproduces PyTorch's observable behaviour: size rounding, small and
large pools, best-fit lookup per stream, splitting and merging, the oversize rules, the
free-and-retry chain before an out-of-memory error, garbage collection, the per-process memory
fraction, stream-ordered frees, private pools, expandable segments, statistics, snapshots and
the history trace (see ``ALLOCATOR_SPEC.md``).

This module holds the policy: :meth:`~DeviceCachingAllocator.malloc` and
:meth:`~DeviceCachingAllocator.free` (each trying its named fast paths, :mod:`._fast`, before
the general code), the general paths ``_malloc_locked`` / ``_free_locked``, rounding, the one
split (``_cut_block``) and the one merge (``_merge``), the deferred free, the lock protocol
and the settings. Each other concern is a module of its own that the methods call:
:mod:`._fit` (best fit, new segments, completing a free), :mod:`._pools` (private pools),
:mod:`._history` (the trace), :mod:`._stats` (counters and their getters), :mod:`._segments`
(snapshots), :mod:`._release` (release and garbage collection), :mod:`._events`
(stream-ordered frees), :mod:`._expandable` (expandable segments, ``page_reuse``),
:mod:`._oom` (OOM messages, observers), :mod:`._uncached` (caching off) and
:mod:`._registry` (one allocator per device; its names are importable from here too).
The components use the allocator only through :class:`._interface.AllocatorCore`.

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
from collections.abc import Callable, Iterable
from queue import Empty as _Empty
from typing import Any, Final, SupportsIndex, cast

import numpy as np

from .._backend import Backend
from .._errors import OutOfMemoryError, type_shown
from .._stream_callback import refuse
from .._fork import hold_across_fork
from ._block import (
    DEFAULT_POOL,
    K_MIN_BLOCK,
    K_MIN_LARGE_ALLOC,
    K_ROUND_LARGE,
    K_SMALL_BUFFER,
    K_SMALL_SIZE,
    Block,
    BlockPool,
    count_alloc,
    fl_add,
    fl_remove,
    mergeable,
    roundup_power2_next_division,
    unmapped_remove,
)
from ._block_map import BlockMap
from ._config import NO_SPLIT_LIMIT, AllocatorConfig, check_fraction, get_config, reported_size
from ._events import StreamFrees, record_stream
from ._expandable import ExpandableSegments
from ._fast import defer_free, free_cached, malloc_cached, reuse_deferred
from ._fit import alloc_slow, free_block, get_free_block
from ._history import (
    CTX_ALL,
    CTX_ALLOC,
    History,
    capture_frames,
    record_annotation,
    record_history,
    trace_entries,
)
from ._lock import FastLock, StreamWait
from ._oom import OomReporter, format_size
from ._pools import (
    EndRouting,
    PrivatePools,
    begin_allocate_to_pool,
    check_pool_id,
    create_pool,
    end_allocate_to_pool,
    end_allocate_to_pool_from_finalizer,
    in_capture_context,
    pool_use_count,
    release_pool,
    release_pool_from_finalizer,
    report_finalizer_error,
    settle_pending,
)
# the registry's names, importable from here as before (tests and modules patch them there)
from ._registry import (  # noqa: F401  (re-exported: the names' old home)
    _allocators as _allocators,
    _apply_config_to_all as _apply_config_to_all,
    _cache_disabled as _cache_disabled,
    _check_config_for_all as _check_config_for_all,
    _lock as _lock,
    _retire_after_fork as _retire_after_fork,
    _warn_fallbacks as _warn_fallbacks,
    _wants_pool as _wants_pool,
    all_allocators as all_allocators,
    caching_enabled as caching_enabled,
    get_allocator as get_allocator,
    peek_allocator as peek_allocator,
    set_caching as set_caching,
)
from ._release import empty_collected_pools, release_cached_blocks
from ._segments import recount_oversize, segment_of, snapshot_segments
from ._uncached import UncachedRequests
from ._stats import (
    DeviceStats,
    HotCounters,
    flat_stats,
    max_memory_allocated,
    reset_accumulated_stats,
    reset_peak_stats,
    sorted_stats,
)

__all__ = ["DeviceCachingAllocator", "format_size", "get_allocator", "peek_allocator"]

_MAX_ALLOC: Final = 1 << 60
# The fast paths of malloc and free spell these constants as literals (a constant load instead
# of a global load on every call).
assert (K_MIN_BLOCK, K_SMALL_SIZE) == (512, 1 << 20)
_DEFAULT_POOL: Final = DEFAULT_POOL
#: What the fast path of free finds for an address that is no block's: a block that is not
#: allocated (the general path then raises the error).
#: The pure build: its ``_blocks`` is a ``dict``, which takes ``4096.0`` or numpy's ``int64``
#: for the int, so ``free`` tests a pointer's type first (the compiled build's is an int).
_PURE: Final = __file__.endswith(".py")

_NO_BLOCK: Final = Block(0, 0, 0, BlockPool(True, None, HotCounters(), 1))


def _check_size(size: object) -> int:
    if isinstance(size, (bool, np.bool_)) or not hasattr(size, "__index__"):
        raise TypeError(f"allocation size must be an int, got {type_shown(size)}")
    return operator.index(size)


class DeviceCachingAllocator:
    """The caching allocator of one device of one backend.

    Args:
        backend: the :class:`~accelrt.backends.Backend` owning the device.
        index: the device index (already range-checked).
        config: options; default: the process-wide ones (``ACCELRT_ALLOC_CONF``).
        warn: :meth:`warn_if_fallback` at once (the registry, which creates allocators under
            its lock, passes ``False`` and warns after releasing it).

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

    #: what ``get_allocator_backend()`` says for this allocator's backend
    allocator_backend: str = "native"

    def __init__(self, backend: Backend, index: int, config: AllocatorConfig | None = None,
                 *, warn: bool = True) -> None:
        cfg = config if config is not None else get_config()
        self._b = backend                    # immutable
        self._index = index                  # immutable
        self._name: str = backend.name       # immutable
        self._lock = hold_across_fork(FastLock())
        self._acquire = self._lock.acquire   # (contended: try _acquire_nowait first)
        self._release = self._lock.put                     # put(None) releases
        self._try_acquire = self._lock.try_acquire
        self._acquire_nowait = self._lock.acquire_nowait   # raises queue.Empty if held
        # Frees (int addresses), private-pool releases (pool ids) and ends of a routing
        # (EndRouting) requested by finalizers while the lock was held, possibly by their own
        # thread (see free_from_finalizer). Appended without the lock (deque.append is
        # atomic); drained under _lock.
        self._gc_pending: collections.deque[int | tuple[int, int] | EndRouting] = \
            collections.deque()
        # Private pools whose cached memory a collected MemPool's finalizer gives back once its
        # queued release is done (appended before that release, so a drain that sees the
        # release sees this too); drained under _lock.
        self._gc_empty: collections.deque[tuple[int, int]] = collections.deque()
        # guarded by _lock: Block objects merged away, reused by splits (at most as many as
        # the most blocks ever alive at once)
        self._spares: list[Block] = []
        # guarded by _lock: the block whose free the fast path of free deferred (see free)
        self._deferred: Block | None = None
        self._defer_misses = 0   # guarded by _lock: deferrals flushed since the last reuse
        self._defer_skip = 0     # guarded by _lock: deferrable frees to skip before the next
        self._device_total: int = int(backend.get_device_properties(index)["total_memory"])
        self._stats = DeviceStats(reported_size(cfg.max_split_size))
        hot = self._stats.hot
        self._small = BlockPool(True, None, hot[1], 1)     # guarded by _lock
        self._large = BlockPool(False, None, hot[2], 2)    # guarded by _lock
        self._blocks: BlockMap[Block] = BlockMap()   # guarded by _lock: every block by address
        self._total_reserved = 0              # guarded by _lock (total_allocated_memory)
        self._allowed_max: int | None = None               # guarded by _lock
        # the components (each guarded by _lock)
        self._history: History | None = None               # set while recording history
        self._stream_frees = StreamFrees(self)
        self._pools = PrivatePools(self._stats)
        self._expandable_segments = ExpandableSegments(self)
        self._oom = OomReporter(self)
        self._rejected = False                             # guarded by _lock: last slow path
        # guarded by _lock: caching on (caching_allocator_enable); while off, requests come
        # straight from the backend and go back to it at their free, outside the statistics
        self._cache_on = backend.name not in _cache_disabled
        # guarded by _lock: the allocations made while caching was off
        self._uncached = UncachedRequests(backend, index, backend.name)
        self._set_config_locked(cfg)
        if cfg.per_process_memory_fraction is not None:
            self._set_fraction_locked(cfg.per_process_memory_fraction)
        if warn:
            self.warn_if_fallback()

    # ------------------------------------------------------------------ configuration
    def _set_config_locked(self, cfg: AllocatorConfig) -> None:
        # every option below is guarded by _lock
        self._cfg = cfg
        # (compared as NO_SPLIT_LIMIT when unlimited: see there)
        new_split = min(cfg.max_split_size, NO_SPLIT_LIMIT)
        old_split = getattr(self, "_max_split_size", new_split)
        self._max_split_size = new_split
        if old_split != new_split:
            recount_oversize(self, old_split)
        self._max_non_split_rounding = cfg.max_non_split_rounding_size
        self._large_segment_size = cfg.large_segment_size
        divs = cfg.roundup_power2_divisions
        self._roundup_divisions: tuple[int, ...] | None = (
            divs if any(d > 1 for d in divs) else None)
        self._gc_threshold = cfg.garbage_collection_threshold     # guarded by _lock
        # a request: without virtual memory, ordinary segments and no page_reuse (PyTorch's
        # expandable_segments() is False where it cannot; supported() was asked unlocked)
        self._expandable = (cfg.expandable_segments
                            and self._expandable_segments.supported())  # guarded by _lock
        self._page_reuse = cfg.page_reuse and self._expandable          # guarded by _lock
        self._gc_on = self._gc_threshold > 0.0 and getattr(self, "_allowed_max", None) is not None
        self._update_simple()

    def _update_simple(self) -> None:
        # No option that changes a lookup or a malloc's book-keeping is in force: no oversize
        # limit, GC threshold, power-of-two rounding, history, waiting frees or capture.
        plain = (self._max_split_size == NO_SPLIT_LIMIT and not self._gc_on
                 and self._roundup_divisions is None and self._history is None
                 and not self._stream_frees.waiting() and not self._pools.captures
                 and self._cache_on)
        # True when the best-fit lookup needs no oversize, GC or expandable handling.
        self._simple = (self._max_split_size == NO_SPLIT_LIMIT and not self._gc_on
                        and not self._expandable
                        and not self._expandable_segments.segments)  # guarded by _lock
        # True when malloc needs nothing but rounding and the plain lookup (guarded by _lock)
        self._fast = plain and self._simple
        self._fast_flags()

    def _fast_flags(self) -> None:
        # The flags the hot paths test, each in one attribute load (guarded by _lock):
        # malloc's fast path runs while _fast holds and no free is deferred; free's while no
        # history is recorded and no free is deferred (then _free_locked completes it first).
        deferred = self._deferred is not None
        self._fast_malloc = self._fast and not deferred
        self._free_slow = self._history is not None or deferred

    def vm_supported(self) -> bool:
        """True if the backend can map virtual memory on this device (expandable segments)."""
        return self._expandable_segments.supported()

    @property
    def expandable(self) -> bool:
        """True if new segments are expandable: ``expandable_segments:True`` is in force and
        the device has virtual memory (without it the allocator uses ordinary segments)."""
        return self._expandable

    def warn_if_fallback(self) -> None:
        """Warn once per backend if expandable segments are asked for and this device has no
        virtual memory (:meth:`._expandable.ExpandableSegments.warn_fallback`); no lock held."""
        if self.allocator_backend == "native":
            self._expandable_segments.warn_fallback()

    def set_config(self, cfg: AllocatorConfig) -> None:
        """Apply new options (PyTorch applies runtime settings to existing allocators), then
        :meth:`warn_if_fallback` (such a device keeps ordinary segments)."""
        self.configure(cfg)
        self.warn_if_fallback()

    def configure(self, cfg: AllocatorConfig) -> None:
        """:meth:`set_config` without its warning (``_registry`` applies new options to every
        allocator first, then warns)."""
        if cfg.expandable_segments:
            self.vm_supported()      # the backend asked once, outside the lock
        with self._lock:
            self._flush_deferred()   # (before any setting changes: it frees under the old)
            self._set_config_locked(cfg)

    @property
    def config(self) -> AllocatorConfig:
        """The options in force."""
        return self._cfg

    # ------------------------------------------------------------------ public: allocation
    def malloc(self, size: SupportsIndex, stream: int = 0) -> int:
        """Allocate ``size`` bytes for use on ``stream`` (a raw stream handle).

        Returns:
            The address, or 0 for ``size == 0``.

        Raises:
            TypeError: ``size`` is not an int.
            ValueError: ``size`` is negative.
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
        if type(size) is not int or size <= 0:
            size = self._check_request(size)
            if size == 0:
                return 0
        try:
            self._acquire_nowait()
        except _Empty:
            self._acquire()
        try:
            # The named fast paths, each the general code (_malloc_locked) written out for one
            # common case; each returns 0 where the general code must run instead.
            if self._fast_malloc:
                addr = malloc_cached(self, size, stream)
            elif self._deferred is not None:
                addr = reuse_deferred(self, size, stream)
            else:
                addr = 0
            if addr:
                return addr
            res: int | tuple[str, int, int, int, int]
            if size >= _MAX_ALLOC:
                res = 0    # (raised below, without the lock)
            else:
                res = self._malloc_locked(size, stream)
        finally:
            self._release(None)
        if not res:
            self._check_request(size)   # more than 1 EB: raises
        if type(res) is int:
            return res
        self._oom.raise_oom(*cast("tuple[str, int, int, int, int]", res))  # not an int: OOM
        raise AssertionError("unreachable")

    def _malloc_locked(self, size: int, stream: int) -> int | tuple[str, int, int, int, int]:
        """:meth:`malloc` with every option considered (``_lock`` held): the address, or the
        arguments of :meth:`OomReporter.raise_oom`."""
        if not self._cache_on:
            if self._gc_pending:
                self._drain_pending_locked()
            return self._uncached.malloc(size, stream)
        if self._deferred is not None:
            self._flush_deferred()
        if self._gc_pending:
            self._drain_pending_locked()
        if self._roundup_divisions is None:
            rounded = (size + K_MIN_BLOCK - 1) & -K_MIN_BLOCK
        else:
            rounded = self._round_size(size)
        pools = self._pools
        # no event processing in a thread whose current stream captures (PyTorch 2.15's
        # is_capture_context(): not for use_mem_pool, nor for other threads meanwhile)
        if not pools.capturing or not in_capture_context(self):
            frees = self._stream_frees
            if frees.events or frees.deferred:
                frees.process()
        routed = pools.pool_for(rounded, stream) if pools.captures else None
        # the low-fragmentation policy serves every request from the large pool: it maps
        # memory page by page, so the small pool's reason (small blocks kept out of large
        # segments) is gone, and one pool lets small blocks fill the partial pages and
        # holes that large blocks leave (docs/memory.md, rule 6)
        pool = routed if routed is not None else (
            self._small if rounded <= K_SMALL_SIZE and not self._page_reuse else self._large)
        h = self._history
        frames = capture_frames() if h is not None and h.context else None
        blk = get_free_block(self, pool, stream, rounded)
        if blk is None:
            blk = alloc_slow(self, pool, stream, rounded, frames)
            if blk is None:
                if self._rejected:
                    return self._oom.prepare_rejection(rounded, size)
                return self._oom.prepare_oom(stream, rounded, frames, size, pool.owner_id(),
                                             pool.owner is not None and pool.owner.allocator)
            pool = blk.pool   # (a use_on_oom pool's cached block: alloc_slow's last resort)
        remaining = blk.size - rounded
        if (self._page_reuse and remaining >= K_MIN_BLOCK and blk.exp is not None
                and pool.owner is None and blk.next is not None and blk.next.allocated
                and not (blk.prev is not None and blk.prev.allocated)):
            # the low-fragmentation policy places a block against its live neighbour, where
            # it shares that neighbour's page and mapping instead of pinning free ones
            # (docs/memory.md, rule 7): only the next block is live, so take the tail
            tail = self._cut_block(blk, remaining)
            self._insert_free(blk)
            blk = tail
            remaining = 0
        if remaining >= K_MIN_BLOCK and not pool.no_split and (
                pool.is_small or self._expandable
                or (rounded < self._max_split_size and remaining > K_SMALL_SIZE)):
            # split: the remainder is cached; inactive_split counts it (not for expandable
            # segments, as in PyTorch), its peaks updated at once
            was_split = blk.prev is not None or blk.next is not None
            rest = self._cut_block(blk, rounded)
            fl_add(pool, stream, rest)
            rest.gc_base = pool.gc_calls
            if blk.exp is None:
                c = pool.hot
                if was_split:
                    st = self._stats
                    if st.dirty_split:
                        st.settle_split()
                    c.inactive_split_bytes -= rounded
                else:
                    c.count_split(remaining)
        elif blk.exp is None and (blk.next is not None or blk.prev is not None):
            # an inactive split block is taken whole
            st = self._stats
            if st.dirty_split:
                st.settle_split()
            c = pool.hot
            c.inactive_split_bytes -= blk.size
            c.inactive_split -= 1
        count_alloc(blk, size)
        if blk.size >= self._max_split_size:
            self._stats.oversize_allocations.increase(1)
        addr = blk.addr
        if frames is not None:
            blk.frames = frames
        if h is not None:
            h.record("alloc", addr, size, stream, frames if h.context >= CTX_ALLOC else None,
                     pool_id=blk.pool.owner_id())
        return addr

    # ------------------------------------------------------------------ split and merge
    def _cut_block(self, blk: Block, size: int, mapped: bool = True) -> Block:
        """The one split of a block: ``blk`` keeps its first ``size`` bytes and the rest
        becomes a new block right after it in the same segment (same stream, pool and
        expandable segment; ``mapped`` as given), registered in ``_blocks`` and in no list.
        Reuses a block object left by :meth:`_merge`. Returns the new block."""
        addr = blk.addr + size
        rest_size = blk.size - size
        spares = self._spares
        if spares:
            rest = spares.pop()
            rest.addr = addr
            rest.size = rest_size
            rest.stream = blk.stream
            rest.pool = blk.pool
            rest.exp = blk.exp
            rest.mapped = mapped
            rest.requested = 0
            rest.frames = None
        else:
            rest = Block(addr, rest_size, blk.stream, blk.pool, blk.exp, mapped)
        nx = blk.next
        rest.prev = blk
        rest.next = nx
        if nx is not None:
            nx.prev = rest
        blk.next = rest
        blk.size = size
        self._blocks[addr] = rest
        return rest

    def _merge(self, b: Block) -> tuple[Block, int, int]:
        """The one merge of blocks: merge ``b`` (in no list) with its mergeable neighbours,
        taking them out of their lists. Returns the surviving block (in no list), how many
        neighbours merged into it, and their bytes.

        Neighbours merge when neither is allocated, awaiting events or recorded on other
        streams, and both are mapped or both unmapped (PyTorch's ``try_merge_blocks``). Block
        objects merged away go to ``_spares`` for :meth:`_cut_block` to reuse.
        """
        merged = 0
        nbytes = 0
        mapped = b.mapped
        prev = b.prev
        if mergeable(prev, mapped):
            assert prev is not None
            nbytes = prev.size
            self._unlist(prev, mapped)
            prev.requested = b.requested
            prev.frames = b.frames
            self._join(prev, b, mapped)
            merged = 1
            b = prev
        nx = b.next
        if mergeable(nx, mapped):
            assert nx is not None
            nbytes += nx.size
            self._unlist(nx, mapped)
            self._join(b, nx, mapped)
            merged += 1
        return b, merged, nbytes

    def _unlist(self, b: Block, mapped: bool) -> None:
        """Take free block ``b`` out of its free list (``mapped``) or unmapped list."""
        if mapped:
            fl_remove(b.pool.free[b.stream], b.size, b.addr)
        else:
            unmapped_remove(b)

    def _join(self, left: Block, right: Block, mapped: bool) -> None:
        """Merge block ``right`` (in no list) into ``left``, the block before it; a mapped
        ``right`` goes to ``_spares`` (the fast path of malloc reuses spares as mapped
        blocks)."""
        left.size += right.size
        nn = right.next
        left.next = nn
        if nn is not None:
            nn.prev = left
        del self._blocks[right.addr]
        if mapped:
            self._spares.append(right)

    def _check_request(self, size: object) -> int:
        """Validate a ``malloc`` size outside the fast range: 0, or raise."""
        size = _check_size(size)
        if size < 0:
            raise ValueError(f"allocation size must be >= 0, got {size}")
        if size >= _MAX_ALLOC:
            raise OutOfMemoryError(
                f"{self._name.upper()} out of memory. Tried to allocate more than 1EB memory.",
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
            if not self._lock_or_queue(ptr):
                return
        else:
            try:
                self._acquire_nowait()
            except _Empty:
                self._acquire()
        try:
            try:
                blk = _NO_BLOCK if _PURE and type(ptr) is not int else self._blocks[ptr]  # (_PURE)
            except KeyError:
                blk = _NO_BLOCK   # (not allocated: _free_locked raises the error)
            if not blk.allocated or blk.stream_uses is not None or self._free_slow:
                # not allocated here, used on other streams, history recorded or a free
                # deferred (_free_locked completes it first): the general code
                self._free_locked(ptr)
            elif not (blk.prev is None and self._fast and defer_free(self, blk)):
                free_cached(self, blk)
        finally:
            self._release(None)

    def _lock_or_queue(self, ptr: int) -> bool:
        """Take the lock for a nonblocking :meth:`free` of ``ptr``: True once held (with the
        frees that finalizers queued done), False if another holder had it and the free was
        queued instead."""
        try:
            self._acquire_nowait()
        except _Empty:
            self._gc_pending.append(ptr)
            # The holder may have passed its last drain point before the append: if the
            # lock is free now, drain here.
            self.drain_pending()
            return False
        if self._gc_pending:
            try:
                self._drain_pending_locked()
            except BaseException:
                self._release(None)
                raise
        return True

    def _flush_deferred(self) -> None:
        """Complete the free that the fast path of :meth:`free` deferred (``_lock`` held),
        through the general code, as if it ran then: nothing changed the allocator since,
        for every path that reads or changes blocks, free lists, statistics or settings, except
        the immediate reuse in :meth:`malloc`, calls this first."""
        blk = self._deferred
        if blk is None:
            return
        self._deferred = None
        self._fast_flags()
        misses = self._defer_misses + 1     # not reused: defer less often for a while
        self._defer_misses = misses
        self._defer_skip = (1 << misses) - 1 if misses < 6 else 63
        blk.allocated = True
        self._free_locked(blk.addr)

    def settle_locked(self) -> None:
        """Bring the state up to date (``_lock`` held): complete a deferred free and the frees
        and pool releases that finalizers queued. Every locked operation that reads or changes
        blocks, statistics or settings calls this (or :meth:`_flush_deferred`) first."""
        self._flush_deferred()
        if self._gc_pending:
            self._drain_pending_locked()

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
        """Complete the frees and pool releases queued by finalizers, then give back the cached
        memory of the pools their MemPool's finalizer asked for (``_lock`` held)."""
        q = self._gc_pending
        while q:
            item = q.popleft()
            try:
                if type(item) is int:
                    self._free_locked(item)
                else:
                    settle_pending(self, item)  # type: ignore[arg-type]
            except Exception as e:  # noqa: BLE001 - a finalizer's error is only reported
                report_finalizer_error(item, e)
        if self._gc_empty:
            empty_collected_pools(self)

    def drain_pending(self) -> bool:
        """Complete the frees queued by finalizers, and a deferred free, now, unless some
        thread holds the lock.

        Returns:
            True if no finalizer's free is left queued (a deferred free left pending is
            complete for every reader: see :meth:`memory_allocated`).

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> DeviceCachingAllocator(get_backend("cpu"), 0).drain_pending()
            True
        """
        if (self._gc_pending or self._deferred is not None) and self._try_acquire():
            try:
                self._flush_deferred()
                self._drain_pending_locked()
            finally:
                self._release(None)
        return not self._gc_pending

    def _free_locked(self, ptr: int) -> None:
        """:meth:`free` with ``_lock`` held and every option considered (free *requested*)."""
        if self._deferred is not None:
            self._flush_deferred()
        blk = self._block_at(ptr)
        if blk is None or not blk.allocated:
            if blk is None and self._uncached:
                with StreamWait(self._lock):   # (its free waits for the streams that used it)
                    if self._uncached.free(ptr):
                        return
            raise self._bad_ptr(ptr, blk)
        blk.allocated = False
        st = self._stats
        st.settle_grown()
        c = blk.pool.hot
        size = blk.size
        c.allocations -= 1
        c.allocated_bytes -= size
        if size >= self._max_split_size:
            st.oversize_allocations.decrease(1)
        h = self._history
        if h is not None:
            h.record("free_requested", ptr, blk.requested, blk.stream,
                     capture_frames() if h.context >= CTX_ALL else blk.frames,
                     pool_id=blk.pool.owner_id())
        if blk.stream_uses:
            # used on other streams: the free completes after their events
            if not st.pending_seen:
                st.mark_pending()
            c.pending_frees += 1
            c.pending_bytes += size
            self._stream_frees.free_later(blk)
        else:
            free_block(self, blk, False)

    # ------------------------------------------------------------------ caching on/off
    def set_caching(self, enabled: bool) -> None:
        """Turn caching on or off (``caching_allocator_enable``). While it is off, each request
        is a raw allocation of exactly its size from the backend and each free of one gives it
        back at once (after its stream's work), as PyTorch's uncached path: neither is counted
        in the statistics, the snapshot or the history. Cached blocks stay cached; a request
        made while caching was off is freed uncached whenever its free comes."""
        with self._lock:
            self._flush_deferred()
            self._cache_on = bool(enabled)
            self._update_simple()

    @property
    def caching(self) -> bool:
        """True unless :meth:`set_caching` turned caching off."""
        return self._cache_on

    def _block_at(self, ptr: Any) -> Block | None:
        """The block that starts at ``ptr``, or ``None`` (also for a ``ptr`` that is not an int,
        such as ``4096.0``: :meth:`_bad_ptr` then names it)."""
        if not isinstance(ptr, int):
            return None
        return self._blocks.get(ptr)

    def _bad_ptr(self, ptr: object, blk: Block | None) -> Exception:
        if not isinstance(ptr, int) or isinstance(ptr, bool):
            return TypeError(f"pointer must be an int, got {type_shown(ptr)}")
        if blk is None:
            return ValueError(f"pointer {ptr:#x} was not allocated by the {self._name}:"
                              f"{self._index} caching allocator")
        return ValueError(f"pointer {ptr:#x} is not allocated (double free?)")

    def record_stream(self, ptr: int, stream: int, device: int | None = None) -> None:
        """Mark the allocation at ``ptr`` as used on ``stream`` of device ``device`` (default:
        this allocator's; another device of the same backend is allowed): its free waits for
        that stream's work (PyTorch's ``recordStream``; :func:`._events.record_stream`)."""
        record_stream(self, ptr, stream, device)

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
        refuse("empty_cache")   # (it waits for the streams: not from a host function)
        with self._lock:
            self.settle_locked()
            release_cached_blocks(self, pid)

    # ------------------------------------------------------------------ snapshots
    def segment_of(self, ptr: int) -> tuple[int, int, bool] | None:
        """``(segment base, segment size, expandable)`` of the live block at ``ptr``, or ``None``
        (:func:`._segments.segment_of`)."""
        return segment_of(self, ptr)

    def snapshot_segments(self, pool_id: tuple[int, int] | None = None) -> list[dict[str, Any]]:
        """PyTorch's segment dicts (all pools, or only ``pool_id``), sorted by address
        (:func:`._segments.snapshot_segments`)."""
        return snapshot_segments(self, pool_id)

    # ------------------------------------------------------------------ history
    def trace_entries(self) -> list[dict[str, Any]]:
        """The recorded history, oldest first (copies; :func:`._history.trace_entries`)."""
        return trace_entries(self)

    def record_history(self, enabled: str | bool | None, context: str | None = "all",
                       stacks: str = "all", max_entries: int = sys.maxsize,
                       clear_history: bool = False,
                       skip_actions: Iterable[str] | None = None) -> None:
        """Start or stop recording allocation history (PyTorch's ``_record_memory_history``;
        :func:`._history.record_history` documents the arguments)."""
        record_history(self, enabled, context, stacks, max_entries, clear_history, skip_actions)

    def record_annotation(self, metadata: dict[str, Any]) -> None:
        """Append an ``annotate`` trace entry carrying ``metadata`` as user_metadata."""
        record_annotation(self, metadata)

    # ------------------------------------------------------------------ OOM observers
    def attach_oom_observer(self, fn: Callable[[int, int, int, int], None]) -> None:
        """Call ``fn(device, alloc_size, limit, device_free)`` before raising an OOM error
        (PyTorch's ``_attach_out_of_memory_observer``); called without the lock held."""
        self._oom.attach_observer(fn)

    # ------------------------------------------------------------------ private pools
    def begin_allocate_to_pool(self, pool_id: tuple[int, int],
                               stream_filter: Callable[[int], bool] | None = None,
                               capture: bool = False) -> None:
        """Route allocations to private pool ``pool_id``, for a graph capture if ``capture``
        (:func:`._pools.begin_allocate_to_pool`)."""
        begin_allocate_to_pool(self, pool_id, stream_filter, capture)

    def end_allocate_to_pool(self, pool_id: tuple[int, int]) -> None:
        """Stop routing allocations to ``pool_id`` (:func:`._pools.end_allocate_to_pool`)."""
        end_allocate_to_pool(self, pool_id)

    def end_allocate_to_pool_from_finalizer(self, pool_id: tuple[int, int]) -> None:
        """:meth:`end_allocate_to_pool` for finalizers: never blocks
        (:func:`._pools.end_allocate_to_pool_from_finalizer`)."""
        end_allocate_to_pool_from_finalizer(self, pool_id)

    def create_pool(self, pool_id: tuple[int, int], *, no_split: bool = False,
                    allocator: Any = None, use_on_oom: bool = False) -> None:
        """Create private pool ``pool_id`` or take a reference (:func:`._pools.create_pool`)."""
        create_pool(self, pool_id, no_split=no_split, allocator=allocator, use_on_oom=use_on_oom)

    def release_pool(self, pool_id: tuple[int, int]) -> None:
        """Drop one reference to private pool ``pool_id`` (:func:`._pools.release_pool`)."""
        release_pool(self, pool_id)

    def release_pool_from_finalizer(self, pool_id: tuple[int, int], *,
                                    empty_cache: bool = False) -> None:
        """:meth:`release_pool` (then, with ``empty_cache``, ``empty_cache(pool_id)``) for
        finalizers: never blocks (:func:`._pools.release_pool_from_finalizer`)."""
        release_pool_from_finalizer(self, pool_id, empty_cache=empty_cache)

    def pool_use_count(self, pool_id: tuple[int, int]) -> int:
        """References to private pool ``pool_id``, 0 if none
        (:func:`._pools.pool_use_count`)."""
        return pool_use_count(self, pool_id)

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
            return roundup_power2_next_division(size, d)
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
        fl_add(pool, b.stream, b)
        b.gc_base = pool.gc_calls

    def _remove_free(self, b: Block) -> None:
        fl_remove(b.pool.free[b.stream], b.size, b.addr)

    # ------------------------------------------------------------------ fraction
    def _set_fraction_locked(self, fraction: float) -> None:
        self._allowed_max = None if fraction == 1.0 else int(fraction * self._device_total)
        self._gc_on = self._gc_threshold > 0.0 and self._allowed_max is not None
        self._update_simple()

    def set_memory_fraction(self, fraction: object) -> None:
        """Limit this process's reserved memory on the device to ``fraction`` of its total.

        Raises:
            TypeError, ValueError: as :func:`._config.check_fraction`.

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> a.set_memory_fraction(0.5); a.get_memory_fraction()
            0.5
        """
        value = check_fraction(fraction)
        with self._lock:
            self._flush_deferred()
            self._set_fraction_locked(value)

    def get_memory_fraction(self) -> float:
        """The fraction set by :meth:`set_memory_fraction` (1.0 when unlimited)."""
        allowed = self._allowed_max
        return 1.0 if allowed is None else allowed / self._device_total

    # ------------------------------------------------------------------ statistics
    def stats(self) -> dict[str, int]:
        """PyTorch's flat ``memory_stats`` dict, unsorted (:func:`._stats.flat_stats`)."""
        return flat_stats(self)

    def sorted_stats(self) -> collections.OrderedDict[str, int]:
        """:meth:`stats` sorted by key, as ``memory_stats()`` (:func:`._stats.sorted_stats`)."""
        return sorted_stats(self)

    def memory_allocated(self) -> int:
        """``allocated_bytes.all.current``."""
        if self._gc_pending or self._deferred is not None:
            self.drain_pending()
        h = self._stats.hot
        while True:
            # Without the lock (another thread holds it, before it completed a deferred free):
            # the counters still hold the deferred block, so leave it out. Read the block and
            # its size, then the counters, and retry if the deferral changed meanwhile (a
            # thread completed or reused it).
            d = self._deferred
            size = d.size if d is not None else 0
            n: int = h[1].allocated_bytes + h[2].allocated_bytes
            if self._deferred is d:
                return n - size

    def max_memory_allocated(self) -> int:
        """``allocated_bytes.all.peak``."""
        return max_memory_allocated(self)

    def memory_reserved(self) -> int:
        """``reserved_bytes.all.current`` (with the work finalizers queued done: a collected
        MemPool's cached memory is given back)."""
        if self._gc_pending:
            self.drain_pending()
        return self._stats.reserved_bytes[0].current

    def max_memory_reserved(self) -> int:
        """``reserved_bytes.all.peak``."""
        return self._stats.reserved_bytes[0].peak

    def reset_peak_stats(self) -> None:
        """Set every peak to its current value."""
        reset_peak_stats(self)

    def reset_accumulated_stats(self) -> None:
        """Zero every ``allocated``/``freed`` sum and the ``num_*`` counters."""
        reset_accumulated_stats(self)

    # ------------------------------------------------------------------ introspection
    @property
    def backend(self) -> Any:
        """The backend whose device this allocator serves (``accelrt replay`` reads its
        simulated device's driver-call counts)."""
        return self._b

    def __repr__(self) -> str:
        return (f"<DeviceCachingAllocator {self._name}:{self._index} allocated="
                f"{self.memory_allocated()} reserved={self.memory_reserved()}>")
