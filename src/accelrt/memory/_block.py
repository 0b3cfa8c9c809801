"""Blocks, pools and private pools of the caching allocator.

A *segment* is one backend allocation (or one virtual reservation, for expandable segments);
it is cut into address-ordered :class:`Block`\\ s linked by ``prev``/``next``. Free mapped
blocks sit in their :class:`BlockPool`'s per-stream free list, a sorted ``list`` of integer
keys ``size << 64 | address`` so that ``bisect`` finds the best fit (smallest size, then
lowest address) of one stream. Unmapped blocks of expandable segments sit in a per-stream
sorted list of addresses.

Every object here is guarded by the owning allocator's lock.

Example::

    >>> from accelrt.memory._block import Block, BlockPool, free_key
    >>> from accelrt.memory._stats import HotCounters
    >>> pool = BlockPool(is_small=True, owner=None, hot=HotCounters(), type_index=1)
    >>> b = Block(0x1000, 2048, 0, pool)
    >>> free_key(b) == (2048 << 64) | 0x1000
    True
"""

from __future__ import annotations

import bisect as _bisect
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from ._stats import HotCounters

__all__ = ["ADDR_MASK", "DEFAULT_POOL", "KEY_SHIFT", "K_MIN_BLOCK", "K_MIN_LARGE_ALLOC",
           "K_ROUND_LARGE", "K_SMALL_BUFFER", "K_SMALL_SIZE", "Block", "BlockPool", "FreeList",
           "PrivatePool", "SMALL_MAX", "count_alloc", "fl_add", "fl_iter_ge", "fl_iter_lt",
           "fl_pop_ge", "fl_remove", "free_key", "mergeable", "unmapped_add", "unmapped_remove"]

#: ``bisect``'s functions, bound here as ``Final`` names: the compiled build
#: (mypyc) holds a ``Final`` in a C variable, where a name imported with
#: ``from bisect import ...`` would be a module-dict lookup on every call. The allocator's
#: modules import them from here.
bisect_left: Final = _bisect.bisect_left
bisect_right: Final = _bisect.bisect_right
insort: Final = _bisect.insort

KEY_SHIFT: Final = 64
ADDR_MASK: Final = (1 << KEY_SHIFT) - 1

# PyTorch's allocator constants
K_MIN_BLOCK: Final = 512                 # every block is a multiple of this
K_SMALL_SIZE: Final = 1 << 20            # largest request served by the small pool
K_SMALL_BUFFER: Final = 2 << 20          # segment size of the small pool
K_MIN_LARGE_ALLOC: Final = 10 << 20      # requests from here on get a segment of their own size
K_ROUND_LARGE: Final = 2 << 20           # ... rounded up to this
#: The id of the default (not private) pools.
DEFAULT_POOL: Final = (0, 0)


class Block:
    """A contiguous piece of a segment.

    Attributes:
        addr, size: the address range.
        requested: the size the user asked for at the last allocation (stale once freed).
        stream: the allocation stream (blocks never move between streams).
        pool: the :class:`BlockPool` it belongs to.
        prev, next: neighbours in the same segment, or ``None``.
        allocated: handed out and not yet freed by the user.
        event_count: outstanding stream events before the free completes.
        stream_uses: streams recorded with ``record_stream`` (``None`` when empty).
        mapped: False for unmapped ranges of expandable segments.
        exp: the :class:`~accelrt.memory._expandable.ExpandableSegment`, or ``None``.
        gc_base: the pool's free-block lookup count when the block was last cached.
        frames: stack of the last allocation (history recording), or ``None``.
        seg_frames: stack of the segment allocation (only on a segment's first block).
    """

    __slots__ = (
        "addr",
        "allocated",
        "event_count",
        "exp",
        "frames",
        "gc_base",
        "mapped",
        "next",
        "pool",
        "prev",
        "requested",
        "seg_frames",
        "size",
        "stream",
        "stream_uses",
    )

    def __init__(self, addr: int, size: int, stream: int, pool: BlockPool,
                 exp: Any = None, mapped: bool = True) -> None:
        self.addr = addr
        self.size = size
        self.requested = 0
        self.stream = stream
        self.pool = pool
        self.prev: Block | None = None
        self.next: Block | None = None
        self.allocated = False
        self.event_count = 0
        self.stream_uses: set[int] | None = None
        self.mapped = mapped
        self.exp = exp
        self.gc_base = 0
        self.frames: list[dict[str, Any]] | None = None
        self.seg_frames: list[dict[str, Any]] | None = None

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def __repr__(self) -> str:
        state = "allocated" if self.allocated else ("mapped" if self.mapped else "unmapped")
        return f"<Block {self.addr:#x}+{self.size} stream={self.stream} {state}>"


