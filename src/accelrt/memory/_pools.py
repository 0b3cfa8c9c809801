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
from ._block import DEFAULT_POOL, K_SMALL_SIZE, KEY_SHIFT, BlockPool, PrivatePool

if TYPE_CHECKING:
    from .._backend import Backend
    from ._block import Block
    from ._stats import DeviceStats

__all__ = ["PrivatePools", "check_pool_id", "raw_free", "raw_malloc"]


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


class PrivatePools:
    """The private pools of one allocator and the captures routing allocations to them
    (guarded by the allocator's lock; the allocator's public methods take it).

    Attributes:
        private: pool id -> :class:`PrivatePool`, every live one.
        freeable: the pools whose references dropped to zero (their cached memory is released
            by ``empty_cache``).
        captures: ``(pool id, stream filter)`` of each active ``begin_allocate_to_pool``, in
            order (the last accepting one wins).

    Example::

        >>> from accelrt.memory._pools import PrivatePools
        >>> from accelrt.memory._stats import DeviceStats
        >>> pools = PrivatePools(DeviceStats(-1))
        >>> pools.begin((1, 1), None); pools.pool_for(512, 0).owner.id
        (1, 1)
        >>> pools.end((1, 1)), pools.release((1, 1)), sorted(pools.freeable)
        (True, None, [(1, 1)])
    """

    __slots__ = ("_stats", "captures", "freeable", "private")

    def __init__(self, stats: DeviceStats) -> None:
        self._stats = stats
        self.private: dict[tuple[int, int], PrivatePool] = {}
        self.freeable: dict[tuple[int, int], PrivatePool] = {}
        self.captures: list[tuple[tuple[int, int], Callable[[int], bool] | None]] = []

    def pool_for(self, rounded: int, stream: int) -> BlockPool | None:
        """The private block pool a request of ``rounded`` bytes on ``stream`` goes to, or
        ``None`` when no capture accepts ``stream``."""
        for pool_id, filt in reversed(self.captures):
            if filt is None or filt(stream):
                pp = self.private[pool_id]
                return pp.small if rounded <= K_SMALL_SIZE else pp.large
        return None

    def begin(self, pool_id: tuple[int, int], stream_filter: Callable[[int], bool] | None
              ) -> None:
        """Start routing to ``pool_id`` (created, or one more reference)."""
        for pid, _ in self.captures:
            if pid == pool_id:
                raise RuntimeError(f"begin_allocate_to_pool: already allocating to pool "
                                   f"{pool_id}")
        self.create(pool_id)
        self.captures.append((pool_id, stream_filter))

    def end(self, pool_id: tuple[int, int]) -> bool:
        """Stop routing to ``pool_id``; False if it was not routed to."""
        for i, (pid, _) in enumerate(self.captures):
            if pid == pool_id:
                del self.captures[i]
                return True
        return False

    def create(self, pool_id: tuple[int, int], *, no_split: bool = False,
               allocator: Any = None) -> None:
        """Create ``pool_id`` (with these options) or take one more reference to it."""
        pp = self.private.get(pool_id)
        if pp is None:
            hot = self._stats.hot
            self.private[pool_id] = PrivatePool(pool_id, hot[1], hot[2], no_split=no_split,
                                                allocator=allocator)
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
                for keys in p.free.values():
                    for key in keys:
                        total += key >> KEY_SHIFT
        return total


def raw_malloc(backend: Backend, index: int, pool: BlockPool, size: int, stream: int) -> int:
    """A new segment for ``pool``: from its ``MemPool``'s pluggable allocator if it has one,
    else from the backend; 0 when out of memory."""
    owner = pool.owner
    if owner is not None and owner.allocator is not None:
        return int(owner.allocator._raw_alloc(backend, index, size, stream))
    return backend.malloc(index, size)


def raw_free(backend: Backend, index: int, blk: Block) -> None:
    """Give a whole segment back to where :func:`raw_malloc` got it."""
    owner = blk.pool.owner
    if owner is not None and owner.allocator is not None:
        owner.allocator._raw_free(blk.addr)
    else:
        backend.free(index, DevicePtr(blk.addr))
