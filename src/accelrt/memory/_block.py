"""Blocks, pools and private pools of the caching allocator.

A *segment* is one backend allocation (or one virtual reservation, for expandable segments);
it is cut into address-ordered :class:`Block`\\ s linked by ``prev``/``next``. Free mapped
blocks sit in their :class:`BlockPool`'s per-stream :class:`~._free_list.FreeList`, ordered
by (size, address) so that the first block at or above a request's size is its best fit
(smallest size, then lowest address) on that stream. Unmapped blocks of expandable segments
sit in a per-stream sorted list of addresses.

Every object here is guarded by the owning allocator's lock.

Example::

    >>> from accelrt.memory._block import Block, BlockPool, fl_add
    >>> from accelrt.memory._stats import HotCounters
    >>> pool = BlockPool(is_small=True, owner=None, hot=HotCounters(), type_index=1)
    >>> b = Block(0x1000, 2048, 0, pool)
    >>> fl_add(pool, 0, b)
    >>> pool.free_list(0).first_ge(1024) is b, pool.free[0].keys()
    (True, [(2048, 4096)])
"""

from __future__ import annotations

import bisect as _bisect
from typing import TYPE_CHECKING, Any, Final

# the compiled build's C type where it is built, else the pure build's (to mypyc, a class it
# does not compile: either may come)
from ._free_list import DEFAULT_BUCKET_MAX, FreeList

if TYPE_CHECKING:
    from ._stats import HotCounters

__all__ = ["BUCKET_MAX", "DEFAULT_POOL", "K_MIN_BLOCK", "K_MIN_LARGE_ALLOC", "K_ROUND_LARGE",
           "K_SMALL_BUFFER", "K_SMALL_SIZE", "Block", "BlockPool", "FreeList", "PrivatePool",
           "StreamUse",
           "count_alloc", "fl_add", "fl_first_ge", "fl_insert", "fl_pop_ge", "fl_remove",
           "fl_replace", "mergeable", "new_free_list", "roundup_power2_next_division",
           "unmapped_add", "unmapped_remove"]

#: ``bisect``'s functions, bound here as ``Final`` names: the compiled build
#: (mypyc) holds a ``Final`` in a C variable, where a name imported with
#: ``from bisect import ...`` would be a module-dict lookup on every call. The allocator's
#: modules import them from here.
bisect_left: Final = _bisect.bisect_left
bisect_right: Final = _bisect.bisect_right
insort: Final = _bisect.insort

# PyTorch's allocator constants
K_MIN_BLOCK: Final = 512                 # every block is a multiple of this
K_SMALL_SIZE: Final = 1 << 20            # largest request served by the small pool
K_SMALL_BUFFER: Final = 2 << 20          # segment size of the small pool
K_MIN_LARGE_ALLOC: Final = 10 << 20      # requests from here on get a segment of their own size
K_ROUND_LARGE: Final = 2 << 20           # ... rounded up to this
#: The id of the default (not private) pools.
DEFAULT_POOL: Final = (0, 0)

#: A stream recorded on a block with ``record_stream``: a stream handle of the allocator's own
#: device (the common case, kept a bare int), or ``(device index, stream handle)`` for a stream
#: of another device of the same backend (PyTorch's ``stream_set`` holds ``CUDAStream``\ s,
#: which carry their device).
StreamUse = int | tuple[int, int]


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
        stream_uses: streams recorded with ``record_stream`` (``None`` when empty): see
            :data:`StreamUse`.
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
        self.stream_uses: set[StreamUse] | None = None
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


#: The free lists' methods as ``Final`` names, which the allocator calls as functions
#: (``fl_pop_ge(fl, size)`` for ``fl.pop_ge(size)``): in the compiled build a ``Final`` is a C
#: variable, and a call through it skips the method lookup of every ``fl.pop_ge(...)``.
fl_pop_ge: Final = FreeList.pop_ge
fl_first_ge: Final = FreeList.first_ge
fl_insert: Final = FreeList.add
fl_remove: Final = FreeList.remove
fl_replace: Final = FreeList.replace

#: A stream's free list splits a bucket in two past this many keys (read when a list is made:
#: tests set it small to reach the bucket logic with few blocks).
BUCKET_MAX = DEFAULT_BUCKET_MAX


def new_free_list() -> FreeList[Block]:
    """An empty free list (buckets of :data:`BUCKET_MAX`)."""
    return FreeList(BUCKET_MAX)


def fl_add(pool: BlockPool, stream: int, b: Block) -> None:
    """List free block ``b`` under its size and address in ``pool``'s free list of ``stream``
    (made if missing)."""
    fl_insert(pool.make_free_list(stream), b.size, b.addr, b)


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
        free: stream -> the :class:`~._free_list.FreeList` of its free mapped blocks; a list
            is made by :meth:`make_free_list` and never dropped (:meth:`free_list` remembers
            the last stream's).
        unmapped: stream -> sorted list of addresses of unmapped (expandable) blocks.
        is_small: the small (<= 1 MiB) pool.
        owner: the :class:`PrivatePool`, or ``None`` for the default pools.
        hot: the :class:`~accelrt.memory._stats.HotCounters` of this pool's type.
        type_index: 1 (small_pool) or 2 (large_pool), the stat row.
        gc_calls: free-block lookups counted for the garbage collector's ages.
        no_split: never split a block of this pool (a ``MemPool(no_split=True)``'s pools).
    """

    __slots__ = ("free", "gc_calls", "hot", "is_small", "last_free", "last_stream", "no_split",
                 "owner", "type_index", "unmapped")

    def __init__(self, is_small: bool, owner: PrivatePool | None, hot: HotCounters,
                 type_index: int) -> None:
        self.free: dict[int, FreeList[Block]] = {}
        self.unmapped: dict[int, list[int]] = {}
        self.is_small = is_small
        self.owner = owner
        self.hot = hot
        self.type_index = type_index
        self.gc_calls = 0
        self.no_split = False
        # the last stream free_list found, and its list (None: none yet)
        self.last_stream = 0
        self.last_free: FreeList[Block] | None = None

    def free_list(self, stream: int) -> FreeList[Block] | None:
        """``free.get(stream)``: the free list of ``stream``, or ``None``. The last stream's
        is remembered (lists are never dropped): a malloc or free on the stream of the one
        before asks no dict (one lookup with the stream boxed, otherwise)."""
        fl = self.last_free
        if fl is not None and self.last_stream == stream:
            return fl
        fl = self.free.get(stream)
        if fl is not None:
            self.last_stream = stream
            self.last_free = fl
        return fl

    def make_free_list(self, stream: int) -> FreeList[Block]:
        """The free list of ``stream``, made (empty) if missing: the one way lists are
        made."""
        fl = self.free_list(stream)
        if fl is None:
            fl = self.free[stream] = new_free_list()
            self.last_stream = stream
            self.last_free = fl
        return fl

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


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """``size`` rounded up to the next of ``divisions`` equal steps between two powers of two
    (PyTorch's ``roundup_power2_next_division``, the ``roundup_power2_divisions`` option).

    Example::

        >>> from accelrt.memory._block import roundup_power2_next_division
        >>> roundup_power2_next_division(1200 * 2**10, 4), 1280 * 2**10
        (1310720, 1310720)
    """
    if size & (size - 1) == 0:
        return size
    floor_pow2 = 1 << (size.bit_length() - 1)
    step = floor_pow2 >> (divisions.bit_length() - 1)
    if step == 0:
        return 2 * floor_pow2
    f = size & ~(step - 1)
    return size if f == size else f + step
