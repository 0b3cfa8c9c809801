"""Snapshots of the caching allocator's segments (``torch.cuda.memory_snapshot()`` format), and
the other walks over them (:func:`segment_of`, :func:`recount_oversize`).

Example::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory._allocator import DeviceCachingAllocator
    >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
    >>> p = a.malloc(512, 0)
    >>> seg = a.snapshot_segments()[0]
    >>> seg["segment_type"], seg["total_size"], seg["allocated_size"]
    ('small', 2097152, 512)
    >>> a.free(p); a.empty_cache()
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from ._block import DEFAULT_POOL, Block

if TYPE_CHECKING:
    from ._interface import AllocatorCore

__all__ = ["recount_oversize", "segment_of", "snapshot_segments"]

_by_addr = operator.attrgetter("addr")


def segment_of(a: AllocatorCore, ptr: int) -> tuple[int, int, bool] | None:
    """``(segment base, segment size, expandable)`` of the live block that starts at
    ``ptr``, or ``None`` if no allocated block starts there (used by
    :mod:`accelrt.multiprocessing` to share a block as its segment's handle plus offset,
    as CUDA IPC needs the base of the ``cudaMalloc`` allocation).

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0)
        >>> p, q = a.malloc(512, 0), a.malloc(512, 0)
        >>> base, size, exp = a.segment_of(q)
        >>> (q - base, size, exp)
        (512, 2097152, False)
        >>> a.free(p); a.free(q)
    """
    with a._lock:
        a._flush_deferred()
        return _segment_of_locked(a, ptr)


def snapshot_segments(a: AllocatorCore, pool_id: tuple[int, int] | None = None
                      ) -> list[dict[str, Any]]:
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
    with a._lock:
        a.settle_locked()
        return _snapshot_locked(a, pool_id)


def _segment_of_locked(a: AllocatorCore, ptr: int) -> tuple[int, int, bool] | None:
    """:func:`segment_of` with the lock held."""
    blk = a._blocks.get(ptr)
    if blk is None or not blk.allocated:
        return None
    if blk.exp is not None:
        return (blk.addr, blk.size, True)
    head = blk
    while head.prev is not None:
        head = head.prev
    size = 0
    cur: Block | None = head
    while cur is not None:
        size += cur.size
        cur = cur.next
    return (head.addr, size, False)


def _snapshot_locked(a: AllocatorCore, pool_id: tuple[int, int] | None
                     ) -> list[dict[str, Any]]:
    """:func:`snapshot_segments` with the lock held and the state settled."""
    owner_filter = None if pool_id is None else tuple(pool_id)
    # A segment (or mapped range) starts at a mapped block whose predecessor is not mapped;
    # taking the starts in address order leaves the result sorted. The loop below is the whole
    # cost of a snapshot: one dict and one list per block, built as literals, nothing called
    # per block (see docs/memory.md, "Snapshots").
    heads = [b for b in a._blocks.values()
             if b.mapped and (b.prev is None or not b.prev.mapped)]
    heads.sort(key=_by_addr)
    segments: list[dict[str, Any]] = []
    add_segment = segments.append
    index = a._index
    total_active = 0
    for blk in heads:
        pool = blk.pool
        owner = pool.owner
        pid = owner.id if owner is not None else DEFAULT_POOL
        if owner_filter is not None and pid != owner_filter:
            continue
        blocks: list[dict[str, Any]] = []
        append = blocks.append
        alloc = active = req = 0
        b: Block | None = blk
        start = addr = blk.addr
        while b is not None and b.mapped:
            size = b.size
            if b.allocated:
                state = "active_allocated"
                alloc += size
                req += b.requested
            elif b.event_count > 0 or b.stream_uses:
                state = "active_pending_free"
                active += size
                req += b.requested
            else:
                state = "inactive"
            fr = b.frames
            # fresh dicts and lists only: the snapshot is returned without a deep copy
            append({"address": addr, "size": size, "requested_size": b.requested,
                    "state": state, "frames": [dict(f) for f in fr] if fr else []})
            addr += size
            b = b.next
        active += alloc
        total_active += active
        exp = blk.exp
        seg_frames = exp.frames if exp is not None else blk.seg_frames
        add_segment({
            "device": index, "address": start, "total_size": addr - start,
            "allocated_size": alloc, "active_size": active, "requested_size": req,
            "stream": blk.stream, "segment_type": "small" if pool.is_small else "large",
            "segment_pool_id": pid, "is_expandable": exp is not None,
            "frames": [dict(f) for f in seg_frames] if seg_frames else [],
            "blocks": blocks})
    if a._history is not None:
        # (PyTorch's entry carries the snapshot's pool id: (0, 0) for every pool)
        a._history.record("snapshot", 0, total_active, 0, None,
                          pool_id=DEFAULT_POOL if pool_id is None else pool_id)
    return segments


def recount_oversize(a: AllocatorCore, old: int) -> None:
    """``max_split_size`` changed from ``old`` to ``a._max_split_size`` (``_lock`` held): the
    live allocations and segments count as oversize by the new limit, so that their frees
    (which test the limit in force then) bring ``oversize_*.current`` back to 0, never below."""
    new = a._max_split_size
    allocs = segments = 0
    for blk in a._blocks.values():
        if blk.allocated:
            allocs += (blk.size >= new) - (blk.size >= old)
        if blk.prev is None and blk.exp is None:   # a segment of its own (not expandable)
            size = blk.size
            b = blk.next
            while b is not None:
                size += b.size
                b = b.next
            segments += (size >= new) - (size >= old)
    st = a._stats
    for stat, delta in ((st.oversize_allocations, allocs), (st.oversize_segments, segments)):
        if delta > 0:
            stat.increase(delta)
        elif delta < 0:
            stat.decrease(-delta)
