"""Private memory pools of the caching allocator (``MemPool``, graph capture pools).

While ``begin_allocate_to_pool(pool_id, filter)`` is in force, allocations on the streams the
filter accepts come from the private pool's own small and large block pools; the pool is
reference-counted and its cached memory becomes releasable when the count drops to zero.

After a ``fork`` that leaves device memory shared with the child (the backend's
``fork_shares_memory``), :func:`retire_segments` moves every segment of that memory into a
*retired* twin of its pool, in the parent and in the child: no allocation is served from it
any more (both processes' free lists name the same blocks, and the other process's arrays may
still use the rest), its blocks are freed into it as usual, and its free segments are given
back by ``empty_cache`` and the out-of-memory retry, as a released private pool's.

Example::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory._allocator import DeviceCachingAllocator
    >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
    >>> a.create_pool((7, 1)); a.pool_use_count((7, 1))
    1
    >>> a.release_pool((7, 1)); a.pool_use_count((7, 1))
    0
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .. import _checked
from .._device import _plain_int
from .._errors import DeviceError
from .._handles import DevicePtr
from .._stream_core import _lookup, _tls
from ._block import DEFAULT_POOL, K_SMALL_SIZE, BlockPool, PrivatePool, fl_add, fl_remove

if TYPE_CHECKING:
    from .._backend import Backend
    from ._interface import AllocatorCore
    from ._block import Block
    from ._stats import DeviceStats

__all__ = ["EndRouting", "PrivatePools", "begin_allocate_to_pool", "check_pool_id",
           "create_pool", "end_allocate_to_pool", "end_allocate_to_pool_from_finalizer",
           "in_capture_context", "pool_use_count", "raw_free", "raw_malloc", "release_pool",
           "release_pool_from_finalizer", "report_finalizer_error", "retire_segments",
           "settle_pending"]


def check_pool_id(pool_id: object) -> tuple[int, int]:
    """``pool_id`` if it names a private pool (a tuple of two ints other than ``(0, 0)``).

    Example::

        >>> from accelrt.memory._pools import check_pool_id
        >>> check_pool_id((1, 2))
        (1, 2)
    """
    if (not isinstance(pool_id, tuple) or len(pool_id) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) for x in pool_id)):
        raise TypeError(f"pool_id must be a tuple of two ints, got {pool_id!r}")
    plain = (_plain_int(pool_id[0]), _plain_int(pool_id[1]))
    if plain == DEFAULT_POOL:
        raise ValueError("pool_id (0, 0) names the default pool; use a private pool id")
    return plain


class PrivatePools:
    """The private pools of one allocator and the captures routing allocations to them
    (guarded by the allocator's lock; the allocator's public methods take it).

    Attributes:
        private: pool id -> :class:`PrivatePool`, every live one.
        freeable: the pools whose references dropped to zero (their cached memory is released
            by ``empty_cache``).
        captures: ``(pool id, stream filter)`` of each active ``begin_allocate_to_pool``, in
            order (the last accepting one wins).
        capturing: the pool ids among them routed to by a graph capture (PyTorch 2.15's
            ``markCaptureBegin``/``markCaptureEnd``). While one is open, a call of a thread
            whose current stream captures (:func:`in_capture_context`) follows the capture
            rules (no event processing or waits, frees on other streams deferred, no cache
            release before an out-of-memory error); other threads, and a ``use_mem_pool``
            routing, follow the ordinary ones.
        retired: ``(pool, twin)`` for each pool (``None``: the default one) that had segments
            shared with another process by a ``fork``: the twin (a pool of the same id, never
            allocated from) holds them (:func:`retire_segments`).

    Example::

        >>> from accelrt.memory._pools import PrivatePools
        >>> from accelrt.memory._stats import DeviceStats
        >>> pools = PrivatePools(DeviceStats(-1))
        >>> pools.begin((1, 1), None); pools.pool_for(512, 0).owner.id
        (1, 1)
        >>> pools.end((1, 1)), pools.release((1, 1)), sorted(pools.freeable)
        (True, None, [(1, 1)])
    """

    __slots__ = ("_stats", "captures", "capturing", "freeable", "private", "retired")

    def __init__(self, stats: DeviceStats) -> None:
        self._stats = stats
        self.private: dict[tuple[int, int], PrivatePool] = {}
        self.freeable: dict[tuple[int, int], PrivatePool] = {}
        self.captures: list[tuple[tuple[int, int], Callable[[int], bool] | None]] = []
        self.capturing: list[tuple[int, int]] = []
        self.retired: list[tuple[PrivatePool | None, PrivatePool]] = []

    def retired_twin(self, owner: PrivatePool | None) -> PrivatePool:
        """The retired twin of ``owner``'s pool (``None``: the default pool), made once."""
        for src, twin in self.retired:
            if src is owner:
                return twin
        hot = self._stats.hot
        twin = PrivatePool(DEFAULT_POOL if owner is None else owner.id, hot[1], hot[2])
        twin.use_count = 0
        self.retired.append((owner, twin))
        return twin

    def pool_for(self, rounded: int, stream: int) -> BlockPool | None:
        """The private block pool a request of ``rounded`` bytes on ``stream`` goes to, or
        ``None`` when no capture accepts ``stream``."""
        for pool_id, filt in reversed(self.captures):
            if filt is None or filt(stream):
                pp = self.private[pool_id]
                return pp.small if rounded <= K_SMALL_SIZE else pp.large
        return None

    def begin(self, pool_id: tuple[int, int], stream_filter: Callable[[int], bool] | None,
              capture: bool = False) -> None:
        """Start routing to ``pool_id`` (created, or one more reference), for a graph
        capture if ``capture``."""
        for pid, _ in self.captures:
            if pid == pool_id:
                raise RuntimeError(f"begin_allocate_to_pool: already allocating to pool "
                                   f"{pool_id}")
        self.create(pool_id)
        self.captures.append((pool_id, stream_filter))
        if capture:
            self.capturing.append(pool_id)

    def end(self, pool_id: tuple[int, int]) -> bool:
        """Stop routing to ``pool_id``; False if it was not routed to."""
        for i, (pid, _) in enumerate(self.captures):
            if pid == pool_id:
                del self.captures[i]
                if pool_id in self.capturing:
                    self.capturing.remove(pool_id)
                return True
        return False

    def create(self, pool_id: tuple[int, int], *, no_split: bool = False,
               allocator: Any = None, use_on_oom: bool = False) -> None:
        """Create ``pool_id`` (with these options) or take one more reference to it."""
        pp = self.private.get(pool_id)
        if pp is None:
            hot = self._stats.hot
            self.private[pool_id] = PrivatePool(pool_id, hot[1], hot[2], no_split=no_split,
                                                allocator=allocator, use_on_oom=use_on_oom)
        else:
            pp.use_count += 1
            self.freeable.pop(pool_id, None)

    def release(self, pool_id: tuple[int, int]) -> None:
        """Drop one reference; at zero the pool becomes freeable."""
        pp = self.private.get(pool_id)
        if pp is None or pp.use_count <= 0:
            raise ValueError(f"release_pool: no live private pool {pool_id}")
        pp.use_count -= 1
        if pp.use_count == 0:
            self.freeable[pool_id] = pp

    def use_count(self, pool_id: tuple[int, int]) -> int:
        """References to ``pool_id`` (0 if it does not exist)."""
        pp = self.private.get(pool_id)
        return 0 if pp is None else pp.use_count

    def free_bytes(self) -> int:
        """Bytes of the cached (free) blocks of every private pool (for OOM messages)."""
        total = 0
        for pp in self.private.values():
            for p in (pp.small, pp.large):
                for fl in p.free.values():
                    for b in fl:
                        total += b.size
        return total


