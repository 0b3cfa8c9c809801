"""Expandable segments: one virtual reservation per (stream, pool) backed page by page.

The reservation is sized from the device's total memory (1.125 x total, in pages; less with
``expandable_segments_reserve``, PyTorch 2.15's key) and holds no memory until pages are
mapped. A request larger than a new reservation fails (out of memory): a block never spans
reservations. Pages are ``2 MiB`` (small pool) or ``large_segment_size``
(large pool), rounded up to the backend's ``vm_granularity``. Each page is mapped with its own
``vm_map`` call so that any page can later be unmapped on its own.

Guarded by the owning allocator's lock.

Example::

    >>> from accelrt.memory._expandable import page_count
    >>> page_count(total=16 * 2**30, page=20 * 2**20)
    922
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .. import _checked
from ._block import (
    K_SMALL_BUFFER,
    Block,
    BlockPool,
    bisect_left,
    fl_add,
    insort,
    unmapped_add,
    unmapped_remove,
)
from ._config import reserve_bytes, warn_expandable_fallback
from ._history import CTX_ALL, CTX_ALLOC, capture_frames
from ._lock import StreamWait

if TYPE_CHECKING:
    from ._block_map import BlockMap
    from ._interface import AllocatorCore

__all__ = ["MAP_FRACTION", "ExpandableSegment", "ExpandableSegments", "page_count", "pages_for"]

#: The low-fragmentation policy makes every mapping at most this fraction of the memory mapped
#: at the high-water mark (:attr:`ExpandableSegments.piece_pages`): a mapping can only be
#: unmapped whole, so one left pinned by a single live page strands at most that much.
MAP_FRACTION = 128


def page_count(total: int, page: int) -> int:
    """Pages in a reservation for a device of ``total`` bytes: ceil(1.125 * total / page)."""
    return pages_for(total + total // 8, page)


def pages_for(reserve: int, page: int) -> int:
    """Pages in a reservation of ``reserve`` bytes: at least one (a backend cannot reserve an
    empty range; PyTorch would reserve none, so that every request fails)."""
    return max(1, -(-reserve // page))


class ExpandableSegment:
    """A virtual address reservation mapped lazily page by page.

    Attributes:
        base: first address; ``size``: reservation bytes; ``page``: bytes per page.
        stream, pool: the owner (blocks of this reservation belong to that stream and pool).
        mapped: one flag per page.
        starts: page indices where a mapping starts, sorted; ``lengths``: its page count.
        frames: stack of the first mapping (history recording), or ``None``.

    A mapping can only be unmapped whole (as on CUDA), so :meth:`unmap` removes the
    mappings that lie entirely inside the range it is given.
    """

    __slots__ = (
        "backend",
        "base",
        "frames",
        "index",
        "lengths",
        "mapped",
        "page",
        "pool",
        "size",
        "starts",
        "stream",
    )

    def __init__(self, backend: Any, index: int, stream: int, pool: Any, page: int,
                 reserve: int) -> None:
        n = pages_for(reserve, page)
        self.backend = backend
        self.index = index
        self.page: int = page
        self.size = n * page
        self.base: int = _checked.address(backend, ("vm_reserve", (index, self.size)),
                                          backend.vm_reserve(index, self.size))
        self.stream = stream
        self.pool = pool
        self.mapped = bytearray(n)
        self.starts: list[int] = []
        self.lengths: dict[int, int] = {}
        self.frames: list[dict[str, Any]] | None = None

    def map(self, ptr: int, size: int, cap: int = 1) -> int:
        """Map the pages covering ``[ptr, ptr+size)`` (all unmapped; ``ptr`` on a page) as
        mappings of ``cap`` pages from ``ptr`` on, the last one shorter if need be (``cap``
        1: a mapping per page, as PyTorch's expandable segments); return bytes mapped from
        ``ptr`` (a multiple of the page), or 0 when the device is out of memory (nothing stays
        mapped then)."""
        page = self.page
        base = self.base
        index = self.index
        flags = self.mapped
        vm_map = self.backend.vm_map
        begin = (ptr - base) // page
        end = -(-(ptr + size - base) // page)
        starts = self.starts
        lengths = self.lengths
        p = begin
        while p < end:
            step = min(cap, end - p)
            if not vm_map(index, base + p * page, step * page):
                vm_unmap = self.backend.vm_unmap
                q = begin
                while q < p:
                    n = self.lengths[q]
                    vm_unmap(index, base + q * page, n * page)
                    self._forget(q)
                    q += n
                flags[begin:p] = bytes(p - begin)
                return 0
            insort(starts, p)
            lengths[p] = step
            p += step
        flags[begin:end] = b"\x01" * (end - begin)
        return (end - begin) * page

    def _forget(self, p: int) -> None:
        starts = self.starts
        del starts[bisect_left(starts, p)]
        del self.lengths[p]

    def _whole(self, ptr: int, size: int) -> tuple[int, int, int, int]:
        """The run of mappings entirely inside ``[ptr, ptr+size)`` (all mapped): its first and
        last page index + 1, and the slice of :attr:`starts` holding them."""
        page = self.page
        base = self.base
        begin = -(-(ptr - base) // page)
        end = (ptr + size - base) // page
        if begin >= end:
            return begin, begin, 0, 0
        starts = self.starts
        i = bisect_left(starts, begin)
        j = bisect_left(starts, end)
        # the mappings starting in [begin, end); the last one may run past ``end``
        while j > i and starts[j - 1] + self.lengths[starts[j - 1]] > end:
            j -= 1
        if j == i:
            return begin, begin, i, i
        last = starts[j - 1]
        return starts[i], last + self.lengths[last], i, j

    def unmappable(self, ptr: int, size: int) -> bool:
        """True if ``[ptr, ptr+size)`` holds a whole mapping (:meth:`unmap` would unmap some)."""
        b, e, _, _ = self._whole(ptr, size)
        return b < e

    def unmap(self, ptr: int, size: int, need: int = -1, from_end: bool = True
              ) -> tuple[int, int]:
        """Unmap the whole mappings inside ``[ptr, ptr+size)`` (one backend call for their
        run), or, when ``need`` is not negative, only the fewest of them at the range's end
        (``from_end``) or start that hold ``need`` bytes; return the unmapped range
        ``(start, nbytes)`` (``nbytes`` 0 when no whole mapping fits)."""
        begin, end, i, j = self._whole(ptr, size)
        if begin >= end or need == 0:
            return ptr, 0
        page = self.page
        base = self.base
        lengths = self.lengths
        if need > 0:
            starts = self.starts
            got = 0
            if from_end:
                k = j
                while k > i + 1 and got < need:
                    k -= 1
                    got += lengths[starts[k]] * page
                if got >= need:
                    i = k
                    begin = starts[k]
            else:
                k = i
                while k < j - 1 and got < need:
                    got += lengths[starts[k]] * page
                    k += 1
                if got >= need:
                    j = k
                    end = starts[k]
        for p in self.starts[i:j]:
            del lengths[p]
        del self.starts[i:j]
        # one call for the run of whole mappings (the backend takes runs)
        self.backend.vm_unmap(self.index, base + begin * page, (end - begin) * page)
        self.mapped[begin:end] = bytes(end - begin)
        return base + begin * page, (end - begin) * page

    def release(self) -> None:
        """Give the (fully unmapped) address range back to the backend."""
        self.backend.vm_release(self.index, self.base, self.size)


def _allocatable(b: Block | None) -> bool:
    """``b`` exists and is free (not allocated, no pending events or recorded streams)."""
    return b is not None and not b.allocated and b.event_count == 0 and not b.stream_uses


def _run_bytes(b: Block | None, enough: int) -> int:
    """Bytes of the run of free blocks from ``b`` on, stopping once ``enough`` are found."""
    got = 0
    while got < enough and _allocatable(b):
        got += b.size  # type: ignore[union-attr]
        b = b.next  # type: ignore[union-attr]
    return got


class ExpandableSegments:
    """The expandable segments of one allocator (guarded by its lock): find room in a
    reservation, map and unmap pages, and the low-fragmentation (``page_reuse``) policy.

    Attributes:
        segments: the live reservations.
        vm_high: the most bytes ever reserved while mapping (the ``page_reuse`` high-water
            mark).

    Example::

        >>> from accelrt.backends import get_backend
        >>> from accelrt.memory._allocator import DeviceCachingAllocator
        >>> from accelrt.memory._config import parse_config
        >>> a = DeviceCachingAllocator(get_backend("cpu"), 0,
        ...                            parse_config("expandable_segments:True"))
        >>> p = a.malloc(512, 0)
        >>> a.snapshot_segments()[0]["is_expandable"]
        True
        >>> a.free(p); a.empty_cache(); a.memory_reserved()
        0
    """

    __slots__ = ("_alloc", "_granularity", "_supported", "piece_pages", "segments", "vm_high")

    def __init__(self, alloc: AllocatorCore) -> None:
        self._alloc = alloc
        self.segments: list[ExpandableSegment] = []
        self.vm_high = 0
        # the low-fragmentation policy: the most pages of one mapping (max(1, vm_high in pages
        # // MAP_FRACTION), so that it only grows: no mapping is ever longer than this)
        self.piece_pages = 1
        self._supported: bool | None = None      # the backend's answer, asked once
        self._granularity: int | None = None     # the device's vm granularity, asked once

    def supported(self) -> bool:
        """True if the backend can map virtual memory on this device."""
        if self._supported is None:
            alloc = self._alloc
            self._supported = bool(alloc._b.capabilities(alloc._index).virtual_memory)
        return self._supported

    def warn_fallback(self) -> None:
        """Warn (once per backend, :func:`~._config.warn_expandable_fallback`) if the options
        in force ask for expandable segments and the device has no virtual memory, so that
        the allocator uses ordinary segments. Call it with no lock held."""
        alloc = self._alloc
        if alloc._cfg.expandable_segments and not self.supported():
            warn_expandable_fallback(alloc._name, alloc._index)

    def _check_new(self, es: ExpandableSegment, blocks: BlockMap[Block]) -> None:
        """Refuse a new reservation whose range overlaps one held (or starts at a segment's
        address): a broken backend's, which would corrupt the blocks (nothing is recorded)."""
        end = es.base + es.size
        if es.base in blocks or any(o.base < end and es.base < o.base + o.size
                                    for o in self.segments):
            raise _checked.returned(
                es.backend, ("vm_reserve", (es.index, es.size)), es.base,
                "an address range that overlaps memory it handed out before and that is not "
                "released; the backend is broken (the reservation was not recorded)")

    def page_size(self, pool: BlockPool) -> int:
        """The page of ``pool``'s reservations."""
        alloc = self._alloc
        gran = self._granularity
        if gran is None:   # a device's granularity does not change: ask the backend once
            b: Any = alloc._b   # called untyped: the compiled build would cast the result
            call = ("vm_granularity", (alloc._index,))
            gran = _checked.size(b, call, b.vm_granularity(alloc._index))
            if gran & (gran - 1):
                raise _checked.returned(b, call, gran, "not a power of two")
            self._granularity = gran
        if alloc._page_reuse and pool.owner is None:
            return gran    # the low-fragmentation policy: the device's own page
        seg = K_SMALL_BUFFER if pool.is_small else alloc._large_segment_size
        return -(-seg // gran) * gran

    def _find_block(self, pool: BlockPool, stream: int, size: int) -> Block | None:
        """The block where ``size`` bytes go: the start of a free run (free mapped blocks and
        unmapped ranges) that holds them, or a new reservation's unmapped block; ``None`` when
        ``size`` is larger than a new reservation (``expandable_segments_reserve``)."""
        alloc = self._alloc
        blocks = alloc._blocks
        page_reuse = alloc._page_reuse and pool.owner is None
        if page_reuse:
            # the low-fragmentation policy: of the free runs (a free mapped block before an
            # unmapped range, the range, and the free blocks after it) that can hold ``size``,
            # take the one whose mapped head it reuses most, so that stranded partial pages are
            # filled before new pages are mapped; then the shortest run (best fit), then the
            # lowest address. PyTorch takes the first run by address.
            best: Block | None = None
            best_key = (0, 0, 0)
            for addr in pool.unmapped.get(stream, ()):
                c = blocks[addr]
                # (_allocatable, inlined: the run's free mapped head, then the run)
                b = c.prev
                if (b is not None and not b.allocated and b.event_count == 0
                        and not b.stream_uses):
                    c = b
                run = 0
                b = c
                while (b is not None and not b.allocated and b.event_count == 0
                       and not b.stream_uses):
                    run += b.size
                    b = b.next
                if run < size:
                    continue
                key = (-min(c.size, size) if c.mapped else 0, run, c.addr)
                if best is None or key < best_key:
                    best, best_key = c, key
            if best is not None:
                return best
        else:
            for addr in pool.unmapped.get(stream, ()):
                c = blocks[addr]
                if _allocatable(c.prev):
                    c = c.prev  # type: ignore[assignment]
                if _run_bytes(c, size) >= size:
                    return c
        page = self.page_size(pool)
        reserve = reserve_bytes(alloc._cfg, alloc._device_total)
        if pages_for(reserve, page) * page < size:
            return None   # no reservation can hold it (the caller's out-of-memory path)
        es = ExpandableSegment(alloc._b, alloc._index, stream, pool, page, reserve)
        self._check_new(es, blocks)
        self.segments.append(es)
        alloc._update_simple()
        blk = Block(es.base, es.size, stream, pool, es, mapped=False)
        blocks[es.base] = blk
        unmapped_add(blk)
        return blk

    def _map_block(self, blk: Block, size: int,
                   frames: list[dict[str, Any]] | None) -> Block | None:
        """Map the first ``size`` bytes (page-rounded) of unmapped ``blk`` (in mappings of
        :attr:`piece_pages` pages under the low-fragmentation policy, else one per page);
        return the merged free block now holding them (in the free list), or ``None`` on
        out-of-memory."""
        alloc = self._alloc
        es: ExpandableSegment = blk.exp    # (typed: native field access when compiled)
        pool = blk.pool
        mapped = es.map(blk.addr, size,
                        self.piece_pages if alloc._page_reuse and pool.owner is None else 1)
        if mapped == 0:
            return None
        # unmapped_remove(blk), and unmapped_add of the unmapped rest (cut off when the
        # mapping is shorter than blk): the rest's address takes blk's place in the list
        addr = blk.addr
        ul = pool.unmapped[blk.stream]
        k = bisect_left(ul, addr)
        blk.mapped = True
        if mapped < blk.size:
            ul[k] = alloc._cut_block(blk, mapped, False).addr
        else:
            del ul[k]
        b, _, _ = alloc._merge(blk)
        # _insert_free(b)
        fl_add(pool, b.stream, b)
        b.gc_base = pool.gc_calls
        total = alloc._total_reserved + mapped
        alloc._total_reserved = total
        if total > self.vm_high:
            self.vm_high = total
            # (in pages of the policy: the device's granularity)
            self.piece_pages = max(1, total // (self._granularity or es.page) // MAP_FRACTION)
        st = alloc._stats
        st.count_pool_reserved(pool.owner, pool.type_index, mapped)
        # Stat.increase(mapped) of reserved_bytes' all and pool rows, inlined
        for row in (0, pool.type_index):
            stat = st.reserved_bytes[row]
            cur = stat.current + mapped
            stat.current = cur
            if cur > stat.peak:
                stat.peak = cur
            stat.allocated += mapped
        st.num_device_alloc += 1
        if es.frames is None:
            es.frames = frames
        h = alloc._history
        if h is not None:
            h.record("segment_map", addr, mapped, b.stream,
                     frames if h.context >= CTX_ALLOC else None, pool_id=pool.owner_id())
        return b

    def allocate(self, pool: BlockPool, stream: int, size: int,
                 frames: list[dict[str, Any]] | None) -> Block | None:
        """A free mapped block of at least ``size`` bytes (out of its free list), mapping
        pages as needed; ``None`` when the device is out of memory."""
        alloc = self._alloc
        c: Block | None = self._find_block(pool, stream, size)
        if c is None:
            return None
        if alloc._page_reuse and pool.owner is None:
            # the pages to map: the request less the free mapped head of its run
            new = size - c.size if c.mapped else size
            page: int = c.exp.page
            need = alloc._total_reserved + -(-new // page) * page - self.vm_high
            if need > 0:
                # mapping would raise the high-water mark: give back free mappings first, not
                # the head of the run the request goes to (it would be mapped again at once)
                self.unmap_free_pages(need, c if c.mapped else None)
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
        alloc._remove_free(c)
        return c

    def unmap_block(self, blk: Block, need: int = -1) -> Block | None:
        """Unmap the whole mappings of free mapped ``blk`` (in its free list), or, when
        ``need`` is not negative, only the fewest that hold ``need`` bytes, taken at the end of
        ``blk`` next to unmapped memory (its end unless only the block before it is
        unmapped); return the resulting unmapped block (merged, in the unmapped list), or
        ``None`` if no whole mapping was inside."""
        alloc = self._alloc
        es: ExpandableSegment = blk.exp
        with StreamWait(alloc._lock):   # (an unmap waits for the streams' work on the pages)
            if need >= 0:
                nx = blk.next
                pv = blk.prev
                from_end = ((nx is not None and not nx.mapped)
                            or not (pv is not None and not pv.mapped))
                ptr, nbytes = es.unmap(blk.addr, blk.size, need, from_end)
            else:
                ptr, nbytes = es.unmap(blk.addr, blk.size)
        if nbytes == 0:
            return None
        alloc._remove_free(blk)
        before = ptr - blk.addr
        after = blk.size - before - nbytes
        if before > 0:
            u = alloc._cut_block(blk, before, False)
            alloc._insert_free(blk)
        else:
            u = blk
            u.mapped = False
            u.requested = 0
            u.frames = None
        if after > 0:
            alloc._insert_free(alloc._cut_block(u, nbytes, True))
        u, _, _ = alloc._merge(u)
        unmapped_add(u)
        alloc._total_reserved -= nbytes
        pool = u.pool
        st = alloc._stats
        st.count_pool_reserved(pool.owner, pool.type_index, -nbytes)
        # Stat.decrease(nbytes) of reserved_bytes' all and pool rows, inlined
        for row in (0, pool.type_index):
            stat = st.reserved_bytes[row]
            stat.current -= nbytes
            stat.freed += nbytes
        st.num_device_free += 1
        h = alloc._history
        if h is not None:
            h.record("segment_unmap", ptr, nbytes, u.stream,
                     capture_frames() if h.context >= CTX_ALL else None,
                     pool_id=pool.owner_id())
        return u

    def release_segment(self, u: Block) -> None:
        """Give the reservation of unmapped block ``u`` back if ``u`` spans all of it."""
        es: ExpandableSegment = u.exp
        if u.size != es.size:
            return
        alloc = self._alloc
        unmapped_remove(u)
        del alloc._blocks[u.addr]
        self.segments.remove(es)
        with StreamWait(alloc._lock):
            es.release()
        alloc._update_simple()

    def unmap_free_pages(self, need: int = -1, keep: Block | None = None) -> None:
        """accelrt's ``page_reuse`` policy: before mapping would raise the high-water mark,
        unmap whole free mappings of the default pools' expandable segments, from the largest
        free blocks first, until ``need`` bytes are unmapped (all of them when ``need`` is
        negative), so that the new mapping reuses that physical memory instead of adding to
        it: of a block, only the mappings that the rest of ``need`` takes
        (:meth:`unmap_block`); free block ``keep`` stays mapped."""
        alloc = self._alloc
        blocks = alloc._blocks
        for pool in (alloc._small, alloc._large):
            free = pool.free
            if not free:
                continue
            # only blocks at least one page long can hold a whole page (lists sorted by size)
            first = self.page_size(pool)
            todo: list[int] = []   # (addresses: an unmap below may replace a block object)
            for stream in sorted(free) if len(free) > 1 else free:
                todo.extend([b.addr for b in free[stream].iter_ge(first)])
            if need >= 0:
                todo.reverse()
            for addr in todo:
                blk = blocks[addr]
                if blk is keep:
                    continue
                es: ExpandableSegment | None = blk.exp
                if es is not None and es.unmappable(blk.addr, blk.size):
                    before = alloc._total_reserved
                    self.unmap_block(blk, need)
                    if need >= 0:
                        need -= before - alloc._total_reserved
                        if need <= 0:
                            return
