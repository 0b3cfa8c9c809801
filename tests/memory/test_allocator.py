"""The caching allocator's rules (ALLOCATOR_SPEC §1-8, §11-14), on SimulatedBackend."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from accelrt import OutOfMemoryError
from accelrt import _stream as stream_mod
from accelrt.memory._allocator import DeviceCachingAllocator, format_size
from accelrt.memory._config import AllocatorConfig, parse_config
from accelrt.testing import SimulatedBackend

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
# The shared real traces, vendored with the tests (see tests/data/traces/README.md).
TRACES = Path(__file__).parent.parent / "data" / "traces"


def make(conf: str = "", **kw) -> tuple[DeviceCachingAllocator, SimulatedBackend]:
    b = SimulatedBackend(**kw)
    return DeviceCachingAllocator(b, 0, parse_config(conf) if conf else AllocatorConfig()), b


def check_consistent(a: DeviceCachingAllocator, b: SimulatedBackend) -> None:
    """Stats agree with the segments the snapshot shows and with the backend."""
    segs = a.snapshot_segments()
    st = a.stats()
    assert st["reserved_bytes.all.current"] == sum(s["total_size"] for s in segs) == b.used
    assert st["allocated_bytes.all.current"] == sum(s["allocated_size"] for s in segs)
    assert st["active_bytes.all.current"] == sum(s["active_size"] for s in segs)


# ---------------------------------------------------------------------- rounding, pools

@pytest.mark.parametrize("size,rounded", [
    (1, 512), (511, 512), (512, 512), (513, 1024), (1000, 1024), (3 * MiB + 1, 3 * MiB + 512)])
def test_round_size_default(size, rounded):
    a, _ = make()
    assert a.round_size(size) == rounded


def test_round_size_power2_divisions():
    a, _ = make("roundup_power2_divisions:4")
    assert a.round_size(1200) == 1536          # the size > 512*d guard: plain rounding
    assert a.round_size(5 * MiB + 1) == 6 * MiB  # next quarter of [4, 8) MiB
    assert a.round_size(4 * MiB) == 4 * MiB      # powers of two stay
    assert a.round_size(1025 * KiB) == 1280 * KiB
    b, _ = make("roundup_power2_divisions:[1:1,2:4]")
    assert b.round_size(3 * MiB - 5) == 3 * MiB  # interval [2, 4) MiB uses 4 divisions
    assert b.round_size(1 * MiB + 5) == 1 * MiB + 512  # [1, 2) MiB: 1 division -> plain


@pytest.mark.parametrize("size,pool,segment", [
    (1000, "small", 2 * MiB), (1 * MiB, "small", 2 * MiB), (1 * MiB + 1, "large", 20 * MiB),
    (10 * MiB - 1024, "large", 20 * MiB), (10 * MiB - 1, "large", 10 * MiB), (10 * MiB, "large", 10 * MiB),
    (11 * MiB, "large", 12 * MiB), (21 * MiB + 3, "large", 22 * MiB)])
def test_pool_and_segment_size(size, pool, segment):
    a, b = make()
    a.malloc(size, 0)
    st = a.stats()
    assert st[f"segment.{pool}_pool.current"] == 1
    assert st[f"reserved_bytes.{pool}_pool.current"] == segment == b.used


def test_worked_example_3mib_and_1000_bytes():
    a, b = make()
    p = a.malloc(3 * MiB, 0)
    st = a.stats()
    assert st["reserved_bytes.all.current"] == 20 * MiB
    assert st["allocated_bytes.all.current"] == 3 * MiB
    assert st["inactive_split.all.current"] == 1
    assert st["inactive_split_bytes.all.current"] == 17 * MiB
    q = a.malloc(1000, 0)
    st = a.stats()
    assert st["allocated_bytes.small_pool.current"] == 1024
    assert st["requested_bytes.small_pool.current"] == 1000
    assert st["reserved_bytes.small_pool.current"] == 2 * MiB
    assert st["inactive_split_bytes.small_pool.current"] == 2 * MiB - 1024
    # the summary numbers of ALLOCATOR_SPEC §13
    assert st["allocated_bytes.all.current"] == 3073 * KiB
    assert st["reserved_bytes.all.current"] == 22528 * KiB
    assert st["inactive_split_bytes.all.current"] // KiB == 19455
    assert st["inactive_split_bytes.small_pool.current"] // KiB == 2047
    a.free(p)
    st = a.stats()
    assert st["inactive_split.large_pool.current"] == 0
    assert st["inactive_split_bytes.large_pool.current"] == 0
    assert st["inactive_split.large_pool.freed"] == 1
    assert st["inactive_split_bytes.large_pool.freed"] == 17 * MiB
    assert st["active_bytes.large_pool.current"] == 0
    a.empty_cache()   # the merged 20 MiB segment is releasable, the split small one is not
    assert a.memory_reserved() == 2 * MiB == b.used
    a.free(q)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used
    st = a.stats()
    assert st["num_device_alloc"] == 2 and st["num_device_free"] == 2
    assert st["num_sync_all_streams"] == 2


def test_small_split_threshold_and_large_split_threshold():
    a, _ = make()
    p = a.malloc(2 * MiB - 512, 0)        # small pool? no: > 1 MiB -> large, 20 MiB segment
    a.free(p)
    a.empty_cache()
    q = a.malloc(1 * MiB, 0)              # small: remainder 1 MiB >= 512 -> split
    assert a.stats()["inactive_split.small_pool.current"] == 1
    a.free(q)
    r = a.malloc(19 * MiB, 0)             # large: remainder exactly 1 MiB -> not split
    st = a.stats()
    assert st["allocated_bytes.large_pool.current"] == 20 * MiB
    assert st["requested_bytes.large_pool.current"] == 19 * MiB
    assert st["inactive_split.large_pool.current"] == 0
    a.free(r)
    s = a.malloc(19 * MiB - 512, 0)       # remainder 1 MiB + 512 > 1 MiB -> split
    assert a.stats()["allocated_bytes.large_pool.current"] == 19 * MiB - 512
    a.free(s)


def test_large_segment_size_option():
    a, b = make("large_segment_size_mb:32")
    a.malloc(3 * MiB, 0)
    assert a.memory_reserved() == 32 * MiB == b.used
    st = a.stats()
    assert st["inactive_split_bytes.large_pool.current"] == 29 * MiB


def test_release_lock_on_malloc_lets_other_threads_in():
    import threading

    class SlowBackend(SimulatedBackend):
        def malloc(self, index, size):
            entered.set()
            assert proceed.wait(5)
            return super().malloc(index, size)

    entered, proceed = threading.Event(), threading.Event()
    b = SlowBackend()
    a = DeviceCachingAllocator(b, 0, parse_config("release_lock_on_cudamalloc:True"))
    t = threading.Thread(target=lambda: out.append(a.malloc(3 * MiB, 0)))
    out: list[int] = []
    t.start()
    assert entered.wait(5)
    assert a.stats()["num_device_alloc"] == 0      # the lock is free while malloc runs
    proceed.set()
    t.join(5)
    assert out and a.memory_allocated() == 3 * MiB
    a.free(out[0])


def test_best_fit_smallest_then_lowest_address():
    a, _ = make()
    # three separate 12/14/16 MiB segments, all free
    ptrs = [a.malloc(n * MiB, 0) for n in (16, 12, 14, 12)]
    for p in ptrs:
        a.free(p)
    # 11 MiB -> rounded 11 MiB; smallest fitting is 12 MiB; two tie: lowest address
    got = a.malloc(11 * MiB, 0)
    assert got == min(ptrs[1], ptrs[3])
    got2 = a.malloc(13 * MiB, 0)
    assert got2 == ptrs[2]
    assert a.stats()["num_device_alloc"] == 4


def test_blocks_never_migrate_between_streams():
    a, _ = make()
    p = a.malloc(4096, 7)
    a.free(p)
    q = a.malloc(4096, 8)
    assert a.stats()["segment.all.current"] == 2
    r = a.malloc(4096, 7)
    assert r == p
    a.free(q)
    a.free(r)
    segs = a.snapshot_segments()
    assert sorted(s["stream"] for s in segs) == [7, 8]


def test_merge_on_free_both_sides():
    a, _ = make()
    x = a.malloc(4 * MiB, 0)
    y = a.malloc(4 * MiB, 0)
    z = a.malloc(4 * MiB, 0)
    assert y == x + 4 * MiB and z == y + 4 * MiB
    a.free(x)
    a.free(z)
    st = a.stats()
    assert st["inactive_split.large_pool.current"] == 2  # x's block and z+tail
    a.free(y)  # merges with both neighbours into one unsplit 20 MiB block
    st = a.stats()
    assert st["inactive_split.large_pool.current"] == 0
    assert st["inactive_split_bytes.large_pool.current"] == 0
    segs = a.snapshot_segments()
    assert len(segs) == 1 and len(segs[0]["blocks"]) == 1
    assert segs[0]["blocks"][0]["size"] == 20 * MiB


def test_oversize_rules():
    a, _ = make("max_split_size_mb:40")
    big = a.malloc(50 * MiB, 0)
    st = a.stats()
    assert st["oversize_allocations.current"] == 1 and st["oversize_segments.current"] == 1
    assert st["max_split_size"] == 40 * MiB
    a.free(big)
    small = a.malloc(30 * MiB, 0)       # < max_split: never given an oversize block
    assert small != big
    a.free(small)
    again = a.malloc(45 * MiB, 0)       # >= max_split and 50 < 45 + 20: reuse, no split
    assert again == big
    assert a.stats()["allocated_bytes.large_pool.current"] == 50 * MiB + 0
    a.free(again)
    c, _ = make("max_split_size_mb:40")
    p = c.malloc(100 * MiB, 0)
    c.free(p)
    q = c.malloc(60 * MiB, 0)           # 100 >= 60 + 20: too wasteful, new segment
    assert q != p
    c2, _ = make("max_split_size_mb:40,max_non_split_rounding_mb:64")
    p = c2.malloc(100 * MiB, 0)
    c2.free(p)
    assert c2.malloc(60 * MiB, 0) == p  # 100 < 60 + 64


def test_unlimited_max_split_size_is_minus_one():
    a, _ = make()
    assert a.stats()["max_split_size"] == -1


@pytest.mark.parametrize("conf", ["max_split_size_mb:4398046511104",   # 2**62 bytes
                                  "max_split_size_mb:17592186044415"])  # SIZE_MAX // MiB
def test_a_limit_no_block_reaches_splits_as_no_limit(conf: str) -> None:
    # the allocator holds "no limit" as NO_SPLIT_LIMIT (2**62 - 1, a machine word when
    # compiled), and so limits above it: they choose the same blocks, count no oversize
    # block and report the configured value (as an int64, as PyTorch does)
    from accelrt.memory._config import NO_SPLIT_LIMIT, reported_size
    runs = []
    for setting in ("", conf):
        a, _ = make(setting, capacity=1 << 36)
        ptrs = [a.malloc(n, 0) for n in (512, 3 * MiB, 700 * MiB, 2 * MiB, 40 * MiB)]
        for p in ptrs[1::2]:
            a.free(p)
        ptrs += [a.malloc(n, 0) for n in (1 * MiB, 30 * MiB)]
        st = a.stats()
        runs.append((ptrs, {k: v for k, v in st.items() if k != "max_split_size"}))
        assert st["oversize_allocations.current"] == 0 == st["oversize_segments.peak"]
        assert a._max_split_size == NO_SPLIT_LIMIT and a._simple
    assert runs[0] == runs[1]
    assert make(conf)[0].stats()["max_split_size"] == reported_size(
        parse_config(conf).max_split_size)


def test_release_available_cached_blocks_before_full_release():
    # capacity fits 120 MiB: two cached oversize blocks must go before a new 100 MiB segment
    a, b = make("max_split_size_mb:40", capacity=120 * MiB)
    p1 = a.malloc(50 * MiB, 0)
    p2 = a.malloc(60 * MiB, 0)
    a.free(p1)
    a.free(p2)
    a.set_memory_fraction(1.0)
    q = a.malloc(100 * MiB, 0)      # device OOM -> release 60 and 50 (largest first) -> retry
    st = a.stats()
    assert st["num_alloc_retries"] == 0          # satisfied before release_cached_blocks
    assert st["num_sync_all_streams"] == 0
    assert st["num_device_free"] == 2
    assert a.memory_reserved() == 100 * MiB == b.used
    a.free(q)


def test_retry_chain_counts_and_fraction():
    a, _ = make(capacity=1 * GiB)
    p = a.malloc(300 * MiB, 0)
    a.free(p)
    a.set_memory_fraction(0.5)      # 512 MiB allowed
    assert a.get_memory_fraction() == 0.5
    q = a.malloc(400 * MiB, 0)      # 300 cached + 400 > 512: release cache, retry succeeds
    st = a.stats()
    assert st["num_alloc_retries"] == 1
    assert st["num_sync_all_streams"] == 1
    assert st["num_ooms"] == 0
    assert a.memory_reserved() == 400 * MiB
    a.free(q)


def test_fraction_oom_message_and_continued_use():
    a, b = make(capacity=1 * GiB)
    a.set_memory_fraction(0.25)
    keep = a.malloc(200 * MiB, 0)
    with pytest.raises(OutOfMemoryError) as ei:
        a.malloc(100 * MiB, 0)
    e = ei.value
    msg = str(e)
    assert msg.startswith("SIMULATED out of memory. Tried to allocate 100.00 MiB. Device "
                          "simulated:0 has a total capacity of 1024.00 MiB of which 824.00 MiB is free. "
                          "256.00 MiB allowed; Of the allocated memory 200.00 MiB is allocated "
                          "by accelrt, and 0 bytes is reserved by accelrt but unallocated.")
    assert "ACCELRT_ALLOC_CONF=expandable_segments:True" in msg
    assert e.size == 100 * MiB and e.allocated == 200 * MiB and e.limit == 256 * MiB
    assert isinstance(e, MemoryError) and isinstance(e, RuntimeError)
    st = a.stats()
    assert st["num_ooms"] == 1 and st["num_alloc_retries"] == 1
    # nothing lost: the live block is intact and the allocator keeps working
    assert a.memory_allocated() == 200 * MiB
    small = a.malloc(40 * MiB, 0)
    a.free(small)
    a.free(keep)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used


def test_device_oom_uses_segment_size_and_observers():
    a, b = make(capacity=64 * MiB)
    seen = []
    a.attach_oom_observer(lambda *args: seen.append(args))
    a.record_history(True)
    live = [a.malloc(20 * MiB, 0) for _ in range(3)]   # 60 MiB of 64
    with pytest.raises(OutOfMemoryError) as ei:
        a.malloc(2 * MiB, 0)                           # needs a 20 MiB segment
    # issue 14: the size asked for, then the segment it needed (observers get the segment)
    assert "Tried to allocate 2.00 MiB. " in str(ei.value)
    assert "new 20.00 MiB segment for the 2.00 MiB request" in str(ei.value)
    assert "total capacity of 64.00 MiB of which 4.00 MiB is free" in str(ei.value)
    assert "allowed" not in str(ei.value)
    assert seen == [(0, 20 * MiB, 64 * MiB, 4 * MiB)]
    ooms = [e for e in a.trace_entries() if e["action"] == "oom"]
    assert len(ooms) == 1 and ooms[0]["device_free"] == 4 * MiB and "addr" not in ooms[0]
    assert ooms[0]["size"] == 2 * MiB
    for p in live:
        a.free(p)
    p = a.malloc(2 * MiB, 0)   # works again
    a.free(p)
    check_consistent(a, b)


def test_oom_reports_private_pool_free_memory():
    a, _ = make(capacity=64 * MiB)
    a.begin_allocate_to_pool((1, 1))
    p = a.malloc(30 * MiB, 0)
    a.end_allocate_to_pool((1, 1))
    a.free(p)               # 30 MiB cached in the private pool, not releasable
    with pytest.raises(OutOfMemoryError) as ei:
        a.malloc(40 * MiB, 0)
    assert ("Of the allocated memory 30.00 MiB is allocated by accelrt, with 30.00 MiB "
            "allocated in private pools (e.g., SIMULATED Graphs), and 0 bytes is reserved" in str(ei.value))


def test_huge_and_zero_sizes():
    a, b = make()
    assert a.malloc(0, 0) == 0
    with pytest.raises(OutOfMemoryError, match="more than 1EB"):
        a.malloc(2**60, 0)
    assert a.stats()["num_ooms"] == 0 and b.calls(0)["malloc"] == 0
    assert a.malloc(np.int64(100), 0) != 0


@pytest.mark.parametrize("bad,exc", [(-1, ValueError), (1.5, TypeError), ("8", TypeError),
                                     (True, TypeError), (None, TypeError)])
def test_bad_sizes(bad, exc):
    a, _ = make()
    p = a.malloc(1000, 0)
    before = a.stats()
    with pytest.raises(exc):
        a.malloc(bad, 0)
    assert a.stats() == before
    a.free(p)


def test_bad_frees_leave_state_intact():
    a, b = make()
    p = a.malloc(1000, 0)
    q = a.malloc(5000, 0)
    before = a.stats()
    with pytest.raises(ValueError, match="not allocated by"):
        a.free(12345)
    with pytest.raises(ValueError, match="not allocated by"):
        a.free(p + 512)          # inside the block, not its start
    with pytest.raises(ValueError):
        a.record_stream(999, 3)
    assert a.stats() == before
    a.free(p)
    after_one = a.stats()
    with pytest.raises(ValueError, match="double free"):
        a.free(p)
    assert a.stats() == after_one
    a.free(q)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used


@pytest.mark.parametrize("conf", ["", "expandable_segments:True,page_reuse:True"])
@pytest.mark.parametrize("bad", [[1], {}, bytearray(b"x"), 1.5, None, "0x10"])
def test_a_pointer_that_is_not_an_int_is_a_type_error(conf, bad):
    # an unhashable object used to escape as "unhashable type: 'list'" from the block table
    a, _ = make(conf)
    p = a.malloc(1000, 0)
    a.free(a.malloc(3000, 0))     # a cached block (and, by default, a deferred free)
    before = a.stats()
    # (the compiled build checks the annotated argument type first: mypyc's own message)
    message = "pointer must be an int|int object expected"
    with pytest.raises(TypeError, match=message):
        a.free(bad)
    with pytest.raises(TypeError, match=message):
        a.record_stream(bad, 0)
    assert a.stats() == before
    a.free(p)
    assert a.memory_allocated() == 0


def test_fraction_argument_checks():
    a, _ = make()
    with pytest.raises(TypeError, match="float"):
        a.set_memory_fraction(1)
    with pytest.raises(ValueError, match="0~1"):
        a.set_memory_fraction(1.5)
    with pytest.raises(ValueError):
        a.set_memory_fraction(-0.1)
    assert a.get_memory_fraction() == 1.0
    a.set_memory_fraction(0.0)
    with pytest.raises(OutOfMemoryError):
        a.malloc(1, 0)
    a.set_memory_fraction(1.0)
    a.free(a.malloc(1, 0))


def test_throw_on_malloc_oom_rejects_without_releasing_cache():
    a, b = make("throw_on_cudamalloc_oom:True", capacity=1 * GiB)
    a.set_memory_fraction(0.5)
    p = a.malloc(300 * MiB, 0)
    a.free(p)
    with pytest.raises(OutOfMemoryError, match="preemptively rejected"):
        a.malloc(400 * MiB, 0)
    st = a.stats()
    assert st["num_oom_rejections"] == 1 and st["num_alloc_retries"] == 0
    assert a.memory_reserved() == 300 * MiB          # the cache was left alone
    a.free(a.malloc(200 * MiB, 0))                    # still works
    a.empty_cache()
    assert b.used == 0


def test_fraction_from_config():
    a, _ = make("per_process_memory_fraction:0.5", capacity=1 * GiB)
    assert a.get_memory_fraction() == 0.5


def test_garbage_collection_releases_old_blocks_first():
    a, b = make("garbage_collection_threshold:0.5", capacity=1 * GiB)
    a.set_memory_fraction(0.5)         # 512 MiB allowed; GC above 256 MiB reserved
    pa = a.malloc(100 * MiB, 0)
    pb = a.malloc(100 * MiB, 0)
    a.free(pa)                         # A cached after 2 large lookups
    for _ in range(3):                 # X (150 MiB) cached and reused: it stays young
        a.free(a.malloc(150 * MiB, 0))
    z = a.malloc(200 * MiB, 0)         # no fit: GC frees blocks at least as old as average
    st = a.stats()
    assert st["num_device_free"] == 1  # only A (age 5 >= avg 3); X (age 1) is kept
    assert st["num_alloc_retries"] == 0 and st["num_sync_all_streams"] == 0
    assert a.memory_reserved() == 450 * MiB == b.used
    sizes = sorted(s["total_size"] for s in a.snapshot_segments())
    assert sizes == [100 * MiB, 150 * MiB, 200 * MiB]
    a.free(z)
    a.free(pb)


def test_without_gc_the_retry_chain_releases_everything():
    a, b = make(capacity=1 * GiB)
    a.set_memory_fraction(0.5)
    pa = a.malloc(100 * MiB, 0)
    pb = a.malloc(100 * MiB, 0)
    a.free(pa)
    for _ in range(3):
        a.free(a.malloc(150 * MiB, 0))
    z = a.malloc(200 * MiB, 0)
    st = a.stats()
    assert st["num_device_free"] == 2 and st["num_alloc_retries"] == 1
    assert a.memory_reserved() == 300 * MiB
    a.free(z)
    a.free(pb)


# ---------------------------------------------------------------------- streams, events

def test_record_stream_defers_reuse_until_event_completes():
    a, b = make(auto_complete=False)
    p = a.malloc(4096, 0)
    a.record_stream(p, 5)
    b.launch_work(5)                # work on stream 5 still using the block
    a.free(p)
    st = a.stats()
    assert st["allocated_bytes.all.current"] == 0
    assert st["active_bytes.all.current"] == 4096          # pending free
    assert st["requested_bytes.all.current"] == 4096
    segs = a.snapshot_segments()
    assert segs[0]["blocks"][0]["state"] == "active_pending_free"
    q = a.malloc(4096, 0)           # must not get p back
    assert q != p
    b.complete_stream(5)
    r = a.malloc(4096, 0)           # the event completed: p is reusable (best fit)
    assert r == p
    st = a.stats()
    assert st["active.all.current"] == 2 and st["active.all.peak"] == 2
    assert st["allocation.all.peak"] == 2 and st["allocation.all.freed"] == 1
    a.free(q)
    a.free(r)


def test_active_peak_across_first_pending_free():
    a, b = make(auto_complete=False)
    x = a.malloc(4096, 0)
    y = a.malloc(4096, 0)
    w = a.malloc(8192, 0)          # active peak 3 (no stats read in between)
    a.free(y)
    a.free(w)
    a.record_stream(x, 5)
    b.launch_work(5)
    a.free(x)                      # first pending free: active stays 1
    z = a.malloc(1 * MiB, 0)       # active 2
    st = a.stats()
    assert st["active.all.peak"] == 3 and st["active.all.current"] == 2
    assert st["active_bytes.all.peak"] == 1 * MiB + 4096
    assert st["active.small_pool.peak"] == 3
    assert st["active_bytes.small_pool.peak"] == 1 * MiB + 4096
    a.free(z)
    b.complete_all()
    a.empty_cache()


def test_record_stream_rejects_invalid_stream():
    a, b = make()
    p = a.malloc(4096, 0)
    with pytest.raises(ValueError, match="not a live stream"):
        a.record_stream(p, -5)
    a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used


def test_free_after_recorded_stream_destroyed_synchronizes():
    a, b = make(auto_complete=False)
    p = a.malloc(4096, 0)
    a.record_stream(p, 3)
    b.launch_work(3)
    b.stream_destroy(0, 3)
    a.free(p)                      # cannot record on stream 3: the device is synchronized
    assert b.calls(0)["synchronize"] == 1 and b.stream_query(0, 3)
    st = a.stats()
    assert st["active.all.current"] == 0 and st["allocation.all.current"] == 0
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used


def test_event_record_failure_keeps_state_consistent(monkeypatch):
    a, b = make(auto_complete=False)
    p = a.malloc(4096, 0)
    a.record_stream(p, 3)
    a.record_stream(p, 4)

    def fail(*args: object) -> None:
        raise RuntimeError("fake event_record failure")

    monkeypatch.setattr(b, "event_record", fail)
    with pytest.raises(RuntimeError, match="fake event_record failure"):
        a.free(p)
    monkeypatch.undo()
    st = a.stats()
    assert st["allocation.all.current"] == 0 and st["active.all.current"] == 0
    with pytest.raises(ValueError, match="double free"):
        a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used


def test_record_stream_on_own_stream_is_ignored():
    a, b = make(auto_complete=False)
    p = a.malloc(4096, 3)
    a.record_stream(p, 3)
    a.free(p)
    assert b.calls(0)["event_record"] == 0
    assert a.malloc(4096, 3) == p


def test_empty_cache_synchronizes_pending_frees():
    a, b = make(auto_complete=False)
    p = a.malloc(3 * MiB, 0)
    a.record_stream(p, 9)
    a.record_stream(p, 10)
    b.launch_work(9)
    a.free(p)
    assert b.calls(0)["event_record"] == 2
    a.empty_cache()
    st = a.stats()
    assert st["active_bytes.all.current"] == 0
    assert st["num_sync_all_streams"] == 1
    assert a.memory_reserved() == 0 == b.used


def test_events_processed_in_fifo_order_per_stream():
    a, b = make(auto_complete=False)
    p1 = a.malloc(1 * MiB, 0)
    p2 = a.malloc(1 * MiB, 0)
    for p in (p1, p2):
        a.record_stream(p, 4)
        a.free(p)
    b.complete_stream(4)
    a.free(a.malloc(512, 0))   # processes events at malloc
    st = a.stats()
    assert st["active.all.current"] == 0


# ---------------------------------------------------------------------- private pools

def test_private_pool_routing_and_release():
    a, b = make()
    pid = (0, 1)
    a.begin_allocate_to_pool(pid, lambda s: s == 2)
    p = a.malloc(1000, 2)         # goes to the private pool
    d = a.malloc(1000, 0)         # stream 0 is not routed
    a.end_allocate_to_pool(pid)
    segs = {s["segment_pool_id"]: s for s in a.snapshot_segments()}
    assert set(segs) == {(0, 0), pid}
    assert segs[pid]["blocks"][0]["address"] == p
    a.free(p)
    q = a.malloc(1000, 2)         # not routed any more: does not reuse the private block
    assert q != p
    assert a.pool_use_count(pid) == 1
    a.empty_cache()               # the pool is still referenced: kept
    assert any(s["segment_pool_id"] == pid for s in a.snapshot_segments())
    assert len(a.snapshot_segments(pid)) == 1
    a.release_pool(pid)
    a.empty_cache()
    assert not any(s["segment_pool_id"] == pid for s in a.snapshot_segments())
    assert a.pool_use_count(pid) == 0
    a.free(q)
    a.free(d)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used


def test_private_pool_errors():
    a, _ = make()
    with pytest.raises(TypeError):
        a.begin_allocate_to_pool([1, 2])  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        a.begin_allocate_to_pool((0, 0))
    a.begin_allocate_to_pool((3, 4))
    with pytest.raises(RuntimeError, match="already"):
        a.begin_allocate_to_pool((3, 4))
    a.end_allocate_to_pool((3, 4))
    with pytest.raises(RuntimeError, match="not allocating"):
        a.end_allocate_to_pool((3, 4))
    a.release_pool((3, 4))
    with pytest.raises(ValueError):
        a.release_pool((3, 4))


def test_pool_memory_kept_while_blocks_live():
    a, b = make()
    pid = (5, 6)
    a.begin_allocate_to_pool(pid)
    p = a.malloc(5 * MiB, 0)
    a.end_allocate_to_pool(pid)
    a.release_pool(pid)
    a.empty_cache()
    assert a.memory_reserved() == 20 * MiB     # live block keeps its segment
    a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used


class _CaptureFlag(SimulatedBackend):
    """A simulated backend whose streams in ``capturing`` report that they capture."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)
        self.capturing: set[int] = set()

    def stream_is_capturing(self, index: int, stream: int) -> bool:
        return stream in self.capturing


