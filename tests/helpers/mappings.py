"""The expandable segments' mapping structure checked against the simulated device (shared by
the stateful model test and the stress test of the allocator)."""

from __future__ import annotations

from typing import Any

from accelrt.memory._expandable import MAP_FRACTION


def check_mappings(a: Any, b: Any, index: int = 0) -> None:
    """Every expandable segment of allocator ``a`` records exactly the mappings that simulated
    backend ``b`` holds in its reservation: sorted, disjoint, covering exactly the pages
    flagged mapped, and each block lies wholly on mapped or unmapped pages as it says; the
    low-fragmentation policy's piece size follows its high-water mark and bounds every mapping."""
    device = b._devices[index]
    es_all = a._expandable_segments
    seen = 0
    for es in es_all.segments:
        starts = es.starts
        assert starts == sorted(starts) and set(starts) == set(es.lengths)
        flags = bytearray(len(es.mapped))
        end = -1
        for s in starts:
            n = es.lengths[s]
            assert n >= 1 and s >= end, "overlapping mappings"
            end = s + n
            flags[s:end] = b"\x01" * n
            assert device.mappings.get(es.base + s * es.page) == n * es.page
        assert flags == es.mapped, "mapped flags differ from the mappings"
        seen += len(starts)
        blk = a._blocks.get(es.base)
        # the blocks of the reservation tile it, each on pages as mapped as it says
        addr = es.base
        while blk is not None:
            assert blk.addr == addr and blk.exp is es
            first = (blk.addr - es.base) // es.page
            last = (blk.addr + blk.size - 1 - es.base) // es.page
            if not blk.mapped:
                assert not any(es.mapped[first:last + 1])
            else:
                assert all(es.mapped[first:last + 1])
            addr += blk.size
            blk = blk.next
        assert addr == es.base + es.size
    # the unmapped lists: exactly the unmapped blocks, sorted, never two adjacent
    listed = sorted((pool.type_index, stream, addr) for pool in (a._small, a._large)
                    for stream, addrs in pool.unmapped.items() for addr in addrs)
    for pool in (a._small, a._large):
        assert all(addrs == sorted(addrs) for addrs in pool.unmapped.values())
    unmapped = sorted((blk.pool.type_index, blk.stream, blk.addr) for blk in a._blocks.values()
                      if not blk.mapped and blk.pool.owner is None)
    assert listed == unmapped
    for blk in a._blocks.values():
        if not blk.mapped:
            assert blk.next is None or blk.next.mapped, "adjacent unmapped blocks"
    vm = [p for p in device.mappings
          if any(r <= p < r + size for r, size in device.reservations.items())]
    assert seen == len(vm), "the device holds mappings the allocator does not know"
    if a._page_reuse and es_all.segments:
        page = es_all.segments[0].page
        assert es_all.piece_pages == max(1, es_all.vm_high // page // MAP_FRACTION)
        # the policy maps in pieces of at most piece_pages, which only grows: no mapping is
        # ever longer (so a block pins at most that much beyond its own pages)
        assert all(n <= es_all.piece_pages for es in es_all.segments
                   for n in es.lengths.values())
        # (the most bytes reserved while mapping: at least the mapped bytes; all the reserved
        # bytes unless segments were allocated under another policy since)
        assert es_all.vm_high >= sum(sum(es.mapped) * es.page for es in es_all.segments)
        if all(blk.exp is not None for blk in a._blocks.values()):
            assert es_all.vm_high >= a.memory_reserved()
