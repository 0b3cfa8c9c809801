"""Release and garbage-collection policies of the caching allocator.

PyTorch's ways of giving cached memory back to the device: ``release_available_cached_blocks``
(free oversize blocks before a retry), ``release_cached_blocks`` (``empty_cache`` and the last
retry), and the garbage collector that frees the oldest cached segments once reserved memory
passes ``garbage_collection_threshold`` of the memory-fraction limit.

Example::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory._allocator import DeviceCachingAllocator
    >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
    >>> a.free(a.malloc(512, 0)); a.memory_reserved()
    2097152
    >>> a.empty_cache(); a.stats()["num_device_free"]
    1
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._block import DEFAULT_POOL, Block, BlockPool, fl_first_ge
from ._config import NO_SPLIT_LIMIT
from ._history import CTX_ALL, capture_frames
from ._lock import StreamWait
from ._pools import in_capture_context, raw_free, report_finalizer_error

if TYPE_CHECKING:
    from ._interface import AllocatorCore

__all__ = ["empty_collected_pools", "garbage_collect", "release_available_cached_blocks",
           "release_block", "release_cached_blocks"]


def release_block(a: AllocatorCore, blk: Block) -> None:
    """cudaFree of a whole free unsplit non-expandable segment (in its free list).

    The segment leaves the allocator's books before the raw free, so that a raw free that
    raises (a pluggable allocator's ``free``) leaves them consistent: the segment was given
    back either way."""
    a._remove_free(blk)
    size = blk.size
    h = a._history
    if h is not None:
        h.record("segment_free", blk.addr, size, blk.stream,
                 capture_frames() if h.context >= CTX_ALL else blk.seg_frames,
                 pool_id=blk.pool.owner_id())
    del a._blocks[blk.addr]
    a._total_reserved -= size
    pool = blk.pool
    st = a._stats
    st.count_pool_reserved(pool.owner, pool.type_index, -size)
    st.count_segment(pool.type_index, size, size >= a._max_split_size, False)
    with StreamWait(a._lock):   # (the free waits for the streams' work on the memory)
        raw_free(a._b, a._index, blk)


def release_available_cached_blocks(a: AllocatorCore, pool: BlockPool, stream: int,
                                    rounded: int) -> bool:
    """PyTorch's ``release_available_cached_blocks``: free one oversize segment at least as
    large as the request, or oversize segments largest first until as many bytes are free."""
    mss = a._max_split_size
    if mss == NO_SPLIT_LIMIT:
        return False
    fl = pool.free_list(stream)
    if not fl:
        return False
    target = max(mss, rounded)
    blk = fl_first_ge(fl, target)
    if blk is not None and blk.exp is None:
        if blk.prev is None and blk.next is None:
            release_block(a, blk)
            return True
        return False
    # No single block is large enough: free oversize blocks, largest first.
    released = 0
    for blk in list(fl.iter_lt(target)):
        if released >= target:
            break
        if blk.size < mss:
            break
        if blk.exp is None and blk.prev is None and blk.next is None:
            released += blk.size
            release_block(a, blk)
    return released >= target


def release_cached_blocks(a: AllocatorCore, pool_id: tuple[int, int]) -> bool:
    """``empty_cache`` (of the default pools and every freeable private pool, or of private
    pool ``pool_id``, with their retired twins), waiting for pending frees first."""
    pools = a._pools
    if pool_id == DEFAULT_POOL and not in_capture_context(a):
        a._stream_frees.synchronize_and_free(None)
        _release_blocks(a, a._large)
        _release_blocks(a, a._small)
    # one pool's empty_cache looks up that pool only (not every freeable pool: linear time
    # for a replay that releases many pools while others still hold blocks)
    for pid in (list(pools.freeable) if pool_id == DEFAULT_POOL
                else [pool_id] if pool_id in pools.freeable else []):
        pp = pools.freeable[pid]
        if pool_id != DEFAULT_POOL:
            a._stream_frees.synchronize_and_free(pp)
        _release_blocks(a, pp.small)
        _release_blocks(a, pp.large)
        if pp.reserved == 0:
            del pools.private[pid]
            del pools.freeable[pid]
    if pools.retired:
        _release_retired(a, pool_id)
    return True


def _release_retired(a: AllocatorCore, pool_id: tuple[int, int]) -> None:
    """Give back the free segments of the retired twins (``_pools.retire_segments``) whose
    pool ``empty_cache`` of ``pool_id`` empties: the default pool's (no capture open), or a
    released private pool's."""
    pools = a._pools
    keep = []
    for src, twin in pools.retired:
        if src is None:
            empties = pool_id == DEFAULT_POOL and not in_capture_context(a)
        else:
            empties = src.use_count == 0 and pool_id in (DEFAULT_POOL, src.id)
        if empties:
            _release_blocks(a, twin.large)
            _release_blocks(a, twin.small)
        if twin.reserved:
            keep.append((src, twin))
    pools.retired = keep


def _release_blocks(a: AllocatorCore, pool: BlockPool) -> None:
    exp = a._expandable_segments
    to_unmap: list[Block] = []
    for stream in sorted(pool.free):
        for blk in list(pool.free[stream]):
            if blk.exp is not None:
                to_unmap.append(blk)
            elif blk.prev is None and blk.next is None:
                release_block(a, blk)
    for blk in to_unmap:
        u = exp.unmap_block(blk)
        if u is not None:
            exp.release_segment(u)
    # reservations left fully unmapped earlier (page_reuse) go back as well
    for stream in sorted(pool.unmapped):
        for addr in list(pool.unmapped[stream]):
            u = a._blocks[addr]
            if u.prev is None and u.next is None:
                exp.release_segment(u)


def garbage_collect(a: AllocatorCore) -> None:
    """PyTorch's ``garbage_collect_cached_blocks``: past ``garbage_collection_threshold`` of
    the memory-fraction limit, free unsplit cached segments older than the average age."""
    assert a._allowed_max is not None
    gc_threshold = int(a._gc_threshold * a._allowed_max)
    if a._total_reserved <= gc_threshold:
        return
    target = a._total_reserved - gc_threshold
    pool = a._large
    calls = pool.gc_calls

    def candidates() -> list[Block]:
        out = []
        for stream in sorted(pool.free):
            for b in pool.free[stream]:
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
                release_block(a, b)


def empty_collected_pools(a: AllocatorCore) -> None:
    """Give back the cached memory of the private pools whose collected ``MemPool`` asked for
    it (``a._gc_empty``, queued before their release: PyTorch's ``~MemPool`` empties the
    pool), as ``empty_cache(pool_id)`` would (``_lock`` held). An error is logged, not
    raised: this is a finalizer's work."""
    empty = a._gc_empty
    while empty:
        pool_id = empty.popleft()
        pp = a._pools.private.get(pool_id)
        if pp is not None:
            pp.use_on_oom = False   # a collected pool is no last resort (PyTorch's ~MemPool)
        a._flush_deferred()
        try:
            release_cached_blocks(a, pool_id)
        except Exception as e:  # noqa: BLE001 - a finalizer's error is only reported
            report_finalizer_error(f"return of the cached memory of MemPool {pool_id}", e)
