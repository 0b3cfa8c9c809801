"""The named fast paths of the allocator's ``malloc`` and ``free``, each the general code
written out for one common case (called with the lock held; each says when it does not apply).

- :func:`malloc_cached`: a request served by a cached block (default rounding and pools, no
  events, history, captures, expandable segments or oversize limit);
- :func:`free_cached`: a free of a block used on its stream only, without history;
- :func:`defer_free` / :func:`reuse_deferred`: a free that leaves its segment free is
  deferred, and a malloc of the same size on the same stream right after takes it back.

The general code they mirror is :meth:`DeviceCachingAllocator._malloc_locked`
and :meth:`DeviceCachingAllocator._free_locked` (with :mod:`._fit`);
``tests/memory/test_allocator_fast_paths.py`` runs
:class:`~accelrt.testing._allocators.GeneralPathAllocator` (these paths off) beside the plain
allocator and compares their state after every step, and ``bench/bench_allocator.py`` times
each against the general code. Each stays only because the compiled build's general code is
more than 10% slower in the same run (``docs/memory.md``, "Which fast paths stay"). They
split with :meth:`DeviceCachingAllocator._cut_block`, merge with
:meth:`DeviceCachingAllocator._join`, count with :func:`._block.count_alloc` and update the
free lists with their own methods, as the general code does; what they keep of their own is
the case analysis. They spell the block constants as literals (a constant load in either
build).

Example::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory._allocator import DeviceCachingAllocator
    >>> from accelrt.memory._fast import malloc_cached
    >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
    >>> a.free(a.malloc(4096, 0)); a.drain_pending()
    True
    >>> with a._lock:
    ...     a._flush_deferred()
    ...     p = malloc_cached(a, 4096, 0)   # the cached block, as the general code finds it
    >>> p != 0, a.memory_allocated()
    (True, 4096)
    >>> a.free(p); a.empty_cache()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._block import (
    Block,
    count_alloc,
    fl_first_ge,
    fl_insert,
    fl_pop_ge,
    fl_remove,
    fl_replace,
    mergeable,
)

if TYPE_CHECKING:
    from ._allocator import DeviceCachingAllocator

__all__ = ["defer_free", "free_cached", "malloc_cached", "reuse_deferred"]


def malloc_cached(a: DeviceCachingAllocator, size: int, stream: int) -> int:
    """The fast path of :meth:`DeviceCachingAllocator.malloc` (``_lock`` held, ``_fast_malloc``:
    default rounding and pools; no events, history, captures, expandable segments, oversize
    limit or deferred free): the address of the best-fit cached block, split as the general code
    splits it, or 0 (nothing changed) when no cached block fits.

    The general code (:meth:`DeviceCachingAllocator._malloc_locked` ->
    :func:`._fit.get_free_block` -> :meth:`DeviceCachingAllocator._cut_block`) written out for
    this case, which it must match: ``tests/memory/test_allocator_fast_paths.py`` runs both on
    the same sequences and compares the state, and ``bench/bench_allocator.py`` times both.
    (Locals are few and reused: each one costs every call its initialization and clearing.)"""
    rounded = (size + 511) & -512   # K_MIN_BLOCK (literals: LOAD_CONST)
    if rounded <= 1048576:          # K_SMALL_SIZE
        pool = a._small
        split_min = 512
    else:
        pool = a._large
        split_min = 1048577   # K_SMALL_SIZE + 1
    fl = pool.free_list(stream)
    if fl is None:
        return 0   # (the general path)
    blk = fl_pop_ge(fl, rounded)
    if blk is None:
        return 0   # none fits
    addr = blk.addr
    c = pool.hot
    bsize = blk.size    # (the block's size once allocated)
    remaining = bsize - rounded
    if remaining >= split_min:
        # the split of _malloc_locked (_cut_block); inactive_split first
        if blk.next is not None or blk.prev is not None:   # already split
            if a._stats.dirty_split:
                a._stats.settle_split()
            c.inactive_split_bytes -= rounded
        else:
            c.count_split(remaining)
        rest = a._cut_block(blk, rounded)
        fl_insert(fl, remaining, rest.addr, rest)
        rest.gc_base = pool.gc_calls
    elif blk.next is not None or blk.prev is not None:
        if a._stats.dirty_split:
            a._stats.settle_split()
        c.inactive_split_bytes -= bsize
        c.inactive_split -= 1
    count_alloc(blk, size)
    return addr


def reuse_deferred(a: DeviceCachingAllocator, size: int, stream: int) -> int:
    """The deferred-free fast path of :meth:`DeviceCachingAllocator.malloc` (``_lock`` held, a
    free deferred): immediate reuse of the block that :meth:`DeviceCachingAllocator.free` just
    cached, whose free-list insertion (and merge with the free block after it) free deferred
    because that block is this request's best fit (see :func:`defer_free` and
    :meth:`DeviceCachingAllocator._flush_deferred`). The eager free + this malloc would merge
    and split it again: the same blocks result, and only the statistics change. Mirrors the
    eager code (the fast-path tests compare it with the general code). Returns the address, or 0
    (nothing changed) if the request is not that block's:
    :meth:`DeviceCachingAllocator._malloc_locked` then completes the free and serves the
    request."""
    d = a._deferred
    assert d is not None   # (malloc calls this only then)
    rounded = (size + 511) & -512
    pool = d.pool   # (a default pool: is_small tells which)
    if d.size != rounded or d.stream != stream or (
            pool.is_small is not (rounded <= 1048576)):   # K_SMALL_SIZE
        return 0   # not that block's request
    a._deferred = None
    a._defer_misses = 0
    # (_fast_flags: a free is deferred only with _fast: no history)
    a._fast_malloc = True
    a._free_slow = False
    c = pool.hot
    nx = d.next
    if nx is not None:
        # the merge with nx and the split that undoes it: inactive_split
        # goes down and back up, counting one more split
        c.inactive_split_sum += 1
        c.inactive_split_bytes_sum += nx.size
        nx.requested = 0
        nx.frames = None
        nx.gc_base = pool.gc_calls
    d.allocated = True
    n = d.requested
    if size != n:
        if size < n:
            if c.grew or c.other_row.grew:   # (peaks before a decrease)
                a._stats.settle()
        else:
            c.grew = True
        d.requested = size
        c.requested_bytes += size - n
    c.allocations_sum += 1
    c.allocated_bytes_sum += rounded
    c.requested_bytes_sum += size
    return d.addr


def defer_free(a: DeviceCachingAllocator, blk: Block) -> bool:
    """The deferred free, a fast path of :meth:`DeviceCachingAllocator.free` (``_lock`` held,
    ``_fast``, ``blk`` live and first in its segment): True if the free was deferred.

    A free that leaves its whole segment free (the block, and the rest of the segment after it
    if that is free) is deferred when the segment is the best fit of a request of this block's
    size: an immediate malloc of the same size on the same stream takes the block back
    (:func:`reuse_deferred`), counting only the statistics that change over a free and a malloc;
    anything else first completes the free through the general code
    (:meth:`DeviceCachingAllocator._flush_deferred`). Deferrals not reused make the next ones
    rarer (``_defer_skip``: 1, 3, 7, ... 63 such frees are skipped)."""
    nx = blk.next
    pool = blk.pool
    if not (nx is None or (nx.next is None and not nx.allocated)) or pool.owner is not None:
        return False
    if a._defer_skip:
        a._defer_skip -= 1
        return False
    fl = pool.make_free_list(blk.stream)   # (as the eager free leaves it)
    size = blk.size
    ptr = blk.addr
    if nx is None:
        # the best fit unless a block of this size at a lower address is cached (an
        # empty list: at once)
        if fl:
            other = fl_first_ge(fl, size)
            if other is not None and other.size == size and other.addr < ptr:
                return False
    elif not nx.event_count and not nx.stream_uses and (
            nx.size > 1048576 or pool.is_small):
        # merged with nx, the best fit unless a block listed between (other than nx) fits
        # first (nx alone in the list: at once); a large block is split again only with
        # more than 1 MiB left
        if len(fl) != 1:
            other = fl_first_ge(fl, size)
            if other is nx:
                other = fl_first_ge(fl, nx.size, nx.addr + 1)
            if other is not None and (other.size < size + nx.size or (
                    other.size == size + nx.size and other.addr < ptr)):
                return False
    else:
        return False
    blk.allocated = False
    blk.frames = None   # (as _fit.free_block)
    a._deferred = blk
    a._fast_malloc = False   # (_fast_flags)
    a._free_slow = True
    return True


def free_cached(a: DeviceCachingAllocator, blk: Block) -> None:
    """The fast path of :meth:`DeviceCachingAllocator.free` (``_lock`` held; ``blk`` live, on no
    other stream; no history): the general code (:meth:`DeviceCachingAllocator._free_locked` ->
    :func:`._fit.free_block` -> :meth:`DeviceCachingAllocator._merge`) written out for this
    case, which it must match (the fast-path tests run both on the same sequences and compare
    the state; bench_allocator times both)."""
    pool = blk.pool
    nx = blk.next
    prev = blk.prev
    ptr = blk.addr
    blk.allocated = False
    blk.frames = None
    c = pool.hot
    if c.grew or c.other_row.grew:
        a._stats.settle()   # (the peaks, before the decreases)
    size = blk.size
    c.allocations -= 1
    c.allocated_bytes -= size
    if size >= a._max_split_size:
        a._stats.oversize_allocations.decrease(1)
    # _fit.free_block
    c.requested_bytes -= blk.requested
    fl = pool.make_free_list(blk.stream)
    # _merge (blk is mapped: only free mapped neighbours merge), in three cases: the
    # block before is free (and maybe the one after), only the one after, neither
    other = prev if mergeable(prev) else nx if mergeable(nx) else None
    if other is None:
        # nothing to merge
        if (prev is not None or nx is not None) and blk.exp is None:
            # inactive_split (as _fit.free_block; increases update the peaks at once): a
            # split block joins them
            c.count_split(size)
        fl_insert(fl, size, ptr, blk)
        blk.gc_base = pool.gc_calls
        return
    osize = merged_bytes = other.size
    oaddr = other.addr   # (other's entry becomes the merged block's: see below)
    merged = 1
    if other is prev:
        prev.requested = blk.requested
        prev.frames = blk.frames
        a._join(prev, blk, True)
        blk = prev
        if mergeable(nx):
            assert nx is not None
            merged_bytes += nx.size
            fl_remove(fl, nx.size, nx.addr)
            a._join(blk, nx, True)
            merged = 2
    else:
        a._join(blk, other, True)
    # merged: blk is the surviving block
    if blk.exp is None:
        # inactive_split (as _fit.free_block): the freed block's bytes join them if the
        # survivor is still split (one block fewer if it merged with both), else the
        # merged ones leave
        if blk.prev is not None or blk.next is not None:
            if merged == 2:
                if a._stats.dirty_split:
                    a._stats.settle_split()
                c.inactive_split -= 1
            n = c.inactive_split_bytes + size
            c.inactive_split_bytes = n
            c.inactive_split_bytes_sum += size
            if n > c.inactive_split_bytes_peak:
                c.inactive_split_bytes_peak = n
            n += c.other_row.inactive_split_bytes
            row = c.all_row
            if n > row.inactive_split_bytes_peak:
                row.inactive_split_bytes_peak = n
        else:
            if a._stats.dirty_split:
                a._stats.settle_split()
            c.inactive_split -= merged
            c.inactive_split_bytes -= merged_bytes
    fl_replace(fl, osize, oaddr, blk.size, blk.addr, blk)
    blk.gc_base = pool.gc_calls