def raw_malloc(backend: Backend, index: int, pool: BlockPool, size: int, stream: int) -> int:
    """A new segment for ``pool``: from its ``MemPool``'s pluggable allocator if it has one,
    else from the backend; 0 when out of memory."""
    owner = pool.owner
    if owner is not None and owner.allocator is not None:
        return int(owner.allocator._raw_alloc(backend, index, size, stream))
    return backend_malloc(backend, index, size)


def backend_malloc(backend: Backend, index: int, size: int) -> int:
    """``backend.malloc(index, size)``, checked (:mod:`accelrt._checked`): an address (``0``
    when out of memory).

    Raises:
        DeviceError: the backend's ``malloc`` returned something other than an address or
            ``0``, or raised an exception that is not accelrt's (chained); the message names
            the backend. The allocator has recorded nothing then.
    """
    ptr = _checked.call_raw(backend, "malloc", backend.malloc, index, size)
    return _checked.address(backend, ("malloc", (index, size)), ptr, oom=True)


def duplicate_address(backend: Backend, index: int, size: int, ptr: int) -> DeviceError:
    """The error for an address ``malloc(index, size)`` handed out while it is still in
    use."""
    return _checked.duplicate(backend, ("malloc", (index, size)), ptr)


def raw_free(backend: Backend, index: int, blk: Block) -> None:
    """Give a whole segment back to where :func:`raw_malloc` got it."""
    owner = blk.pool.owner
    if owner is not None and owner.allocator is not None:
        owner.allocator._raw_free(blk.addr)
    else:
        backend.free(index, DevicePtr(blk.addr))


