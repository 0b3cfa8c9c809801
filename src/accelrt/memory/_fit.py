"""The block work of the allocator's general paths: best fit, new segments, completing a free.

:func:`get_free_block` finds the best-fit cached block (PyTorch's ``get_free_block``, with the
oversize rules and the expandable best fit); :func:`alloc_slow` is the chain after a cache
miss (garbage collection, a new segment, freeing oversize blocks and retrying, freeing the
whole cache and retrying), :func:`alloc_block` makes one segment, and :func:`free_block`
completes a free (merge, statistics, cache). Called with the allocator's lock held by
:meth:`DeviceCachingAllocator._malloc_locked` and ``_free_locked``, and by the
stream-ordered frees (:mod:`._events`); the named fast paths mirror them (``_fast``).

Example (the best fit of a request is the block a free just cached)::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory import _allocator, _fit
    >>> alloc = _allocator.DeviceCachingAllocator(get_backend("cpu"), 0)
    >>> ptr = alloc.malloc(8192, 0)
    >>> alloc.free(ptr)
    >>> with alloc._lock:
    ...     alloc.settle_locked()
    ...     found = _fit.get_free_block(alloc, alloc._small, 0, 8192)
    ...     alloc._insert_free(found)   # (back where it was)
    >>> found.addr == ptr, found.size
    (True, 2097152)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._block import (
    DEFAULT_POOL,
    K_SMALL_SIZE,
    Block,
    BlockPool,
    fl_add,
    fl_first_ge,
    fl_pop_ge,
    fl_remove,
)
from ._history import CTX_ALL, CTX_ALLOC, capture_frames
from ._pools import duplicate_address, in_capture_context, raw_malloc
from ._release import garbage_collect, release_available_cached_blocks, release_cached_blocks

if TYPE_CHECKING:
    from ._allocator import DeviceCachingAllocator

__all__ = ["alloc_block", "alloc_slow", "free_block", "get_free_block", "take_from_oom_pool"]


def get_free_block(a: DeviceCachingAllocator, pool: BlockPool, stream: int,
                   rounded: int) -> Block | None:
    """The best-fit cached block for ``rounded`` bytes on ``stream``, out of its free
    list; ``None`` if none may serve it."""
    fl = pool.free_list(stream)
    if a._simple:
        # no oversize limit, GC or expandable blocks: the smallest block that fits
        return fl_pop_ge(fl, rounded) if fl else None
    if a._gc_on:
        pool.gc_calls += 1
    if not fl:
        return None
    blk = fl_first_ge(fl, rounded)
    if blk is None:
        return None
    if blk.exp is not None:
        if a._expandable:
            # among expandable candidates, prefer the one whose size including the
            # unmapped range after it is smallest (PyTorch's expandable best fit): the
            # blocks after the first fit, ascending, while each is smaller so counted (one
            # lookup per step: the walk is short)
            nx = blk.next
            esize = blk.size + (nx.size if nx is not None and not nx.mapped else 0)
            # the low-fragmentation policy walks only over blocks at most a page longer than
            # the best fit (docs/memory.md, rule 8); PyTorch's walk has no bound
            limit = (blk.size + blk.exp.page if a._page_reuse and pool.owner is None
                     else -1)
            nb = fl_first_ge(fl, blk.size, blk.addr + 1)
            while nb is not None and (limit < 0 or nb.size <= limit):
                nx = nb.next
                nsize = nb.size + (nx.size if nx is not None and not nx.mapped else 0)
                if nsize >= esize:
                    break
                blk = nb
                esize = nsize
                if nb.exp is None:
                    break
                nb = fl_first_ge(fl, nb.size, nb.addr + 1)
        else:
            for nb in fl.iter_ge(blk.size, blk.addr + 1):
                if nb.exp is None:
                    blk = nb
                    break
            else:
                return None
    bsize = blk.size
    mss = a._max_split_size
    if rounded < mss:
        if bsize >= mss:
            return None
    elif bsize >= rounded + a._max_non_split_rounding:
        return None
    fl_remove(fl, bsize, blk.addr)
    return blk


def take_from_oom_pool(a: DeviceCachingAllocator, stream: int, rounded: int) -> Block | None:
    """PyTorch's fallback for a request outside private pools that a new segment cannot
    serve (before the cache is released): the best-fit cached block on ``stream`` of the first
    live private pool made with
    ``use_on_oom`` that has one (from its small or large pool by size), or ``None``. The
    block stays the private pool's: its free returns it there."""
    for pp in a._pools.private.values():
        if pp.use_on_oom and pp.use_count > 0:
            blk = get_free_block(a, pp.small if rounded <= K_SMALL_SIZE else pp.large, stream,
                                 rounded)
            if blk is not None:
                return blk
    return None