def test_capture_defers_record_stream_frees():
    # (torch 2.15's is_capture_context(): a graph capture's pool on the device and the
    # calling thread's current stream capturing; the routing alone does not defer, s41)
    b = _CaptureFlag(auto_complete=False)
    a = DeviceCachingAllocator(b, 0, AllocatorConfig())
    cap = b.stream_create(0, 0)
    b.capturing.add(cap)
    p = a.malloc(4096, 0)
    a.record_stream(p, 1)
    a.begin_allocate_to_pool((9, 9), capture=True)
    with stream_mod._wrap(b, 0, cap):
        a.free(p)                               # deferred until no capture is underway
    assert b.calls(0)["event_record"] == 0
    a.end_allocate_to_pool((9, 9))
    b.complete_all()
    a.free(a.malloc(4096, 0))                   # inserts the deferred event
    assert b.calls(0)["event_record"] == 1
    b.complete_all()
    a.free(a.malloc(4096, 0))
    assert a.stats()["active.all.current"] == 0
    a.release_pool((9, 9))
    b.stream_destroy(0, cap)


def test_capture_pool_alone_does_not_defer_frees():
    # a thread whose current stream does not capture frees by the ordinary rules while the
    # capture's routing is open (torch 2.15; accelrt deferred every thread's frees, s41)
    a, b = make(auto_complete=False)
    p = a.malloc(4096, 0)
    a.record_stream(p, 1)
    a.begin_allocate_to_pool((9, 9), capture=True)
    a.free(p)
    assert b.calls(0)["event_record"] == 1
    a.end_allocate_to_pool((9, 9))
    b.complete_all()
    a.free(a.malloc(4096, 0))
    assert a.stats()["active.all.current"] == 0
    a.release_pool((9, 9))