def count_alloc(blk: Block, size: int) -> None:
    """Hand out ``blk`` for a request of ``size`` bytes: mark it allocated and count the
    allocation in its pool's counters (the peaks settle later: ``grew``)."""
    blk.allocated = True
    blk.requested = size
    bsize = blk.size
    c = blk.pool.hot
    c.allocations += 1
    c.allocated_bytes += bsize
    c.requested_bytes += size
    c.allocations_sum += 1
    c.allocated_bytes_sum += bsize
    c.requested_bytes_sum += size
    c.grew = True


def mergeable(b: Block | None, mapped: bool = True) -> bool:
    """``b`` is a free block that a neighbour mapped as ``mapped`` merges with (PyTorch's
    ``try_merge_blocks``): not allocated, awaiting no events, recorded on no other stream,
    and mapped likewise."""
    return (b is not None and not b.allocated and not b.event_count and not b.stream_uses
            and b.mapped == mapped)


def free_key(b: Block) -> int:
    """The free-list sort key of a block: size first, then address."""
    return (b.size << KEY_SHIFT) | b.addr


#: A :class:`FreeList` bucket splits in two when it grows past this many keys.
BUCKET_MAX = 1024
#: A per-stream free list is a plain sorted ``list`` (the fastest for few keys) until it grows
#: past this many keys; then it becomes a :class:`FreeList` (logarithmic for many).
SMALL_MAX = 2048