def alloc_slow(a: DeviceCachingAllocator, pool: BlockPool, stream: int, rounded: int,
               frames: list[dict[str, Any]] | None) -> Block | None:
    """A new block for a request that no cached block serves (``_lock`` held): a new segment,
    then PyTorch's free-and-retry chain; ``None`` if the device has no memory for it."""
    alloc_size = a._allocation_size(rounded)
    if a._gc_on:
        garbage_collect(a)
    a._rejected = False
    blk = alloc_block(a, pool, stream, rounded, alloc_size, False, frames)
    if blk is not None or a._rejected:
        return blk
    if pool.owner is None:
        # a use_on_oom pool's cached block comes before the costly releases (torch 2.15's
        # try_mempool_fallback, the first step after the failed allocation)
        blk = take_from_oom_pool(a, stream, rounded)
        if blk is not None:
            return blk
    if release_available_cached_blocks(a, pool, stream, rounded):
        blk = alloc_block(a, pool, stream, rounded, alloc_size, False, frames)
        if blk is not None:
            return blk
    if not in_capture_context(a):   # (torch 2.15: use_mem_pool and other threads release)
        a._oom.check_retry_sync()   # sync debug mode: the release below waits for events
        release_cached_blocks(a, DEFAULT_POOL)
        blk = alloc_block(a, pool, stream, rounded, alloc_size, True, frames)
    return blk


def alloc_block(a: DeviceCachingAllocator, pool: BlockPool, stream: int, rounded: int,
                alloc_size: int, is_retry: bool,
                frames: list[dict[str, Any]] | None) -> Block | None:
    """One new segment of ``alloc_size`` bytes (a mapping of an expandable segment under
    ``expandable_segments``), counted; ``None`` past the memory fraction or when the
    device has no memory."""
    st = a._stats
    if is_retry:
        st.num_alloc_retries += 1
    if a._allowed_max is not None and a._total_reserved + alloc_size > a._allowed_max:
        if a._cfg.throw_on_malloc_oom:
            # PyTorch 2.14's throw_on_cudamalloc_oom: reject at once, no cache release
            st.num_oom_rejections += 1
            a._rejected = True
        return None
    if a._expandable and (pool.owner is None or pool.owner.allocator is None):
        return a._expandable_segments.allocate(pool, stream, rounded, frames)
    if a._cfg.release_lock_on_malloc:
        # release_lock_on_cudamalloc: other threads may use the allocator meanwhile; the
        # new segment is not visible to them until it is linked below.
        a._lock.release()
        try:
            ptr = raw_malloc(a._b, a._index, pool, alloc_size, stream)
        finally:
            a._lock.acquire()
            # a free that another thread's fast path deferred meanwhile happened before
            # what follows (a cache release and retry on out-of-memory, the statistics)
            a._flush_deferred()
    else:
        ptr = raw_malloc(a._b, a._index, pool, alloc_size, stream)
    if not ptr:
        return None
    if ptr in a._blocks:
        raise duplicate_address(a._b, a._index, alloc_size, ptr)
    blk = Block(ptr, alloc_size, stream, pool)
    blk.seg_frames = frames
    a._blocks[ptr] = blk
    a._total_reserved += alloc_size
    st.count_pool_reserved(pool.owner, pool.type_index, alloc_size)
    st.count_segment(pool.type_index, alloc_size, alloc_size >= a._max_split_size, True)
    h = a._history
    if h is not None:
        h.record("segment_alloc", ptr, alloc_size, stream,
                 frames if h.context >= CTX_ALLOC else None, pool_id=pool.owner_id())
    return blk


def free_block(a: DeviceCachingAllocator, blk: Block, pending: bool) -> None:
    """Free *completed*: merge ``blk`` with its free neighbours
    (:meth:`DeviceCachingAllocator._merge`), count the merge and cache the block. ``pending``:
    the free waited for events."""
    orig_size = blk.size
    req = blk.requested
    st = a._stats
    h = a._history
    if h is not None:
        # a direct free carries the freeing call's stack with context="all" (PyTorch)
        h.record("free_completed", blk.addr, req, blk.stream, capture_frames()
                 if h.context >= CTX_ALL and not pending else blk.frames,
                 pool_id=blk.pool.owner_id())
    # a free block has no allocation stack (PyTorch's free_block resets
    # context_when_allocated): a snapshot's inactive blocks carry no frames
    blk.frames = None
    blk.stream_uses = None
    pool = blk.pool
    c = pool.hot
    st.settle_grown()
    b = blk
    if blk.prev is not None or blk.next is not None:
        b, merged, merged_bytes = a._merge(blk)
        if blk.exp is None:
            # inactive_split: the survivor joins them if still split, minus the merged
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
    fl_add(pool, b.stream, b)
    b.gc_base = pool.gc_calls
    c.requested_bytes -= req
    if pending:
        c.pending_frees -= 1
        c.pending_bytes -= orig_size