# ---------------------------------------------------------------------- stats

def test_stat_keys_and_reset_semantics():
    a, _ = make()
    p = a.malloc(3 * MiB, 0)
    q = a.malloc(1000, 0)
    a.free(q)
    st = a.stats()
    for arr in ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
                "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes"):
        for t in ("all", "small_pool", "large_pool"):
            for f in ("current", "peak", "allocated", "freed"):
                assert f"{arr}.{t}.{f}" in st
    for k in ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc",
              "num_device_free", "max_split_size", "oversize_allocations.current",
              "oversize_segments.peak"):
        assert k in st
    assert st["allocation.all.allocated"] == 2 and st["allocation.all.freed"] == 1
    assert st["allocated_bytes.all.peak"] == 3 * MiB + 1024
    a.reset_peak_stats()
    st = a.stats()
    assert st["allocated_bytes.all.peak"] == 3 * MiB
    assert st["allocation.all.allocated"] == 2      # untouched by a peak reset
    a.reset_accumulated_stats()
    st = a.stats()
    assert st["allocation.all.allocated"] == 0 and st["allocation.all.freed"] == 0
    assert st["allocation.all.current"] == 1 and st["num_device_alloc"] == 0
    assert st["reserved_bytes.all.allocated"] == 0
    a.free(p)
    st = a.stats()
    assert st["allocation.all.freed"] == 1 and st["allocated_bytes.all.freed"] == 3 * MiB
    assert st["active_bytes.large_pool.freed"] == 3 * MiB
    assert a.max_memory_allocated() == 3 * MiB
    assert a.max_memory_reserved() == 22 * MiB
    assert a.memory_allocated() == 0


