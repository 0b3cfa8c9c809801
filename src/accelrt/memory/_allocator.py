"""The device-agnostic caching allocator (PyTorch's CUDA caching allocator, in Python).

One :class:`DeviceCachingAllocator` per (backend, device), created lazily by
:func:`get_allocator`. It reproduces PyTorch's observable behaviour: size rounding, small and
large pools, best-fit lookup per stream, splitting and merging, the oversize rules, the
free-and-retry chain before an out-of-memory error, garbage collection, the per-process memory
fraction, stream-ordered frees, private pools, expandable segments, statistics, snapshots and
the history trace (see ``ALLOCATOR_SPEC.md``).

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
import time
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable
from typing import Any

from .._errors import OutOfMemoryError
from ._block import ADDR_MASK, KEY_SHIFT, Block, BlockPool, PrivatePool
from ._config import SIZE_MAX, AllocatorConfig, get_config
from ._expandable import ExpandableSegment
from ._stats import DeviceStats

__all__ = ["DeviceCachingAllocator", "format_size", "get_allocator", "peek_allocator"]

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 << 20
K_SMALL_BUFFER = 2 << 20
K_MIN_LARGE_ALLOC = 10 << 20
K_ROUND_LARGE = 2 << 20
_MAX_ALLOC = 1 << 60
_DEFAULT_POOL = (0, 0)

_TRACE_ACTIONS = frozenset({
    "alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
    "segment_map", "segment_unmap", "snapshot", "oom", "annotate"})
# record-context levels (PyTorch's RecordContext)
_CTX_NEVER, _CTX_STATE, _CTX_ALLOC, _CTX_ALL = 0, 1, 2, 3
_CTX_LEVELS = {None: _CTX_NEVER, "state": _CTX_STATE, "alloc": _CTX_ALLOC, "all": _CTX_ALL}
_THIS_FILE = __file__


def format_size(n: int) -> str:
    """PyTorch's ``format_size`` for OOM messages.

    Example::

        >>> from accelrt.memory._allocator import format_size
        >>> format_size(1000), format_size(20 * 2**20), format_size(15 * 2**30)
        ('1000 bytes', '20.00 MiB', '15.00 GiB')
    """
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1048576:
        return f"{n / 1024:.2f} KiB"
    if n <= 1073741824:
        return f"{n / 1048576:.2f} MiB"
    return f"{n / 1073741824:.2f} GiB"


def _check_size(size: object) -> int:
    if isinstance(size, bool) or not hasattr(size, "__index__"):
        raise TypeError(f"allocation size must be an int, got {type(size).__name__}")
    return operator.index(size)


def _check_pool_id(pool_id: object) -> tuple[int, int]:
    if (not isinstance(pool_id, tuple) or len(pool_id) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in pool_id)):
        raise TypeError(f"pool_id must be a tuple of two ints, got {pool_id!r}")
    if pool_id == _DEFAULT_POOL:
        raise ValueError("pool_id (0, 0) names the default pool; use a private pool id")
    return pool_id


def _capture_frames() -> list[dict[str, Any]]:
    """Python frames of the caller (innermost first), skipping this module."""
    out = []
    f: Any = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if code.co_filename != _THIS_FILE:
            out.append({"filename": code.co_filename, "line": f.f_lineno, "name": code.co_name})
        f = f.f_back
    return out


class DeviceCachingAllocator:
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

    def __init__(self, backend: Any, index: int, config: AllocatorConfig | None = None) -> None:
        cfg = config if config is not None else get_config()
        self._b = backend                    # immutable
        self._index = index                  # immutable
        self._name: str = backend.name       # immutable
        self._lock = threading.Lock()
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
        self._allowed_max: int | None = None               # guarded by _lock
        self._oom_observers: list[Callable[[int, int, int, int], None]] = []  # guarded by _lock
        # history recording, guarded by _lock
        self._history = False          # trace entries are recorded
        self._ctx = _CTX_NEVER         # stack gathering level
        self._trace: collections.deque[dict[str, Any]] = collections.deque()
        self._skip_actions: frozenset[str] = frozenset()
        self._vm_ok: bool | None = None                    # guarded by _lock: backend vm support
        self._rejected = False                             # guarded by _lock: last slow path
        self._set_config_locked(cfg)
        if cfg.per_process_memory_fraction is not None:
            self._set_fraction_locked(cfg.per_process_memory_fraction)

    # ------------------------------------------------------------------ configuration
    def _set_config_locked(self, cfg: AllocatorConfig) -> None:
        self._cfg = cfg                                           # guarded by _lock
        self._mss = cfg.max_split_size                            # guarded by _lock
        self._mnsr = cfg.max_non_split_rounding_size              # guarded by _lock
        self._lss = cfg.large_segment_size                        # guarded by _lock
        divs = cfg.roundup_power2_divisions
        self._divs: tuple[int, ...] | None = divs if any(d > 1 for d in divs) else None  # _lock
        self._gc_threshold = cfg.garbage_collection_threshold     # guarded by _lock
        self._expandable = cfg.expandable_segments                # guarded by _lock
        self._page_reuse = cfg.page_reuse and cfg.expandable_segments  # guarded by _lock
        self._gc_on = self._gc_threshold > 0.0 and getattr(self, "_allowed_max", None) is not None
        self._update_simple()

    def _update_simple(self) -> None:
        # True when the best-fit lookup needs no oversize, GC or expandable handling.
        self._simple = (self._mss >= SIZE_MAX and not self._gc_on and not self._expandable
                        and not self._expandable_segments)  # guarded by _lock
        # True when malloc needs nothing but rounding and the plain lookup (guarded by _lock)
        self._fast = (self._simple and self._divs is None and not self._ctx
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
        if type(size) is not int:
            size = _check_size(size)
        if size <= 0:
            if size == 0:
                return 0
            raise ValueError(f"allocation size must be >= 0, got {size}")
        if size >= _MAX_ALLOC:
            raise OutOfMemoryError(
                f"{self._name} out of memory. Tried to allocate more than 1EB memory.",
                size, self.memory_allocated(), self._device_total)
        oom: tuple[str, int, int, int, int] | None = None
        with self._lock:
            block = None
            if self._fast:
                # Nothing special in force: default rounding and pools, no events, no
                # history, no captures, plain best fit.
                rounded = (size + 511) & -512
                pool = self._small if rounded <= K_SMALL_SIZE else self._large
                frames = None
                fl = pool.free.get(stream)
                if fl:
                    i = bisect_left(fl, rounded << KEY_SHIFT)
                    if i < len(fl):
                        block = self._blocks[fl.pop(i) & ADDR_MASK]
            else:
                if (self._events or self._deferred) and not self._captures:
                    self._process_events()
                if self._divs is None:
                    rounded = (size + 511) & -512
                else:
                    rounded = self._round_size(size)
                if self._captures:
                    pool = self._get_private_pool(rounded, stream)
                elif rounded <= K_SMALL_SIZE:
                    pool = self._small
                else:
                    pool = self._large
                frames = _capture_frames() if self._ctx else None
                if self._simple:
                    # Inlined best-fit lookup (no oversize limit, GC or expandable blocks).
                    fl = pool.free.get(stream)
                    if fl:
                        i = bisect_left(fl, rounded << KEY_SHIFT)
                        if i < len(fl):
                            block = self._blocks[fl.pop(i) & ADDR_MASK]
                else:
                    block = self._get_free_block(pool, stream, rounded)
            if block is None:
                block = self._alloc_slow(pool, stream, rounded, frames)
                if block is None:
                    if self._rejected:
                        oom = self._prepare_rejection(rounded)
                    else:
                        oom = self._prepare_oom(pool, stream, rounded, frames)
            if oom is None:
                # ---- alloc_found_block: split, stats, trace (inlined: the hot path)
                blk: Block = block  # type: ignore[assignment]
                st = self._stats
                c = pool.hot
                remaining = blk.size - rounded
                if pool.is_small or self._expandable:
                    split = remaining >= K_MIN_BLOCK
                else:
                    split = rounded < self._mss and remaining > K_SMALL_SIZE
                nx = blk.next
                addr = blk.addr
                if split:
                    exp = blk.exp
                    raddr = addr + rounded
                    rem = Block(raddr, remaining, stream, pool, exp)
                    rem.prev = blk
                    rem.next = nx
                    if nx is not None:
                        nx.prev = rem
                    already_split = nx is not None or blk.prev is not None
                    blk.next = rem
                    blk.size = rounded
                    self._blocks[raddr] = rem
                    fl = pool.free.get(stream)
                    if fl is None:
                        pool.free[stream] = [(remaining << KEY_SHIFT) | raddr]
                    else:
                        insort(fl, (remaining << KEY_SHIFT) | raddr)
                    rem.gc_base = pool.gc_calls
                    if exp is None:
                        if already_split:
                            if st.dirty_split:
                                st.settle_split()
                            c.sb -= rounded
                        else:
                            c.sb += remaining
                            c.tsb += remaining
                            c.sn += 1
                            c.tsn += 1
                            st.dirty_split = True
                elif (nx is not None or blk.prev is not None) and blk.exp is None:
                    if st.dirty_split:
                        st.settle_split()
                    c.sb -= blk.size
                    c.sn -= 1
                blk.allocated = True
                blk.requested = size
                bsize = blk.size
                c.n += 1
                c.b += bsize
                c.r += size
                c.tn += 1
                c.tb += bsize
                c.tr += size
                d = st.dirty
                if d is not c:
                    st.dirty = True if d else c
                if bsize >= self._mss:
                    st.oversize_allocations.increase(1)
                if frames is not None:
                    blk.frames = frames
                    if self._history:
                        self._record("alloc", addr, size, stream,
                                     frames if self._ctx >= _CTX_ALLOC else None)
                elif self._history:
                    self._record("alloc", addr, size, stream, None)
                return addr
        self._raise_oom(*oom)
        raise AssertionError("unreachable")

    def free(self, ptr: int) -> None:
        """Return memory from :meth:`malloc` (free *requested*).

        If streams were recorded with :meth:`record_stream`, the block is reused only after
        events recorded now on those streams complete.

        Raises:
            ValueError: ``ptr`` was not allocated here, or was already freed.

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> a.free(a.malloc(100, 0))
            >>> a.stats()["allocation.all.freed"]
            1
        """
        with self._lock:
            blk = self._blocks.get(ptr)
            if blk is None or not blk.allocated:
                raise self._bad_ptr(ptr, blk)
            blk.allocated = False
            st = self._stats
            if st.dirty:
                st.settle()
            size = blk.size
            c = blk.pool.hot
            c.n -= 1
            c.b -= size
            if size >= self._mss:
                st.oversize_allocations.decrease(1)
            if self._history:
                self._record("free_requested", ptr, blk.requested, blk.stream,
                             _capture_frames() if self._ctx >= _CTX_ALL else blk.frames)
            if blk.stream_uses is None:
                if blk.prev is None and blk.next is None and not self._history:
                    # unsplit segment: nothing to merge
                    c.r -= blk.requested
                    fl = blk.pool.free.get(blk.stream)
                    if fl is None:
                        blk.pool.free[blk.stream] = [(size << KEY_SHIFT) | ptr]
                    else:
                        insort(fl, (size << KEY_SHIFT) | ptr)
                    blk.gc_base = blk.pool.gc_calls
                    return
                self._free_block(blk, False)
            elif blk.stream_uses:
                if not st.pending_seen:
                    st.mark_pending()
                c.pn += 1
                c.pb += size
                if self._captures:
                    self._deferred.append(blk)
                    self._fast = False
                else:
                    self._insert_events(blk)
            else:
                self._free_block(blk, False)

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
        pid = _DEFAULT_POOL if pool_id is None else _check_pool_id(pool_id)
        with self._lock:
            self._release_cached_blocks(pid)

    # ------------------------------------------------------------------ rounding, pools
    def _round_size(self, size: int) -> int:
        if size < K_MIN_BLOCK:
            return K_MIN_BLOCK
        divs = self._divs
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
            return self._round_size(size) if self._divs is not None else \
                max(K_MIN_BLOCK, (size + 511) & -512)

    def _allocation_size(self, rounded: int) -> int:
        if rounded <= K_SMALL_SIZE:
            return K_SMALL_BUFFER
        if rounded < K_MIN_LARGE_ALLOC:
            return self._lss
        return -(-rounded // K_ROUND_LARGE) * K_ROUND_LARGE

    def _get_private_pool(self, rounded: int, stream: int) -> BlockPool:
        for pool_id, filt in reversed(self._captures):
            if filt is None or filt(stream):
                pp = self._private[pool_id]
                return pp.small if rounded <= K_SMALL_SIZE else pp.large
        return self._small if rounded <= K_SMALL_SIZE else self._large

    # ------------------------------------------------------------------ free lists
    def _insert_free(self, b: Block) -> None:
        pool = b.pool
        fl = pool.free.get(b.stream)
        if fl is None:
            pool.free[b.stream] = [(b.size << KEY_SHIFT) | b.addr]
        else:
            insort(fl, (b.size << KEY_SHIFT) | b.addr)
        b.gc_base = pool.gc_calls

    def _remove_free(self, b: Block) -> None:
        fl = b.pool.free[b.stream]
        key = (b.size << KEY_SHIFT) | b.addr
        del fl[bisect_left(fl, key)]

    def _insert_unmapped(self, b: Block) -> None:
        ul = b.pool.unmapped.setdefault(b.stream, [])
        insort(ul, b.addr)

    def _remove_unmapped(self, b: Block) -> None:
        ul = b.pool.unmapped[b.stream]
        del ul[bisect_left(ul, b.addr)]

    def _get_free_block(self, pool: BlockPool, stream: int, rounded: int) -> Block | None:
        if self._gc_on:
            pool.gc_calls += 1
        fl = pool.free.get(stream)
        if not fl:
            return None
        i = bisect_left(fl, rounded << KEY_SHIFT)
        n = len(fl)
        if i == n:
            return None
        key = fl[i]
        blk = self._blocks[key & ADDR_MASK]
        if blk.exp is not None:
            if self._expandable:
                def exp_size(b: Block) -> int:
                    nx = b.next
                    return b.size + (nx.size if nx is not None and not nx.mapped else 0)
                while blk.exp is not None and i + 1 < n:
                    nb = self._blocks[fl[i + 1] & ADDR_MASK]
                    if exp_size(nb) < exp_size(blk):
                        i += 1
                        blk = nb
                    else:
                        break
            else:
                i += 1
                while i < n:
                    blk = self._blocks[fl[i] & ADDR_MASK]
                    if blk.exp is None:
                        break
                    i += 1
                if i == n:
                    return None
        bsize = blk.size
        mss = self._mss
        if rounded < mss:
            if bsize >= mss:
                return None
        elif bsize >= rounded + self._mnsr:
            return None
        del fl[i]
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
        if self._expandable:
            return self._try_allocate_expandable(pool, stream, rounded, frames)
        if self._cfg.release_lock_on_malloc:
            # release_lock_on_cudamalloc: other threads may use the allocator meanwhile; the
            # new segment is not visible to them until it is linked below.
            self._lock.release()
            try:
                ptr = self._b.malloc(self._index, alloc_size)
            finally:
                self._lock.acquire()
        else:
            ptr = self._b.malloc(self._index, alloc_size)
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
        if alloc_size >= self._mss:
            st.oversize_segments.increase(1)
        st.num_device_alloc += 1
        if self._history:
            self._record("segment_alloc", ptr, alloc_size, stream,
                         frames if self._ctx >= _CTX_ALLOC else None)
        return blk

    def _release_block(self, blk: Block) -> None:
        """cudaFree of a whole free unsplit non-expandable segment (in its free list)."""
        self._remove_free(blk)
        st = self._stats
        size = blk.size
        st.num_device_free += 1
        if self._history:
            self._record("segment_free", blk.addr, size, blk.stream, blk.seg_frames)
        self._b.free(self._index, blk.addr)
        del self._blocks[blk.addr]
        self._total_reserved -= size
        pool = blk.pool
        if pool.owner is not None:
            pool.owner.reserved -= size
        ti = pool.type_index
        st.segment[0].decrease(1)
        st.segment[ti].decrease(1)
        st.reserved_bytes[0].decrease(size)
        st.reserved_bytes[ti].decrease(size)
        if size >= self._mss:
            st.oversize_segments.decrease(1)

    def _release_available_cached_blocks(self, pool: BlockPool, stream: int,
                                         rounded: int) -> bool:
        mss = self._mss
        if mss >= SIZE_MAX:
            return False
        fl = pool.free.get(stream)
        if not fl:
            return False
        target = max(mss, rounded)
        i = bisect_left(fl, target << KEY_SHIFT)
        if i < len(fl):
            blk = self._blocks[fl[i] & ADDR_MASK]
            if blk.exp is None:
                if blk.prev is None and blk.next is None:
                    self._release_block(blk)
                    return True
                return False
        # No single block is large enough: free oversize blocks, largest first.
        released = 0
        j = i - 1
        while j >= 0 and released < target:
            blk = self._blocks[fl[j] & ADDR_MASK]
            if blk.size < mss:
                break
            if blk.exp is None and blk.prev is None and blk.next is None:
                released += blk.size
                self._release_block(blk)
            j -= 1
        return released >= target

    def _release_cached_blocks(self, pool_id: tuple[int, int]) -> bool:
        if pool_id == _DEFAULT_POOL and not self._captures:
            self._synchronize_and_free_events(None)
            self._release_blocks(self._large)
            self._release_blocks(self._small)
        for pid in list(self._freeable):
            pp = self._freeable[pid]
            if pool_id != _DEFAULT_POOL:
                if pid != pool_id:
                    continue
                self._synchronize_and_free_events(pp)
            self._release_blocks(pp.small)
            self._release_blocks(pp.large)
            if pp.reserved == 0:
                del self._private[pid]
                del self._freeable[pid]
        return True

    def _release_blocks(self, pool: BlockPool) -> None:
        to_unmap: list[Block] = []
        for stream in sorted(pool.free):
            for key in list(pool.free[stream]):
                blk = self._blocks[key & ADDR_MASK]
                if blk.exp is not None:
                    to_unmap.append(blk)
                elif blk.prev is None and blk.next is None:
                    self._release_block(blk)
        for blk in to_unmap:
            u = self._unmap_block(blk)
            if u is not None:
                self._release_expandable_segment(u)
        # reservations left fully unmapped earlier (page_reuse) go back as well
        for stream in sorted(pool.unmapped):
            for addr in list(pool.unmapped[stream]):
                u = self._blocks[addr]
                if u.prev is None and u.next is None:
                    self._release_expandable_segment(u)

    def _garbage_collect(self) -> None:
        assert self._allowed_max is not None
        gc_threshold = int(self._gc_threshold * self._allowed_max)
        if self._total_reserved <= gc_threshold:
            return
        target = self._total_reserved - gc_threshold
        pool = self._large
        calls = pool.gc_calls

        def candidates() -> list[Block]:
            out = []
            for stream in sorted(pool.free):
                for key in pool.free[stream]:
                    b = self._blocks[key & ADDR_MASK]
                    if b.prev is None and b.next is None:
                        out.append(b)
            return out

        cands = candidates()
        total_age = sum(calls - b.gc_base for b in cands)
        count = len(cands)
        if count == 0:
            return
        reclaimed = 0
        freed = True
        while reclaimed < target and freed and count > 0:
            threshold = total_age / count
            freed = False
            for b in candidates():
                age = calls - b.gc_base
                if b.exp is None and age >= threshold:
                    freed = True
                    reclaimed += b.size
                    total_age -= age
                    count -= 1
                    self._release_block(b)

    # ------------------------------------------------------------------ freeing
    def _merge_neighbours(self, b: Block) -> tuple[Block, int, int]:
        """Merge ``b`` (in no container) with mergeable neighbours, removing them from their
        containers. Returns the surviving block (in no container), merges, merged bytes.

        Neighbours merge when neither is allocated, awaiting events or recorded on other
        streams, and both are mapped or both unmapped (PyTorch's ``try_merge_blocks``).
        """
        n = 0
        nbytes = 0
        mapped = b.mapped
        prev = b.prev
        if (prev is not None and not prev.allocated and not prev.event_count
                and not prev.stream_uses and prev.mapped == mapped):
            psize = prev.size
            if mapped:
                fl = prev.pool.free[prev.stream]
                del fl[bisect_left(fl, (psize << KEY_SHIFT) | prev.addr)]
            else:
                self._remove_unmapped(prev)
            n = 1
            nbytes = psize
            del self._blocks[b.addr]
            prev.size = psize + b.size
            nx = b.next
            prev.next = nx
            if nx is not None:
                nx.prev = prev
            prev.requested = b.requested
            prev.frames = b.frames
            b = prev
        nx = b.next
        if (nx is not None and not nx.allocated and not nx.event_count
                and not nx.stream_uses and nx.mapped == mapped):
            nsize = nx.size
            if mapped:
                fl = nx.pool.free[nx.stream]
                del fl[bisect_left(fl, (nsize << KEY_SHIFT) | nx.addr)]
            else:
                self._remove_unmapped(nx)
            n += 1
            nbytes += nsize
            del self._blocks[nx.addr]
            b.size += nsize
            nn = nx.next
            b.next = nn
            if nn is not None:
                nn.prev = b
        return b, n, nbytes

    def _free_block(self, blk: Block, pending: bool) -> None:
        """Free *completed*: merge with free neighbours and cache the block.

        The merge of :meth:`_merge_neighbours` is inlined here (the hot path): ``blk`` is
        mapped, so only free mapped neighbours of the same pool and stream can merge.
        """
        orig_size = blk.size
        req = blk.requested
        st = self._stats
        if self._history:
            self._record("free_completed", blk.addr, req, blk.stream, blk.frames
                         if self._ctx >= _CTX_ALLOC else None)
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
                del fl[bisect_left(fl, (psize << KEY_SHIFT) | prev.addr)]
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
            if (nx is not None and not nx.allocated and not nx.event_count
                    and not nx.stream_uses and nx.mapped):
                nsize = nx.size
                del fl[bisect_left(fl, (nsize << KEY_SHIFT) | nx.addr)]
                merged += 1
                merged_bytes += nsize
                del self._blocks[nx.addr]
                b.size += nsize
                nn = nx.next
                b.next = nn
                if nn is not None:
                    nn.prev = b
            if blk.exp is None:
                net_n = -merged
                net_b = -merged_bytes
                if b.prev is not None or b.next is not None:
                    net_n += 1
                    net_b += b.size
                if (net_n < 0 or net_b < 0) and st.dirty_split:
                    st.settle_split()
                if net_n:
                    c.sn += net_n
                    if net_n > 0:
                        c.tsn += net_n
                        st.dirty_split = True
                if net_b:
                    c.sb += net_b
                    if net_b > 0:
                        c.tsb += net_b
                        st.dirty_split = True
        insort(fl, (b.size << KEY_SHIFT) | b.addr)
        b.gc_base = pool.gc_calls
        c.r -= req
        if pending:
            c.pn -= 1
            c.pb -= orig_size

    # ------------------------------------------------------------------ events
    def _insert_events(self, blk: Block) -> None:
        """Record one event per recorded stream; the pending free completes when all have.

        A stream destroyed since ``record_stream`` cannot take an event: the device is
        synchronized instead (its queued work still runs), which is safe. Any other backend
        failure leaves the allocator consistent (the block waits only for the events that were
        recorded, completing at once if none was) and is then raised.
        """
        b = self._b
        idx = self._index
        uses = blk.stream_uses or ()
        blk.stream_uses = None
        error: BaseException | None = None
        for s in sorted(uses):
            try:
                ev = self._event_pool.pop() if self._event_pool else \
                    b.event_create(idx, False, False, False)
            except Exception as exc:  # noqa: BLE001 - re-raised below, state kept consistent
                error = error or exc
                continue
            try:
                b.event_record(idx, ev, s)
            except Exception as exc:  # noqa: BLE001 - re-raised below, state kept consistent
                self._event_pool.append(ev)
                failure: BaseException | None = exc
                try:
                    if not b.stream_is_valid(idx, s):
                        b.synchronize(idx)   # a destroyed stream: wait for everything
                        failure = None
                except Exception as exc2:  # noqa: BLE001 - re-raised below
                    failure = exc2
                if failure is not None:
                    error = error or failure
                continue
            blk.event_count += 1
            q = self._events.get(s)
            if q is None:
                q = self._events[s] = collections.deque()
            q.append((ev, blk))
            self._fast = False
        if blk.event_count == 0:
            self._free_block(blk, True)
        if error is not None:
            raise error

    def _insert_deferred(self) -> None:
        deferred = self._deferred
        self._deferred = []
        error: BaseException | None = None
        for blk in deferred:
            try:
                self._insert_events(blk)
            except Exception as exc:  # noqa: BLE001 - every block is handled, then raised
                error = error or exc
        if error is not None:
            raise error

    def _process_events(self) -> None:
        if self._deferred:
            self._insert_deferred()
        b = self._b
        idx = self._index
        for s in list(self._events):
            q = self._events[s]
            while q:
                ev, blk = q[0]
                if not b.event_query(idx, ev):
                    break
                q.popleft()
                self._event_pool.append(ev)
                blk.event_count -= 1
                if blk.event_count == 0:
                    self._free_block(blk, True)
            if not q:
                del self._events[s]
        if not self._events:
            self._update_simple()

    def _synchronize_and_free_events(self, only: PrivatePool | None) -> None:
        if only is None:
            self._stats.num_sync_all_streams += 1
        if self._deferred and not self._captures:
            self._insert_deferred()
        b = self._b
        idx = self._index
        for s in list(self._events):
            q = self._events[s]
            keep: collections.deque[tuple[int, Block]] = collections.deque()
            for ev, blk in q:
                if only is not None and blk.pool.owner is not only:
                    keep.append((ev, blk))
                    continue
                b.event_synchronize(idx, ev)
                self._event_pool.append(ev)
                blk.event_count -= 1
                if blk.event_count == 0:
                    self._free_block(blk, True)
            if keep:
                self._events[s] = keep
            else:
                del self._events[s]
        self._update_simple()

    # ------------------------------------------------------------------ expandable segments
    def _page_size(self, pool: BlockPool) -> int:
        seg = K_SMALL_BUFFER if pool.is_small else self._lss
        gran = int(self._b.vm_granularity(self._index))
        return -(-seg // gran) * gran

    def _find_expandable_block(self, pool: BlockPool, stream: int, size: int) -> Block:
        def allocatable(b: Block | None) -> bool:
            return (b is not None and not b.allocated and b.event_count == 0
                    and not b.stream_uses)

        def has_space(b: Block | None) -> bool:
            got = 0
            while got < size and allocatable(b):
                got += b.size  # type: ignore[union-attr]
                b = b.next  # type: ignore[union-attr]
            return got >= size

        for addr in pool.unmapped.get(stream, ()):
            c = self._blocks[addr]
            if allocatable(c.prev):
                c = c.prev  # type: ignore[assignment]
            if has_space(c):
                return c
        es = ExpandableSegment(self._b, self._index, stream, pool, self._page_size(pool),
                               self._device_total)
        self._expandable_segments.append(es)
        self._update_simple()
        blk = Block(es.base, es.size, stream, pool, es, mapped=False)
        self._blocks[es.base] = blk
        self._insert_unmapped(blk)
        return blk

    def _map_block(self, blk: Block, size: int, frames: list[dict[str, Any]] | None
                   ) -> Block | None:
        """Map the first ``size`` bytes (page-rounded) of unmapped ``blk``; return the merged
        free block now holding them (in the free list), or ``None`` on out-of-memory."""
        es = blk.exp
        mapped = es.map(blk.addr, size)
        if mapped == 0:
            return None
        self._remove_unmapped(blk)
        blk.mapped = True
        if mapped < blk.size:
            rest = Block(blk.addr + mapped, blk.size - mapped, blk.stream, blk.pool, es,
                         mapped=False)
            nx = blk.next
            rest.prev = blk
            rest.next = nx
            if nx is not None:
                nx.prev = rest
            blk.next = rest
            blk.size = mapped
            self._blocks[rest.addr] = rest
            self._insert_unmapped(rest)
        addr = blk.addr
        b, _, _ = self._merge_neighbours(blk)
        self._insert_free(b)
        self._total_reserved += mapped
        pool = b.pool
        if pool.owner is not None:
            pool.owner.reserved += mapped
        st = self._stats
        st.reserved_bytes[0].increase(mapped)
        st.reserved_bytes[pool.type_index].increase(mapped)
        st.num_device_alloc += 1
        if es.frames is None:
            es.frames = frames
        if self._history:
            self._record("segment_map", addr, mapped, b.stream,
                         frames if self._ctx >= _CTX_ALLOC else None)
        return b

    def _try_allocate_expandable(self, pool: BlockPool, stream: int, size: int,
                                 frames: list[dict[str, Any]] | None) -> Block | None:
        if self._page_reuse and pool.owner is None:
            self._unmap_free_pages()
        c: Block | None = self._find_expandable_block(pool, stream, size)
        assert c is not None
        if not c.mapped:
            c = self._map_block(c, min(c.size, size), frames)
            if c is None:
                return None
        while c.size < size:
            nxt = c.next
            assert nxt is not None and not nxt.mapped
            c = self._map_block(nxt, min(size - c.size, nxt.size), frames)
            if c is None:
                return None
        self._remove_free(c)
        return c

    def _unmap_block(self, blk: Block) -> Block | None:
        """Unmap the whole pages of free mapped ``blk`` (in its free list); return the
        resulting unmapped block, or ``None`` if no whole page was inside."""
        es = blk.exp
        ptr, nbytes = es.unmap(blk.addr, blk.size)
        if nbytes == 0:
            return None
        self._remove_free(blk)
        before = ptr - blk.addr
        after = blk.size - before - nbytes
        nx = blk.next
        if before > 0:
            blk.size = before
            self._insert_free(blk)
            u = Block(ptr, nbytes, blk.stream, blk.pool, es, mapped=False)
            u.prev = blk
            blk.next = u
            self._blocks[ptr] = u
        else:
            u = blk
            u.size = nbytes
            u.mapped = False
            u.requested = 0
            u.frames = None
        u.next = nx
        if nx is not None:
            nx.prev = u
        if after > 0:
            a = Block(ptr + nbytes, after, blk.stream, blk.pool, es)
            a.prev = u
            a.next = nx
            u.next = a
            if nx is not None:
                nx.prev = a
            self._blocks[a.addr] = a
            self._insert_free(a)
        u, _, _ = self._merge_neighbours(u)
        self._insert_unmapped(u)
        self._total_reserved -= nbytes
        pool = u.pool
        if pool.owner is not None:
            pool.owner.reserved -= nbytes
        st = self._stats
        st.reserved_bytes[0].decrease(nbytes)
        st.reserved_bytes[pool.type_index].decrease(nbytes)
        st.num_device_free += 1
        if self._history:
            self._record("segment_unmap", ptr, nbytes, u.stream, None)
        return u

    def _release_expandable_segment(self, u: Block) -> None:
        es = u.exp
        if u.size != es.size:
            return
        self._remove_unmapped(u)
        del self._blocks[u.addr]
        self._expandable_segments.remove(es)
        es.release()
        self._update_simple()

    def _unmap_free_pages(self) -> None:
        """accelrt's ``page_reuse`` policy: before mapping new pages, unmap every whole free
        page of the default pools' expandable segments, so the new mapping reuses that
        physical memory at the lowest address that fits instead of adding to it."""
        for pool in (self._small, self._large):
            # only blocks at least one page long can hold a whole page (lists sorted by size)
            first = self._page_size(pool) << KEY_SHIFT
            todo = [self._blocks[key & ADDR_MASK] for stream in sorted(pool.free)
                    for key in pool.free[stream][bisect_left(pool.free[stream], first):]]
            for blk in todo:
                if blk.exp is not None:
                    self._unmap_block(blk)

    # ------------------------------------------------------------------ OOM
    def _prepare_oom(self, pool: BlockPool, stream: int, rounded: int,
                     frames: list[dict[str, Any]] | None) -> tuple[str, int, int, int, int]:
        st = self._stats
        st.num_ooms += 1
        alloc_size = self._allocation_size(rounded)
        try:
            dev_free, dev_total = self._b.get_memory_info(self._index)
        except Exception:  # noqa: BLE001 - the OOM report must not fail
            dev_free, dev_total = 0, self._device_total
        if self._history:
            self._record("oom", 0, rounded, stream, frames, device_free=dev_free)
        priv = 0
        for pp in self._private.values():
            for p in (pp.small, pp.large):
                for keys in p.free.values():
                    for key in keys:
                        priv += key >> KEY_SHIFT
        allocated = st.allocated_bytes()
        reserved = st.reserved_bytes[0].current
        allowed = self._allowed_max
        allowed_info = f"{format_size(allowed)} allowed; " if allowed is not None else ""
        priv_msg = (f"with {format_size(priv)} allocated in private pools, "
                    if priv > 0 else "")
        name = self._name
        msg = (f"{name} out of memory. Tried to allocate {format_size(alloc_size)}. Device "
               f"{name}:{self._index} has a total capacity of {format_size(dev_total)} of which "
               f"{format_size(dev_free)} is free. {allowed_info}Of the allocated memory "
               f"{format_size(allocated + priv)} is allocated by accelrt, {priv_msg}and "
               f"{format_size(reserved - allocated - priv)} is reserved by accelrt but "
               "unallocated. If reserved but unallocated memory is large try setting "
               "ACCELRT_ALLOC_CONF=expandable_segments:True to avoid fragmentation.")
        limit = allowed if allowed is not None else dev_total
        return msg, alloc_size, allocated, limit, dev_free

    def _prepare_rejection(self, rounded: int) -> tuple[str, int, int, int, int]:
        alloc_size = self._allocation_size(rounded)
        allowed = self._allowed_max
        assert allowed is not None
        try:
            dev_free = int(self._b.get_memory_info(self._index)[0])
        except Exception:  # noqa: BLE001 - the OOM report must not fail
            dev_free = 0
        allocated = self._stats.allocated_bytes()
        msg = (f"{self._name} out of memory. Allocation was preemptively rejected because it "
               f"would exceed per_process_memory_fraction limit. Requested size: "
               f"{format_size(alloc_size)}. Reserved: {format_size(self._total_reserved)}, "
               f"allowed: {format_size(allowed)} (throw_on_malloc_oom is set).")
        return msg, alloc_size, allocated, allowed, dev_free

    def _raise_oom(self, msg: str, alloc_size: int, allocated: int, limit: int,
                   dev_free: int) -> None:
        with self._lock:
            observers = list(self._oom_observers)
        for fn in observers:
            fn(self._index, alloc_size, limit, dev_free)
        raise OutOfMemoryError(msg, alloc_size, allocated, limit)

    def attach_oom_observer(self, fn: Callable[[int, int, int, int], None]) -> None:
        """Call ``fn(device, alloc_size, limit, device_free)`` before raising an OOM error
        (PyTorch's ``_attach_out_of_memory_observer``); called without the lock held."""
        if not callable(fn):
            raise TypeError(f"OOM observer must be callable, got {fn!r}")
        with self._lock:
            self._oom_observers.append(fn)

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

    # ------------------------------------------------------------------ private pools
    def begin_allocate_to_pool(self, pool_id: tuple[int, int],
                               stream_filter: Callable[[int], bool] | None = None) -> None:
        """Route allocations on streams accepted by ``stream_filter`` (all streams if
        ``None``) to private pool ``pool_id``, creating it or taking a reference to it.

        Raises:
            TypeError: bad ``pool_id`` or a non-callable filter.
            RuntimeError: already allocating to ``pool_id``.

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> a.begin_allocate_to_pool((1, 1))
            >>> p = a.malloc(100, 0)
            >>> a.end_allocate_to_pool((1, 1))
            >>> [s["segment_pool_id"] for s in a.snapshot_segments()]
            [(1, 1)]
            >>> a.free(p); a.release_pool((1, 1)); a.empty_cache()
        """
        pool_id = _check_pool_id(pool_id)
        if stream_filter is not None and not callable(stream_filter):
            raise TypeError(f"stream_filter must be callable or None, got {stream_filter!r}")
        with self._lock:
            for pid, _ in self._captures:
                if pid == pool_id:
                    raise RuntimeError(f"begin_allocate_to_pool: already allocating to pool "
                                       f"{pool_id}")
            pp = self._private.get(pool_id)
            if pp is None:
                hot = self._stats.hot
                self._private[pool_id] = PrivatePool(pool_id, hot[1], hot[2])
            else:
                pp.use_count += 1
                self._freeable.pop(pool_id, None)
            self._captures.append((pool_id, stream_filter))
            self._fast = False

    def end_allocate_to_pool(self, pool_id: tuple[int, int]) -> None:
        """Stop routing allocations to ``pool_id`` (the reference stays until
        :meth:`release_pool`).

        Raises:
            RuntimeError: not allocating to ``pool_id``.
        """
        pool_id = _check_pool_id(pool_id)
        with self._lock:
            for i, (pid, _) in enumerate(self._captures):
                if pid == pool_id:
                    del self._captures[i]
                    self._update_simple()
                    return
        raise RuntimeError(f"end_allocate_to_pool: not allocating to pool {pool_id}")

    def create_pool(self, pool_id: tuple[int, int]) -> None:
        """Create private pool ``pool_id`` or take one more reference to it."""
        pool_id = _check_pool_id(pool_id)
        with self._lock:
            pp = self._private.get(pool_id)
            if pp is None:
                hot = self._stats.hot
                self._private[pool_id] = PrivatePool(pool_id, hot[1], hot[2])
            else:
                pp.use_count += 1
                self._freeable.pop(pool_id, None)

    def release_pool(self, pool_id: tuple[int, int]) -> None:
        """Drop one reference to private pool ``pool_id``; at zero its cached memory becomes
        releasable by :meth:`empty_cache` (blocks still allocated stay valid).

        Raises:
            ValueError: no such pool, or no reference left.
        """
        pool_id = _check_pool_id(pool_id)
        with self._lock:
            pp = self._private.get(pool_id)
            if pp is None or pp.use_count <= 0:
                raise ValueError(f"release_pool: no live private pool {pool_id}")
            pp.use_count -= 1
            if pp.use_count == 0:
                self._freeable[pool_id] = pp

    def pool_use_count(self, pool_id: tuple[int, int]) -> int:
        """References to private pool ``pool_id`` (0 if it does not exist)."""
        pool_id = _check_pool_id(pool_id)
        with self._lock:
            pp = self._private.get(pool_id)
            return 0 if pp is None else pp.use_count

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
            return self._stats.as_flat_dict()

    def memory_allocated(self) -> int:
        """``allocated_bytes.all.current``."""
        h = self._stats.hot
        return h[1].b + h[2].b

    def max_memory_allocated(self) -> int:
        """``allocated_bytes.all.peak``."""
        with self._lock:
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
            self._stats.reset_peak()

    def reset_accumulated_stats(self) -> None:
        """Zero every ``allocated``/``freed`` sum and the ``num_*`` counters."""
        with self._lock:
            self._stats.reset_accumulated()

    # ------------------------------------------------------------------ snapshots, history
    def snapshot_segments(self, pool_id: tuple[int, int] | None = None) -> list[dict[str, Any]]:
        """PyTorch's segment dicts (all pools, or only ``pool_id``), sorted by address.

        Expandable segments give one segment per contiguous mapped range.

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> p = a.malloc(3 * 2**20, 0)
            >>> [b["state"] for b in a.snapshot_segments()[0]["blocks"]]
            ['active_allocated', 'inactive']
            >>> a.free(p)
        """
        with self._lock:
            owner_filter = None if pool_id is None else tuple(pool_id)
            segments = []
            total_active = 0
            for blk in self._blocks.values():
                if not blk.mapped or (blk.prev is not None and blk.prev.mapped):
                    continue
                pool = blk.pool
                pid = pool.owner.id if pool.owner is not None else _DEFAULT_POOL
                if owner_filter is not None and pid != owner_filter:
                    continue
                blocks = []
                total = alloc = active = req = 0
                b: Block | None = blk
                addr = blk.addr
                while b is not None and b.mapped:
                    pending = b.event_count > 0 or bool(b.stream_uses)
                    is_active = b.allocated or pending
                    state = ("active_allocated" if b.allocated else
                             "active_pending_free" if pending else "inactive")
                    blocks.append({"address": addr, "size": b.size,
                                   "requested_size": b.requested, "state": state,
                                   "frames": list(b.frames) if b.frames else []})
                    addr += b.size
                    total += b.size
                    if b.allocated:
                        alloc += b.size
                    if is_active:
                        active += b.size
                        req += b.requested
                    b = b.next
                total_active += active
                seg_frames = blk.exp.frames if blk.exp is not None else blk.seg_frames
                segments.append({
                    "device": self._index, "address": blk.addr, "total_size": total,
                    "allocated_size": alloc, "active_size": active, "requested_size": req,
                    "stream": blk.stream, "segment_type": "small" if pool.is_small else "large",
                    "segment_pool_id": pid, "is_expandable": blk.exp is not None,
                    "frames": list(seg_frames) if seg_frames else [], "blocks": blocks})
            segments.sort(key=lambda s: s["address"])
            if self._history:
                self._record("snapshot", 0, total_active, 0, None)
            return segments

    def _record(self, action: str, addr: int, size: int, stream: int,
                frames: list[dict[str, Any]] | None, device_free: int | None = None) -> None:
        if action in self._skip_actions:
            return
        entry: dict[str, Any] = {"action": action}
        if device_free is not None:
            entry["device_free"] = device_free
        else:
            entry["addr"] = addr
        entry["size"] = size
        entry["stream"] = stream
        entry["time_us"] = time.time_ns() // 1000
        entry["compile_context"] = "N/A"
        entry["user_metadata"] = ""
        entry["frames"] = list(frames) if frames else []
        self._trace.append(entry)

    def trace_entries(self) -> list[dict[str, Any]]:
        """The recorded history, oldest first (copies)."""
        with self._lock:
            return [dict(e) for e in self._trace]

    def record_history(self, enabled: str | bool | None, context: str | None = "all",
                       stacks: str = "all", max_entries: int = sys.maxsize,
                       clear_history: bool = False,
                       skip_actions: Iterable[str] | None = None) -> None:
        """Start or stop recording allocation history (PyTorch's ``_record_memory_history``).

        Args:
            enabled: ``None``/``False`` stop (and clear the trace), ``"state"`` keeps only
                the stacks of live allocations, ``"all"``/``True`` also keeps the trace.
            context: ``None``, ``"state"``, ``"alloc"`` or ``"all"``: which stacks to gather.
            stacks: ``"python"`` or ``"all"`` (only Python frames exist here).
            max_entries: trace ring-buffer length.
            clear_history: drop the entries recorded so far.
            skip_actions: trace actions not to record.

        Raises:
            ValueError: an unknown value.
            TypeError: ``max_entries`` is not an int.

        Example::

            >>> from accelrt.backends import get_backend
            >>> from accelrt.memory._allocator import DeviceCachingAllocator
            >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
            >>> a.record_history("all", max_entries=100)
            >>> a.free(a.malloc(100, 0))
            >>> [e["action"] for e in a.trace_entries()][-2:]
            ['free_requested', 'free_completed']
            >>> a.record_history(None)
        """
        if enabled is True:
            enabled = "all"
        elif enabled is False:
            enabled = None
        if enabled not in (None, "state", "all"):
            raise ValueError(f"enabled must be None, 'state' or 'all', got {enabled!r}")
        if context not in _CTX_LEVELS:
            raise ValueError(f"context must be None, 'state', 'alloc' or 'all', got {context!r}")
        if stacks not in ("python", "all"):
            raise ValueError(f"stacks must be 'python' or 'all', got {stacks!r}")
        if not isinstance(max_entries, int) or isinstance(max_entries, bool):
            raise TypeError(f"max_entries must be an int, got {type(max_entries).__name__}")
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        skip = frozenset(skip_actions or ())
        unknown = skip - _TRACE_ACTIONS
        if unknown:
            raise ValueError(f"unknown trace actions in skip_actions: {sorted(unknown)}; "
                             f"known: {sorted(_TRACE_ACTIONS)}")
        with self._lock:
            if enabled is None:
                self._history = False
                self._ctx = _CTX_NEVER
                self._trace.clear()
                self._update_simple()
                return
            self._ctx = _CTX_LEVELS[context]
            self._history = enabled == "all"
            self._skip_actions = skip
            if clear_history:
                self._trace.clear()
            if self._trace.maxlen != max_entries:
                self._trace = collections.deque(self._trace, maxlen=max_entries)
            self._update_simple()

    def record_annotation(self, metadata: dict[str, Any]) -> None:
        """Append an ``annotate`` trace entry carrying ``metadata`` as user_metadata."""
        with self._lock:
            if self._history and "annotate" not in self._skip_actions:
                self._record("annotate", 0, 0, 0, None)
                self._trace[-1]["user_metadata"] = dict(metadata)

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

_lock = threading.Lock()
_allocators: dict[tuple[str, int], DeviceCachingAllocator] = {}   # guarded by _lock


def get_allocator(backend: Any, index: int) -> DeviceCachingAllocator:
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