def retire_segments(a: AllocatorCore) -> int:
    """Move every segment of the backend's memory (not expandable, not a pluggable
    allocator's) out of use in ``a`` (``_lock`` held), with its cached blocks: after a
    ``fork`` that leaves the memory shared, neither process may hand out what the other also
    holds. A pool's segments go to its retired twin (same id), which no allocation uses;
    ``empty_cache`` gives a twin's free segments back once its pool could be emptied (the
    default pool's at once, a private pool's once released: a graph may still replay there).
    Returns how many segments moved.

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> from accelrt.memory._pools import retire_segments
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> p = a.malloc(512, 0)
        >>> with a._lock:
        ...     retire_segments(a)
        1
        >>> q = a.malloc(512, 0)              # a new segment, not the rest of p's
        >>> len(a.snapshot_segments())
        2
        >>> a.free(p); a.free(q); a.empty_cache(); a.memory_reserved()
        0
    """
    a._flush_deferred()   # (a deferred free's block is in no free list yet)
    pools = a._pools
    twins = {id(twin) for _, twin in pools.retired}
    sources: list[BlockPool] = []
    moved = 0
    for head in [b for b in a._blocks.values() if b.prev is None and b.exp is None]:
        src = head.pool
        owner = src.owner
        if owner is not None and (id(owner) in twins or owner.allocator is not None):
            continue
        twin = pools.retired_twin(owner)
        twins.add(id(twin))
        dest = twin.small if src.is_small else twin.large
        size = 0
        b: Block | None = head
        while b is not None:
            b.pool = dest
            size += b.size
            b = b.next
        if owner is not None:
            owner.reserved -= size
        twin.reserved += size
        if src not in sources:
            sources.append(src)
        moved += 1
    for src in sources:
        for stream, fl in src.free.items():
            for b in [b for b in fl if b.pool is not src]:
                fl_remove(fl, b.size, b.addr)
                fl_add(b.pool, stream, b)
    return moved


def in_capture_context(a: AllocatorCore) -> bool:
    """True when the capture rules apply to the calling thread's call into allocator ``a``
    (``_lock`` held): a graph captures on its device (``PrivatePools.capturing``) and the
    thread's current stream of that device is capturing (PyTorch 2.15's
    ``is_capture_context()``: its ``markCaptureBegin`` count and
    ``cudaStreamGetCaptureInfo`` of the current stream). Another thread, whose current stream
    is not in the capture, allocates and frees by the ordinary rules meanwhile.

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> in_capture_context(a)
        False
    """
    if not a._pools.capturing:
        return False
    b = a._b
    index = a._index
    # a thread that never set nor used a stream of the device is on its default stream,
    # which cannot capture (captures need a non-default stream)
    s = _lookup(_tls.hot[1], b, b.name, index)
    if s is None or s._closed:
        return False
    return bool(b.stream_is_capturing(index, s._handle))