# ---------------------------------------------------------------------- snapshot, history

def test_snapshot_structure():
    a, _ = make()
    p = a.malloc(3 * MiB, 0)
    q = a.malloc(1000, 0)
    segs = a.snapshot_segments()
    assert [s["address"] for s in segs] == sorted(s["address"] for s in segs)
    seg = next(s for s in segs if s["segment_type"] == "large")
    assert set(seg) == {"device", "address", "total_size", "allocated_size", "active_size",
                        "requested_size", "stream", "segment_type", "segment_pool_id",
                        "is_expandable", "frames", "blocks"}
    assert seg["total_size"] == 20 * MiB and seg["allocated_size"] == 3 * MiB
    assert seg["requested_size"] == 3 * MiB and seg["is_expandable"] is False
    assert [blk["state"] for blk in seg["blocks"]] == ["active_allocated", "inactive"]
    assert seg["blocks"][1]["address"] == p + 3 * MiB
    assert set(seg["blocks"][0]) == {"address", "size", "requested_size", "state", "frames"}
    a.free(p)
    a.free(q)


def test_history_trace_entries():
    a, _ = make()
    a.free(a.malloc(100, 0))
    assert a.trace_entries() == []            # off by default
    a.record_history("all", max_entries=1000)
    p = a.malloc(3 * MiB, 0)
    a.free(p)
    a.snapshot_segments()
    a.empty_cache()
    acts = [(e["action"], e["size"]) for e in a.trace_entries()]
    assert acts == [("segment_alloc", 20 * MiB), ("alloc", 3 * MiB), ("free_requested", 3 * MiB),
                    ("free_completed", 3 * MiB), ("snapshot", 0),
                    ("segment_free", 20 * MiB), ("segment_free", 2 * MiB)]
    e = a.trace_entries()[1]
    assert list(e) == ["action", "addr", "size", "stream", "time_us", "compile_context",
                       "user_metadata", "pool_id", "frames"]          # PyTorch 2.14's order
    assert e["pool_id"] == (0, 0)
    assert e["addr"] == p and e["compile_context"] == "N/A"
    names = [f["name"] for f in e["frames"]]
    assert "test_history_trace_entries" in names
    assert all(set(f) == {"filename", "line", "name"} for f in e["frames"])


