"""Expandable segments over the backend's vm_* calls (ALLOCATOR_SPEC §10)."""

from __future__ import annotations

import pytest

from accelrt import OutOfMemoryError
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.testing import SimulatedBackend
from tests.helpers.expandable import fresh_fallback_warnings

MiB = 1 << 20
GiB = 1 << 30


def make(conf: str = "expandable_segments:True", **kw):
    b = SimulatedBackend(**kw)
    return DeviceCachingAllocator(b, 0, parse_config(conf)), b


def check(a, b):
    segs = a.snapshot_segments()
    st = a.stats()
    assert st["reserved_bytes.all.current"] == sum(s["total_size"] for s in segs) == b.used
    assert st["segment.all.current"] == 0
    assert st["inactive_split.all.current"] == 0
    for s in segs:
        assert s["is_expandable"]
        assert sum(blk["size"] for blk in s["blocks"]) == s["total_size"]


def test_grows_in_place_and_free_tail_merges_with_new_page():
    a, b = make()
    p1 = a.malloc(30 * MiB, 0)          # large pages of 20 MiB: maps 2 pages
    assert a.memory_reserved() == 40 * MiB
    assert a.stats()["num_device_alloc"] == 1
    p2 = a.malloc(15 * MiB, 0)          # 10 MiB free tail + one new page, contiguous
    assert p2 == p1 + 30 * MiB
    assert a.memory_reserved() == 60 * MiB
    assert a.stats()["num_device_alloc"] == 2
    a.free(p2)                          # tail: 30 MiB free
    p3 = a.malloc(45 * MiB, 0)          # tail 30 + a new 20 MiB page merged into one block
    assert p3 == p1 + 30 * MiB
    assert a.memory_reserved() == 80 * MiB
    segs = a.snapshot_segments()
    assert len(segs) == 1 and segs[0]["total_size"] == 80 * MiB
    assert [blk["size"] for blk in segs[0]["blocks"]] == [30 * MiB, 45 * MiB, 5 * MiB]
    check(a, b)
    a.free(p1)
    a.free(p3)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used
    assert b.reservations == {}          # fully unmapped reservation is released
    st = a.stats()
    assert st["num_device_free"] == 1 and st["num_device_alloc"] == 3


def test_small_pool_pages_and_split_rule():
    a, b = make()
    p = a.malloc(1000, 0)
    q = a.malloc(1000, 0)
    assert q == p + 1024
    assert a.memory_reserved() == 2 * MiB
    st = a.stats()
    assert st["reserved_bytes.small_pool.current"] == 2 * MiB
    # large pool with expandable splits whenever the remainder is >= 512 bytes
    r = a.malloc(19 * MiB + 512, 0)
    segs = [s for s in a.snapshot_segments() if s["segment_type"] == "large"]
    assert [blk["size"] for blk in segs[0]["blocks"]] == [19 * MiB + 512, MiB - 512]
    for x in (p, q, r):
        a.free(x)
    check(a, b)


def test_partial_unmap_keeps_live_pages_and_snapshot_ranges():
    a, b = make()
    p1 = a.malloc(20 * MiB, 0)
    p2 = a.malloc(20 * MiB, 0)
    p3 = a.malloc(20 * MiB, 0)
    a.free(p2)
    a.empty_cache()                     # unmaps the middle page only
    assert a.memory_reserved() == 40 * MiB == b.used
    segs = a.snapshot_segments()
    assert [(s["address"], s["total_size"]) for s in segs] == [(p1, 20 * MiB),
                                                              (p3, 20 * MiB)]
    # the hole is remapped first (lowest address that fits)
    p4 = a.malloc(20 * MiB, 0)
    assert p4 == p2
    check(a, b)
    for p in (p1, p3, p4):
        a.free(p)
    a.empty_cache()
    assert b.used == 0 and b.reservations == {}