class FreeList:
    """A sorted collection of distinct free-list keys with logarithmic updates.

    The keys sit in sorted buckets of at most :data:`BUCKET_MAX` (``lists``), with the last
    key of each bucket in ``maxes``: a lookup is a bisection of ``maxes`` and one of a
    bucket, an insertion or removal moves at most one bucket's keys, and a bucket is split or
    dropped only once per many updates. So every operation costs O(log n) in the number of
    free blocks, where one sorted ``list`` costs O(n) per insertion or removal.

    A stream's free list starts as a plain sorted ``list`` and becomes a ``FreeList`` past
    :data:`SMALL_MAX` keys; the ``fl_*`` functions below work on either (the allocator's hot
    paths inline the plain-list case).

    Example::

        >>> from accelrt.memory._block import FreeList
        >>> fl = FreeList([1, 5, 9])
        >>> fl.pop_ge(4), list(fl), len(fl)
        (5, [1, 9], 2)
        >>> fl.add(3); list(fl.iter_ge(2)), list(fl.iter_lt(9))
        ([3, 9], [3, 1])
    """

    __slots__ = ("lists", "maxes")

    def __init__(self, keys: list[int] | None = None) -> None:
        """``keys``: sorted distinct keys to start with."""
        self.lists: list[list[int]] = []
        self.maxes: list[int] = []
        if keys:
            half = BUCKET_MAX // 2
            self.lists = [keys[i:i + half] for i in range(0, len(keys), half)]
            self.maxes = [sub[-1] for sub in self.lists]

    def __len__(self) -> int:
        return sum(map(len, self.lists))

    def __bool__(self) -> bool:
        return bool(self.maxes)

    def __iter__(self) -> Iterator[int]:
        for sub in self.lists:
            yield from sub

    def __repr__(self) -> str:
        return f"FreeList({list(self)!r})"

    def add(self, key: int) -> None:
        """Add ``key`` (not present)."""
        maxes = self.maxes
        j = bisect_left(maxes, key)
        if j == len(maxes):
            if not j:
                self.lists.append([key])
                maxes.append(key)
                return
            j -= 1
            sub = self.lists[j]
            sub.append(key)
            maxes[j] = key
        else:
            sub = self.lists[j]
            insort(sub, key)
        if len(sub) > BUCKET_MAX:
            self.split(j)

    def split(self, j: int) -> None:
        """Cut bucket ``j`` in two halves."""
        sub = self.lists[j]
        half = len(sub) >> 1
        self.lists.insert(j + 1, sub[half:])
        del sub[half:]
        self.maxes.insert(j, sub[-1])

    def remove(self, key: int) -> None:
        """Remove ``key`` (present)."""
        maxes = self.maxes
        j = bisect_left(maxes, key)
        sub = self.lists[j]
        i = bisect_left(sub, key)
        del sub[i]
        if not sub:
            del self.lists[j]
            del maxes[j]
        elif i == len(sub):
            maxes[j] = sub[-1]

    def pop_ge(self, key: int) -> int:
        """Remove and return the smallest key ``>= key``; -1 if there is none."""
        maxes = self.maxes
        j = bisect_left(maxes, key)
        if j == len(maxes):
            return -1
        sub = self.lists[j]
        i = bisect_left(sub, key)
        k = sub.pop(i)
        if not sub:
            del self.lists[j]
            del maxes[j]
        elif i == len(sub):
            maxes[j] = sub[-1]
        return k

    def iter_ge(self, key: int) -> Iterator[int]:
        """The keys ``>= key``, ascending (do not change the list while iterating)."""
        maxes = self.maxes
        j = bisect_left(maxes, key)
        if j == len(maxes):
            return
        lists = self.lists
        sub = lists[j]
        yield from sub[bisect_left(sub, key):]
        for sub in lists[j + 1:]:
            yield from sub

    def iter_lt(self, key: int) -> Iterator[int]:
        """The keys ``< key``, descending (do not change the list while iterating)."""
        maxes = self.maxes
        j = bisect_left(maxes, key)
        lists = self.lists
        if j < len(maxes):
            sub = lists[j]
            yield from reversed(sub[:bisect_left(sub, key)])
        for sub in reversed(lists[:j]):
            yield from reversed(sub)


def fl_add(free: dict[int, list[int] | FreeList], stream: int, key: int) -> None:
    """Add ``key`` to ``free[stream]`` (created if missing; a long plain list is converted)."""
    fl = free.get(stream)
    if fl is None:
        free[stream] = [key]
    elif type(fl) is list:
        insort(fl, key)
        if len(fl) > SMALL_MAX:
            free[stream] = FreeList(fl)
    else:
        fl.add(key)  # type: ignore[union-attr]


def fl_remove(fl: list[int] | FreeList, key: int) -> None:
    """Remove ``key`` (present) from a free list."""
    if type(fl) is list:
        del fl[bisect_left(fl, key)]
    else:
        fl.remove(key)


def fl_pop_ge(fl: list[int] | FreeList, key: int) -> int:
    """Remove and return the smallest key ``>= key`` of a free list; -1 if none."""
    if type(fl) is list:
        i = bisect_left(fl, key)
        return fl.pop(i) if i < len(fl) else -1
    return fl.pop_ge(key)  # type: ignore[union-attr]


def fl_iter_ge(fl: list[int] | FreeList, key: int) -> Iterator[int]:
    """The keys ``>= key`` of a free list, ascending (no changes while iterating)."""
    if type(fl) is list:
        return iter(fl[bisect_left(fl, key):])
    return fl.iter_ge(key)  # type: ignore[union-attr]