def test_history_ring_buffer_skip_and_stop():
    a, _ = make()
    a.record_history("all", max_entries=3, skip_actions=["free_completed"])
    for _ in range(5):
        a.free(a.malloc(100, 0))
    acts = [e["action"] for e in a.trace_entries()]
    assert len(acts) == 3 and "free_completed" not in acts
    assert acts[-1] == "free_requested"
    a.record_history("all", clear_history=True)
    assert a.trace_entries() == []
    a.record_history(None)
    a.free(a.malloc(100, 0))
    assert a.trace_entries() == []
    with pytest.raises(ValueError):
        a.record_history("everything")
    with pytest.raises(ValueError):
        a.record_history("all", skip_actions=["nope"])


def test_state_history_records_block_frames_only():
    a, _ = make()
    a.record_history("state", context="alloc")
    p = a.malloc(100, 0)
    # PyTorch keeps a one-entry trace buffer for "state" (test_history_context.py)
    assert [e["action"] for e in a.trace_entries()] == ["alloc"]
    blk = a.snapshot_segments()[0]["blocks"][0]
    assert any(f["name"] == "test_state_history_records_block_frames_only"
               for f in blk["frames"])
    a.free(p)


def test_annotation_entries():
    a, _ = make()
    a.record_history("all")
    a.record_annotation({"stage": "forward"})
    e = a.trace_entries()[-1]
    assert e["action"] == "annotate" and e["user_metadata"] == {"stage": "forward"}