def test_one_reservation_per_stream_and_pool():
    a, b = make()
    a.malloc(1000, 0)
    a.malloc(1000, 1)
    a.malloc(3 * MiB, 0)
    assert len(b.reservations) == 3
    size = next(iter(b.reservations.values()))
    assert size >= 80 * GiB * 9 // 8


def test_granularity_rounds_page_size():
    a, _ = make(granularity=8 * MiB)
    a.malloc(1000, 0)
    assert a.memory_reserved() == 8 * MiB   # the 2 MiB small page rounded to granularity


def test_ordinary_segments_without_vm():
    """No virtual memory: the request falls back to ordinary segments, warned once."""
    with fresh_fallback_warnings(), \
            pytest.warns(UserWarning, match="'simulated' backend has no virtual memory"):
        a, b = make(vm=False)
    p = a.malloc(1000, 0)
    assert a.memory_reserved() == 2 * MiB == b.used and not b.reservations
    assert [s["is_expandable"] for s in a.snapshot_segments()] == [False]
    assert a.stats()["segment.all.current"] == 1
    a.free(p)
    a.empty_cache()
    assert b.used == 0


def test_device_oom_then_continued_use():
    a, b = make(capacity=100 * MiB)
    p = a.malloc(60 * MiB, 0)
    with pytest.raises(OutOfMemoryError, match="out of memory"):
        a.malloc(50 * MiB, 0)
    assert a.memory_reserved() == 60 * MiB == b.used
    q = a.malloc(30 * MiB, 0)
    assert q == p + 60 * MiB
    check(a, b)
    a.free(p)
    a.free(q)
    a.empty_cache()
    assert b.used == 0


def test_fraction_limits_expandable():
    a, _ = make(capacity=1 * GiB)
    a.set_memory_fraction(0.1)              # 102.4 MiB
    p = a.malloc(80 * MiB, 0)
    with pytest.raises(OutOfMemoryError, match="allowed"):
        a.malloc(40 * MiB, 0)
    a.free(p)


def test_switching_off_skips_expandable_blocks():
    a, b = make()
    p = a.malloc(3 * MiB, 0)
    a.free(p)
    a.set_config(parse_config("expandable_segments:False"))
    q = a.malloc(3 * MiB, 0)                # must come from a new, regular segment
    assert q != p
    segs = a.snapshot_segments()
    assert sorted(s["is_expandable"] for s in segs) == [False, True]
    a.free(q)
    a.empty_cache()
    assert b.used == 0


@pytest.mark.parametrize("reuse,reserved", [(False, 100 * MiB), (True, 80 * MiB)])
def test_page_reuse_unmaps_free_pages_before_mapping(reuse, reserved):
    a, b = make("expandable_segments:True" + (",page_reuse:True" if reuse else ""))
    p1, p2, p3 = (a.malloc(20 * MiB, 0) for _ in range(3))
    a.free(p1)                              # a free page that a 40 MiB request cannot use
    assert a.memory_reserved() == 60 * MiB
    q = a.malloc(40 * MiB, 0)
    assert q == p3 + 20 * MiB
    assert a.memory_reserved() == reserved == b.used
    check(a, b)
    p4 = a.malloc(20 * MiB, 0)              # the hole is reused (remapped if it was unmapped)
    assert p4 == p1
    for p in (p2, p3, q, p4):
        a.free(p)
    a.empty_cache()
    assert b.used == 0 and b.reservations == {}


def test_history_segment_map_unmap():
    a, _ = make()
    a.record_history("all")
    p = a.malloc(30 * MiB, 0)
    a.free(p)
    a.empty_cache()
    acts = [(e["action"], e["size"]) for e in a.trace_entries()]
    assert acts == [("segment_map", 40 * MiB), ("alloc", 30 * MiB),
                    ("free_requested", 30 * MiB), ("free_completed", 30 * MiB),
                    ("segment_unmap", 40 * MiB)]