# ------------------------------------------------- the allocator's pool API
# (the DeviceCachingAllocator methods of the same names call these)

def begin_allocate_to_pool(a: AllocatorCore, pool_id: tuple[int, int],
                           stream_filter: Callable[[int], bool] | None = None,
                           capture: bool = False) -> None:
    """Route allocations on streams accepted by ``stream_filter`` (all streams if
    ``None``) to private pool ``pool_id``, creating it or taking a reference to it;
    ``capture``: for a graph capture (the allocator then behaves as under capture until the
    routing ends: :class:`PrivatePools`' ``capturing``).

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
    pool_id = check_pool_id(pool_id)
    if stream_filter is not None and not callable(stream_filter):
        raise TypeError(f"stream_filter must be callable or None, got {stream_filter!r}")
    with a._lock:
        a.settle_locked()   # a queued release_pool of this id comes first
        a._pools.begin(pool_id, stream_filter, capture)
        a._update_simple()


def end_allocate_to_pool(a: AllocatorCore, pool_id: tuple[int, int]) -> None:
    """Stop routing allocations to ``pool_id`` (the reference stays until
    :func:`release_pool`).

    Raises:
        RuntimeError: not allocating to ``pool_id``.
    """
    pool_id = check_pool_id(pool_id)
    with a._lock:
        a._flush_deferred()
        if a._pools.end(pool_id):
            a._update_simple()
            return
    raise RuntimeError(f"end_allocate_to_pool: not allocating to pool {pool_id}")


class EndRouting:
    """An :func:`end_allocate_to_pool` a finalizer queued (an item of the allocator's
    ``_gc_pending``, completed by :func:`settle_pending`)."""

    __slots__ = ("pool_id",)

    def __init__(self, pool_id: tuple[int, int]) -> None:
        self.pool_id = pool_id


def end_allocate_to_pool_from_finalizer(a: AllocatorCore, pool_id: tuple[int, int]) -> None:
    """:func:`end_allocate_to_pool` for finalizers (a ``Graph`` collected in the middle of its
    capture): never blocks, queued when the lock is held as :func:`release_pool_from_finalizer`
    is (in order: an end queued before a release is done before it); ending a routing that
    is no longer in force is not an error.

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> alloc = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> alloc.begin_allocate_to_pool((0, 1))
        >>> with alloc._lock:              # as if the GC ran the finalizer in a critical section
        ...     alloc.end_allocate_to_pool_from_finalizer((0, 1))
        ...     alloc.release_pool_from_finalizer((0, 1))
        >>> alloc.pool_use_count((0, 1))   # which completes what was queued
        0
    """
    _from_finalizer(a, EndRouting(check_pool_id(pool_id)))


def _from_finalizer(a: AllocatorCore, item: tuple[int, int] | EndRouting) -> None:
    """Queue ``item`` for :func:`settle_pending` and complete the queue now if the lock is
    free: what a finalizer does, never blocking (the holder, maybe its own thread, completes
    it at its next drain point otherwise)."""
    a._gc_pending.append(item)
    if a._lock.try_acquire():
        try:
            a._drain_pending_locked()
        finally:
            a._lock.release()


def report_finalizer_error(item: object, e: BaseException) -> None:
    """Log ``e``, raised by the queued finalizer work ``item`` (a pointer to free, a pool id
    to release, or what was done), on the "accelrt.memory" logger: a finalizer never raises."""
    what = (f"free of pointer {item:#x}" if isinstance(item, int)
            else item if isinstance(item, str) else f"release_pool({item})")
    import logging   # the "accelrt" logger; with no handler configured it reaches stderr
    logging.getLogger("accelrt.memory").error("Exception ignored in a queued finalizer %s:", what,
                                              exc_info=(type(e), e, e.__traceback__))


def settle_pending(a: AllocatorCore, item: tuple[int, int] | EndRouting) -> None:
    """Complete a pool operation a finalizer queued (``_lock`` held): a release
    (:func:`release_pool_from_finalizer`) or the end of a routing
    (:func:`end_allocate_to_pool_from_finalizer`)."""
    if isinstance(item, EndRouting):
        if a._pools.end(item.pool_id):
            a._update_simple()
    else:
        a._pools.release(item)


def create_pool(a: AllocatorCore, pool_id: tuple[int, int], *, no_split: bool = False,
                allocator: Any = None, use_on_oom: bool = False) -> None:
    """Create private pool ``pool_id`` or take one more reference to it.

    Args:
        pool_id: the pool id.
        no_split: the new pool never splits a segment (PyTorch's ``MemPool(no_split=)``).
        allocator: a ``PluggableAllocator`` whose library allocates and frees the new
            pool's segments (``MemPool(allocator=)``); ``None``: the backend's memory.
        use_on_oom: while the pool has references, a request outside private pools that
            would run out of memory may take one of its cached blocks
            (``MemPool(use_on_oom=True)``).

    The options apply when the pool is created; a further reference keeps them.

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> a.create_pool((5, 5), no_split=True)
        >>> a.begin_allocate_to_pool((5, 5))
        >>> p, q = a.malloc(512, 0), a.malloc(512, 0)   # one 2 MiB segment each
        >>> a.end_allocate_to_pool((5, 5))
        >>> len(a.snapshot_segments((5, 5)))
        2
        >>> a.free(p); a.free(q); a.release_pool((5, 5)); a.release_pool((5, 5))
        >>> a.empty_cache()
    """
    pool_id = check_pool_id(pool_id)
    with a._lock:
        a.settle_locked()   # a queued release_pool of this id comes first
        a._pools.create(pool_id, no_split=no_split, allocator=allocator,
                        use_on_oom=use_on_oom)


def release_pool(a: AllocatorCore, pool_id: tuple[int, int]) -> None:
    """Drop one reference to private pool ``pool_id``; at zero its cached memory becomes
    releasable by :meth:`DeviceCachingAllocator.empty_cache` (blocks still allocated stay valid).

    Raises:
        ValueError: no such pool, or no reference left.
    """
    pool_id = check_pool_id(pool_id)
    with a._lock:
        a._flush_deferred()
        a._pools.release(pool_id)


def release_pool_from_finalizer(a: AllocatorCore, pool_id: tuple[int, int], *,
                                empty_cache: bool = False) -> None:
    """:func:`release_pool` for finalizers (``Graph.__del__``, a collected ``MemPool``): never
    blocks. With ``empty_cache``, the pool's cached memory is then given back as by
    ``empty_cache(pool_id)`` (PyTorch's ``~MemPool``).

    If the lock is held (maybe by this very thread, the garbage collector having run the
    finalizer inside the allocator's critical section) the work is queued and done at
    the holder's next drain point, like :meth:`DeviceCachingAllocator.free_from_finalizer`.

    Raises:
        TypeError: ``pool_id`` is not a pair of ints (checked at once).

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> a.create_pool((0, 1)); a.release_pool_from_finalizer((0, 1))
        >>> a.pool_use_count((0, 1))
        0
    """
    pool_id = check_pool_id(pool_id)
    if empty_cache:
        a._gc_empty.append(pool_id)   # first: a drain that sees the release sees this too
    _from_finalizer(a, pool_id)


def pool_use_count(a: AllocatorCore, pool_id: tuple[int, int]) -> int:
    """References to private pool ``pool_id`` (0 if it does not exist)."""
    pool_id = check_pool_id(pool_id)
    with a._lock:
        if a._gc_pending:
            a._drain_pending_locked()
        return a._pools.use_count(pool_id)