def test_registry_one_allocator_per_device(monkeypatch):
    from accelrt.memory import _registry
    from accelrt.memory._allocator import get_allocator, peek_allocator
    monkeypatch.setattr(_registry, "_allocators", {})
    b = SimulatedBackend(device_count=2, name="fakereg")
    assert peek_allocator("fakereg", 1) is None
    a0, a1 = get_allocator(b, 0), get_allocator(b, 1)
    assert a0 is get_allocator(b, 0) and a0 is not a1
    assert peek_allocator("fakereg", 1) is a1
    p = a0.malloc(1000, 0)
    with pytest.raises(ValueError):
        a1.free(p)                     # another device's pointer
    a0.free(p)


def test_format_size():
    assert format_size(1024) == "1024 bytes"
    assert format_size(1025) == "1.00 KiB"
    assert format_size(546 * MiB) == "546.00 MiB"
    assert format_size(GiB + 1) == "1.00 GiB"


# ---------------------------------------------------------------------- conformance

def _replay(name: str, conf: str = "") -> tuple[int, int, DeviceCachingAllocator]:
    with gzip.open(TRACES / f"trace_{name}.json.gz") as f:
        trace = json.load(f)["trace"]
    a, b = make(conf, capacity=80 * GiB)
    live: dict[int, int] = {}
    for action, addr, size, _stream in trace:
        if action == "alloc":
            live[addr] = a.malloc(size, 0)
        elif action == "free_requested" and addr in live:
            a.free(live.pop(addr))
    for p in live.values():
        a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used
    st = a.stats()
    return st["reserved_bytes.all.peak"], st["num_device_alloc"], a


