"""Private memory pools of the caching allocator (``MemPool``, graph capture pools).

While ``begin_allocate_to_pool(pool_id, filter)`` is in force, allocations on the streams the
filter accepts come from the private pool's own small and large block pools; the pool is
reference-counted and its cached memory becomes releasable when the count drops to zero.

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

from .._handles import DevicePtr
from ._block import DEFAULT_POOL, K_SMALL_SIZE, BlockPool, PrivatePool

if TYPE_CHECKING:
    import collections

    from .._backend import Backend
    from ._block import Block
    from ._lock import FastLock
    from ._stats import DeviceStats

__all__ = ["PoolsMixin", "check_pool_id"]


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
    if pool_id == DEFAULT_POOL:
        raise ValueError("pool_id (0, 0) names the default pool; use a private pool id")
    return pool_id


class PoolsMixin:
    """Private-pool methods of the caching allocator (state guarded by its ``_lock``).

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> DeviceCachingAllocator(get_backend("cpu"), 0).pool_use_count((3, 3))
        0
    """

    _lock: FastLock
    _b: Backend
    _index: int
    _stats: DeviceStats
    _small: BlockPool
    _large: BlockPool
    _captures: list[tuple[tuple[int, int], Callable[[int], bool] | None]]
    _private: dict[tuple[int, int], PrivatePool]
    _freeable: dict[tuple[int, int], PrivatePool]
    _fast: bool
    _gc_pending: collections.deque[int | tuple[int, int]]

    def _update_simple(self) -> None:  # pragma: no cover - provided by the allocator
        raise NotImplementedError

    def _drain_pending_locked(self) -> None:  # pragma: no cover - provided by the allocator
        raise NotImplementedError

    def _raw_malloc(self, pool: BlockPool, size: int, stream: int) -> int:
        """A new segment for ``pool``: from its ``MemPool``'s pluggable allocator if it has
        one, else from the backend; 0 when out of memory."""
        owner = pool.owner
        if owner is not None and owner.allocator is not None:
            return int(owner.allocator._raw_alloc(self._b, self._index, size, stream))
        return self._b.malloc(self._index, size)

    def _raw_free(self, blk: Block) -> None:
        """Give a whole segment back to where :meth:`_raw_malloc` got it."""
        owner = blk.pool.owner
        if owner is not None and owner.allocator is not None:
            owner.allocator._raw_free(blk.addr)
        else:
            self._b.free(self._index, DevicePtr(blk.addr))

    def _get_private_pool(self, rounded: int, stream: int) -> BlockPool:
        for pool_id, filt in reversed(self._captures):
            if filt is None or filt(stream):
                pp = self._private[pool_id]
                return pp.small if rounded <= K_SMALL_SIZE else pp.large
        return self._small if rounded <= K_SMALL_SIZE else self._large

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
        pool_id = check_pool_id(pool_id)
        if stream_filter is not None and not callable(stream_filter):
            raise TypeError(f"stream_filter must be callable or None, got {stream_filter!r}")
        with self._lock:
            if self._gc_pending:
                self._drain_pending_locked()   # a queued release_pool of this id comes first
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
        pool_id = check_pool_id(pool_id)
        with self._lock:
            for i, (pid, _) in enumerate(self._captures):
                if pid == pool_id:
                    del self._captures[i]
                    self._update_simple()
                    return
        raise RuntimeError(f"end_allocate_to_pool: not allocating to pool {pool_id}")

    def create_pool(self, pool_id: tuple[int, int], *, no_split: bool = False,
                    allocator: Any = None) -> None:
        """Create private pool ``pool_id`` or take one more reference to it.

        Args:
            pool_id: the pool id.
            no_split: the new pool never splits a segment (PyTorch's ``MemPool(no_split=)``).
            allocator: a ``PluggableAllocator`` whose library allocates and frees the new
                pool's segments (``MemPool(allocator=)``); ``None``: the backend's memory.

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
        with self._lock:
            if self._gc_pending:
                self._drain_pending_locked()   # a queued release_pool of this id comes first
            pp = self._private.get(pool_id)
            if pp is None:
                hot = self._stats.hot
                self._private[pool_id] = PrivatePool(pool_id, hot[1], hot[2],
                                                     no_split=no_split, allocator=allocator)
            else:
                pp.use_count += 1
                self._freeable.pop(pool_id, None)

    def release_pool(self, pool_id: tuple[int, int]) -> None:
        """Drop one reference to private pool ``pool_id``; at zero its cached memory becomes
        releasable by :meth:`empty_cache` (blocks still allocated stay valid).

        Raises:
            ValueError: no such pool, or no reference left.
        """
        pool_id = check_pool_id(pool_id)
        with self._lock:
            self._release_pool_locked(pool_id)

    def _release_pool_locked(self, pool_id: tuple[int, int]) -> None:
        pp = self._private.get(pool_id)
        if pp is None or pp.use_count <= 0:
            raise ValueError(f"release_pool: no live private pool {pool_id}")
        pp.use_count -= 1
        if pp.use_count == 0:
            self._freeable[pool_id] = pp

    def release_pool_from_finalizer(self, pool_id: tuple[int, int]) -> None:
        """:meth:`release_pool` for finalizers (``Graph.__del__``): never blocks.

        If the lock is held (maybe by this very thread, the garbage collector having run the
        finalizer inside the allocator's critical section) the release is queued and done at
        the holder's next drain point, like :meth:`free_from_finalizer`.

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
        self._gc_pending.append(pool_id)
        if self._lock.try_acquire():
            try:
                self._drain_pending_locked()
            finally:
                self._lock.release()

    def pool_use_count(self, pool_id: tuple[int, int]) -> int:
        """References to private pool ``pool_id`` (0 if it does not exist)."""
        pool_id = check_pool_id(pool_id)
        with self._lock:
            if self._gc_pending:
                self._drain_pending_locked()
            pp = self._private.get(pool_id)
            return 0 if pp is None else pp.use_count