def fl_iter_lt(fl: list[int] | FreeList, key: int) -> Iterator[int]:
    """The keys ``< key`` of a free list, descending (no changes while iterating)."""
    if type(fl) is list:
        return reversed(fl[:bisect_left(fl, key)])
    return fl.iter_lt(key)  # type: ignore[union-attr]


def unmapped_add(b: Block) -> None:
    """Add unmapped block ``b`` to its pool's per-stream list of unmapped addresses."""
    insort(b.pool.unmapped.setdefault(b.stream, []), b.addr)


def unmapped_remove(b: Block) -> None:
    """Remove unmapped block ``b`` from its pool's per-stream list of unmapped addresses."""
    ul = b.pool.unmapped[b.stream]
    del ul[bisect_left(ul, b.addr)]


class BlockPool:
    """The free blocks of one pool (small or large, default or private).

    Attributes:
        free: stream -> sorted free-list keys (:func:`free_key`) of free mapped blocks: a
            plain ``list``, or a :class:`FreeList` once long.
        unmapped: stream -> sorted list of addresses of unmapped (expandable) blocks.
        is_small: the small (<= 1 MiB) pool.
        owner: the :class:`PrivatePool`, or ``None`` for the default pools.
        hot: the :class:`~accelrt.memory._stats.HotCounters` of this pool's type.
        type_index: 1 (small_pool) or 2 (large_pool), the stat row.
        gc_calls: free-block lookups counted for the garbage collector's ages.
        no_split: never split a block of this pool (a ``MemPool(no_split=True)``'s pools).
    """

    __slots__ = ("free", "gc_calls", "hot", "is_small", "no_split", "owner", "type_index",
                 "unmapped")

    def __init__(self, is_small: bool, owner: PrivatePool | None, hot: HotCounters,
                 type_index: int) -> None:
        self.free: dict[int, list[int] | FreeList] = {}
        self.unmapped: dict[int, list[int]] = {}
        self.is_small = is_small
        self.owner = owner
        self.hot = hot
        self.type_index = type_index
        self.gc_calls = 0
        self.no_split = False

    def free_block_count(self) -> int:
        return sum(len(v) for v in self.free.values())

    def owner_id(self) -> tuple[int, int]:
        """The id of the private pool this pool belongs to, ``(0, 0)`` for the default pools
        (PyTorch's ``BlockPool::owner_MempoolId``): the ``pool_id`` of trace entries."""
        owner = self.owner
        return DEFAULT_POOL if owner is None else owner.id


class PrivatePool:
    """A private memory pool (``MemPool``, graph capture): its own small and large pools.

    Attributes:
        id: the pool id, a tuple of two ints.
        use_count: references from ``MemPool`` objects and active ``begin_allocate_to_pool``.
        reserved: bytes of device memory currently held by the pool's segments.
        no_split: segments are never split: each allocation gets a whole segment, and a
            cached segment serves one allocation at a time (``MemPool(no_split=True)``).
        allocator: the raw allocator of the pool's segments (a ``PluggableAllocator``), or
            ``None`` for the backend's own memory.
        use_on_oom: a request outside private pools that would run out of memory may take
            one of this pool's cached blocks (``MemPool(use_on_oom=True)``).
    """

    __slots__ = ("allocator", "id", "large", "no_split", "reserved", "small", "use_count",
                 "use_on_oom")

    def __init__(self, pool_id: tuple[int, int], small_hot: HotCounters,
                 large_hot: HotCounters, *,
                 no_split: bool = False, allocator: Any = None,
                 use_on_oom: bool = False) -> None:
        self.id = pool_id
        self.use_count = 1
        self.use_on_oom = use_on_oom
        self.reserved = 0
        self.no_split = no_split
        self.allocator = allocator
        self.small = BlockPool(True, self, small_hot, 1)
        self.large = BlockPool(False, self, large_hot, 2)
        self.small.no_split = self.large.no_split = no_split