@pytest.mark.skipif(not TRACES.exists(), reason="shared traces not present")
@pytest.mark.parametrize("name,peak,mallocs", [
    ("resnet50_train", 6_962_544_640, 108), ("varlen_encoder", 1_608_515_584, 30)])
def test_replay_matches_pytorch(name, peak, mallocs):
    got_peak, got_mallocs, _ = _replay(name)
    assert (got_peak, got_mallocs) == (peak, mallocs)


@pytest.mark.skipif(not TRACES.exists(), reason="shared traces not present")
@pytest.mark.parametrize("name,expandable_peak", [
    ("resnet50_train", 5_865_734_144), ("varlen_encoder", 1_495_269_376)])
def test_replay_expandable_matches_pytorch(name, expandable_peak):
    peak, _, _ = _replay(name, "expandable_segments:True")
    assert peak == expandable_peak


@pytest.mark.skipif(not TRACES.exists(), reason="shared traces not present")
@pytest.mark.parametrize("name,live_peak,max_ratio", [
    ("resnet50_train", 5_762_142_352, 1.018), ("varlen_encoder", 1_246_027_776, 1.050)])
def test_replay_page_reuse_fragmentation(name, live_peak, max_ratio):
    peak, _, _ = _replay(name, "expandable_segments:True,page_reuse:True")
    assert live_peak <= peak < max_ratio * live_peak


def test_recursion_free_frames_capture():
    a, _ = make()
    a.record_history("all")
    depth = sys.getrecursionlimit() // 4

    def rec(n):
        return a.malloc(100, 0) if n == 0 else rec(n - 1)
    p = rec(min(depth, 200))
    assert len(a.trace_entries()[-1]["frames"]) > 200
    a.free(p)


def test_a_pools_free_list_of_the_last_stream_is_remembered_not_stale() -> None:
    # BlockPool.free_list remembers the last stream's list; with blocks freed and reused on
    # alternating streams, every answer is still free.get(stream) (lists are never dropped)
    from accelrt.memory._block import Block, BlockPool, fl_add
    from accelrt.memory._stats import HotCounters
    pool = BlockPool(is_small=False, owner=None, hot=HotCounters(), type_index=2)
    streams = [0, 7, 2**40 + 3, 7, 0, 2**40 + 3, 5]
    assert all(pool.free_list(s) is None for s in streams)
    for i, s in enumerate(streams):
        fl_add(pool, s, Block(0x10_0000 * (i + 1), 4096, s, pool))
        for t in streams:
            assert pool.free_list(t) is pool.free.get(t)
    assert pool.make_free_list(7) is pool.free[7] and len(pool.free[7]) == 2
    assert pool.free_list(1) is None and pool.free_list(7) is pool.free[7]
    made = pool.make_free_list(1)
    assert pool.free[1] is made and pool.free_list(1) is made and len(made) == 0


@pytest.mark.parametrize("streams", [(0, 1), (0, 2**47 + 0x100, 0x5555)])
def test_the_allocator_on_alternating_streams_serves_each_from_its_own(
        streams: tuple[int, ...]) -> None:
    from accelrt.backends import get_backend
    a = DeviceCachingAllocator(get_backend("cpu"), 0)
    live: dict[int, list[int]] = {s: [] for s in streams}
    for rnd in range(6):
        for s in streams:
            live[s].append(a.malloc(4096 * (rnd + 1), s))
        for s in streams:
            a.free(live[s].pop(0))
    for s in streams:   # each stream's cached blocks are in its own list only
        blocks = list(a._small.free.get(s, ())) + list(a._large.free.get(s, ()))
        assert blocks and all(b.stream == s and not b.allocated for b in blocks)
        for p in live[s]:
            assert a._blocks[p].stream == s
            a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0


class _Ptr(int):
    """An int subclass holding a pointer (an enum or a wrapper a user might pass)."""


def test_a_pointer_that_is_not_an_int_frees_nothing() -> None:
    # the pure build's map is a dict, which takes 4096.0 or numpy's int64(4096) for the
    # address 4096: free(float(p)) freed the block there (the compiled build refused it)
    from accelrt.backends import get_backend
    a = DeviceCachingAllocator(get_backend("cpu"), 0)
    p = a.malloc(4096, 0)
    for bad in (float(p), np.int64(p), np.uint64(p)):
        with pytest.raises(TypeError):
            a.free(bad)   # type: ignore[arg-type]
        with pytest.raises(TypeError):
            a.record_stream(bad, 0)   # type: ignore[arg-type]
        assert a.memory_allocated() == 4096
    a.free(_Ptr(p))   # an int subclass is an int
    assert a.memory_allocated() == 0
    with pytest.raises(ValueError, match="double free"):
        a.free(p)
    a.empty_cache()
