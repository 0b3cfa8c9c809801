"""Pinned host caching pool: power-of-two buckets, stream-ordered reuse, stats."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest

from accelrt import OutOfMemoryError
from accelrt import _backend as registry
from accelrt.memory import _config
from accelrt.memory._host import (
    HostCachingAllocator,
    get_host_allocator,
    peek_host_allocator,
)
from accelrt.testing import SimulatedBackend


def sim(host_capacity: int | None = None) -> SimulatedBackend:
    """A device whose events complete only when the test completes their stream."""
    return SimulatedBackend(auto_complete=False, host_capacity=host_capacity, name="eventsim")


def stream(index: int = 0, handle: int = 7) -> SimpleNamespace:
    return SimpleNamespace(_index=index, _handle=handle)


@pytest.fixture
def config_guard():
    old = _config.get_config()
    yield
    _config._reset_for_tests(old)


def test_rounds_to_power_of_two_and_reuses() -> None:
    b = sim()
    pool = HostCachingAllocator(b)
    p = pool.malloc(3000)
    assert b.host_bytes() == 4096
    pool.free(p)
    assert pool.malloc(2049) == p            # same bucket, block big enough
    q = pool.malloc(2048)                    # another bucket: a new block
    assert q != p and b.host_bytes() == 4096 + 2048
    st = pool.stats()
    assert st["num_host_alloc"] == 2
    assert st["allocations.current"] == 2 and st["allocated_bytes.current"] == 6144
    assert st["active_requests.current"] == 2 and st["active_bytes.current"] == 6144


def test_zero_size_and_bad_sizes() -> None:
    pool = HostCachingAllocator(sim())
    assert pool.malloc(0) == 0
    pool.free(0)
    with pytest.raises(TypeError):
        pool.malloc(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        pool.malloc(-1)


def test_block_used_on_a_stream_waits_for_its_event() -> None:
    b = sim()
    pool = HostCachingAllocator(b)
    p = pool.malloc(1 << 20)
    assert pool.record_event(p, stream(0, 42))
    pool.free(p)
    assert b.calls(0)["event_record"] == 1 and not b.stream_query(0, 42)
    q = pool.malloc(1 << 20)                 # event pending: not reused
    assert q != p
    b.complete_stream(42)
    r = pool.malloc(1 << 20)                 # event complete: reused
    assert r == p
    assert b.calls(0)["event_destroy"] == 1


def test_a_use_recorded_inside_a_block_holds_the_whole_block() -> None:
    """A copy from a view of a pinned array records an address inside the block (PyTorch
    records the block of the storage): the block must wait all the same."""
    b = sim()
    pool = HostCachingAllocator(b)
    p = pool.malloc(4096)
    assert pool.contains(p + 100, 200) and not pool.contains(p + 4000, 200)
    assert not pool.contains(p - 1, 1)
    assert pool.record_event(p + 1000, stream(0, 43))
    pool.free(p)
    assert not pool.contains(p, 1)              # freed blocks hold no live array
    assert pool.malloc(4096) != p               # event pending: not reused
    b.complete_stream(43)
    assert pool.malloc(4096) == p


def test_block_waits_for_every_stream() -> None:
    b = sim()
    pool = HostCachingAllocator(b)
    p = pool.malloc(4096)
    pool.record_event(p, stream(0, 1))
    pool.record_event(p, stream(0, 2))
    pool.record_event(p, stream(0, 2))       # the same stream twice records one event
    pool.free(p)
    assert b.calls(0)["event_record"] == 2
    b.complete_stream(1)
    assert pool.malloc(4096) != p
    b.complete_stream(2)
    assert pool.malloc(4096) == p


def test_record_event_on_unknown_pointer_and_bad_stream() -> None:
    pool = HostCachingAllocator(sim())
    assert pool.record_event(12345, stream()) is False
    p = pool.malloc(10)
    with pytest.raises(TypeError, match="Stream"):
        pool.record_event(p, 3)
    pool.free(p)
    assert pool.record_event(p, stream()) is False   # freed blocks take no more uses


def test_record_event_refuses_a_stream_of_another_backend() -> None:
    """The event would be recorded with a foreign stream handle at free time (a confusing,
    late failure); refuse it up front."""
    import accelrt as acc

    pool = HostCachingAllocator(sim())
    p = pool.malloc(10)
    with pytest.raises(ValueError, match="stream of backend 'cpu'.*'eventsim' host pool"):
        pool.record_event(p, acc.Stream("cpu:0"))
    pool.free(p)
    assert pool.malloc(10) == p              # nothing was recorded: reused at once


def test_double_free_and_foreign_pointer() -> None:
    pool = HostCachingAllocator(sim())
    p = pool.malloc(100)
    pool.free(p)
    with pytest.raises(ValueError, match="double free"):
        pool.free(p)
    with pytest.raises(ValueError, match="not a live pinned block"):
        pool.free(p + 8)


def test_empty_cache_returns_free_blocks_only() -> None:
    b = sim()
    pool = HostCachingAllocator(b)
    keep = pool.malloc(1000)
    pending = pool.malloc(5000)
    pool.record_event(pending, stream())
    pool.free(pending)
    pool.free(pool.malloc(300))
    pool.empty_cache()
    assert b.host_bytes() == 1024 + 8192     # the live and the pending block remain
    st = pool.stats()
    assert st["num_host_free"] == 1
    assert st["allocations.current"] == 2 and st["allocations.freed"] == 1
    b.complete_stream(7)
    pool.empty_cache()
    assert b.host_bytes() == 1024
    pool.free(keep)


def test_out_of_pinned_memory_empties_cache_then_raises() -> None:
    b = sim(host_capacity=8192)
    pool = HostCachingAllocator(b)
    pool.free(pool.malloc(4096))
    p = pool.malloc(8192)                    # only fits after the cached 4 KiB block goes
    assert p and b.host_bytes() == 8192
    with pytest.raises(OutOfMemoryError, match="pinned host memory"):
        pool.malloc(16)
    pool.free(p)


def test_duration_and_peak_stats() -> None:
    pool = HostCachingAllocator(sim())
    ptrs = [pool.malloc(1 << k) for k in range(4, 10)]
    for p in ptrs:
        pool.free(p)
    st = pool.stats()
    for name in ("host_alloc_time", "host_free_time"):
        assert {f"{name}.{k}" for k in ("total", "max", "min", "count", "avg")} <= set(st)
    assert st["host_alloc_time.count"] == 6
    assert st["active_requests.peak"] == 6 and st["active_requests.current"] == 0
    pool.reset_peak_stats()
    assert pool.stats()["active_requests.peak"] == 0
    pool.reset_accumulated_stats()
    st = pool.stats()
    assert st["num_host_alloc"] == 0 and st["host_alloc_time.count"] == 0
    assert st["allocations.allocated"] == 0 and st["allocations.current"] == 6


def test_round_threshold_and_cache_limit(config_guard) -> None:
    _config._reset_for_tests(_config.parse_config(
        "pinned_max_round_threshold_mb:1,pinned_max_cached_size_mb:2"))
    b = sim()
    pool = HostCachingAllocator(b)
    big = pool.malloc(3 * (1 << 20) + 1)     # above the threshold: not rounded
    assert b.host_bytes() == 3 * (1 << 20) + 1
    pool.free(big)                           # larger than the 2 MiB cache: released at once
    assert b.host_bytes() == 0
    small = pool.malloc(1000)
    pool.free(small)
    assert b.host_bytes() == 1024            # cached


def test_pending_block_stays_active_until_its_events_complete() -> None:
    """PyTorch: active_requests/active_bytes drop when the block becomes reusable."""
    b = sim()
    pool = HostCachingAllocator(b)
    p = pool.malloc(4096)
    pool.record_event(p, stream(0, 42))
    pool.free(p)
    st = pool.stats()
    assert st["active_requests.current"] == 1 and st["active_bytes.current"] == 4096
    b.complete_stream(42)
    pool.empty_cache()                       # processes the event, then frees the block
    st = pool.stats()
    assert st["active_requests.current"] == 0 and st["active_bytes.current"] == 0
    assert st["active_requests.freed"] == 1 and st["allocations.current"] == 0


def test_cache_limit_is_per_block_and_stops_rounding(config_guard) -> None:
    """pinned_max_cached_size caps each cached block (CachingHostAllocator.h
    maybe_cache_block), and sizes above it are not rounded up."""
    _config._reset_for_tests(_config.parse_config("pinned_max_cached_size_mb:2"))
    b = sim()
    pool = HostCachingAllocator(b)
    blocks = [pool.malloc(1 << 20) for _ in range(3)]
    for ptr in blocks:
        pool.free(ptr)
    assert b.host_bytes() == 3 << 20         # 3 MiB cached: each block is within the cap
    big = pool.malloc(3 * (1 << 20) + 1)     # above the cap: exact size, released on free
    assert b.host_bytes() == (3 << 20) + 3 * (1 << 20) + 1
    pool.free(big)
    assert b.host_bytes() == 3 << 20
    assert pool.stats()["active_requests.current"] == 0


def test_registry_per_backend() -> None:
    b = sim()
    pool = get_host_allocator(b)
    assert get_host_allocator(b) is pool
    assert peek_host_allocator("eventsim") is pool
    assert peek_host_allocator("no-such-backend") is None


# ------------------------------------------------------------ pinned_reserve_segment_size_mb

def test_reserve_segment_serves_small_blocks_with_one_pinning_call(config_guard) -> None:
    """PyTorch's PinnedReserveSegment: one segment pinned up front, blocks carved from it
    4 KiB-aligned; a request that no longer fits gets its own pinned allocation."""
    _config._reset_for_tests(_config.parse_config("pinned_reserve_segment_size_mb:1"))
    b = sim()
    pool = HostCachingAllocator(b)
    ptrs = [pool.malloc(n) for n in (100, 5000, 4096, 1)]
    assert b.host_bytes() == 1 << 20 and pool.stats()["num_host_alloc"] == 1
    base = ptrs[0]
    assert [p - base for p in ptrs] == [0, 4096, 4096 + 8192, 4096 + 8192 + 4096]
    st = pool.stats()
    assert st["allocations.current"] == 4 and st["allocated_bytes.current"] == 128 + 8192 + 4096 + 1
    big = pool.malloc(1 << 20)               # does not fit in what is left: its own block
    assert b.host_bytes() == 2 << 20 and pool.stats()["num_host_alloc"] == 2
    assert not base <= big < base + (1 << 20)
    pool.free(ptrs[1])
    assert pool.malloc(5000) == ptrs[1]      # carved blocks are cached and reused
    for p in ptrs + [big]:
        pool.free(p)
    assert b.host_bytes() == 2 << 20


def test_reserve_segment_goes_back_only_when_none_of_its_blocks_is_used(config_guard) -> None:
    _config._reset_for_tests(_config.parse_config(
        "pinned_reserve_segment_size_mb:1,pinned_max_cached_size_mb:0"))
    b = sim()
    pool = HostCachingAllocator(b)
    p, q = pool.malloc(100), pool.malloc(100)
    pool.free(p)                             # above the cache cap, but carved: stays cached
    pool.empty_cache()
    assert b.host_bytes() == 1 << 20         # q is in use: the segment stays
    assert pool.malloc(100) == p
    pool.free(p)
    pool.free(q)
    pool.empty_cache()                       # nothing in use: the segment goes back
    st = pool.stats()
    assert b.host_bytes() == 0 and st["num_host_free"] == 1
    assert st["allocations.current"] == 0 and st["allocated_bytes.current"] == 0
    assert pool.malloc(100) and b.host_bytes() == 1 << 20   # a fresh segment


def test_reserve_segment_that_cannot_be_pinned_names_the_key(config_guard) -> None:
    _config._reset_for_tests(_config.parse_config("pinned_reserve_segment_size_mb:1"))
    pool = HostCachingAllocator(sim(host_capacity=1 << 19))
    with pytest.raises(OutOfMemoryError, match="pinned_reserve_segment_size_mb; lower it"):
        pool.malloc(100)


# ------------------------------------------------------------ pinned_use_background_threads

class GatedBackend(SimulatedBackend):
    """Sets ``destroyed_gate`` when the pool destroys an event (its block became reusable)."""

    def __init__(self) -> None:
        super().__init__(auto_complete=False, name="eventsim")
        self.destroyed_gate = threading.Event()
        self.query_threads: set[str] = set()

    def event_query(self, index: int, event: int) -> bool:
        self.query_threads.add(threading.current_thread().name)
        return super().event_query(index, event)

    def event_destroy(self, index: int, event: int) -> None:
        super().event_destroy(index, event)
        self.destroyed_gate.set()


def test_background_thread_makes_freed_blocks_reusable(config_guard) -> None:
    _config._reset_for_tests(_config.parse_config("pinned_use_background_threads:True"))
    b = GatedBackend()
    pool = HostCachingAllocator(b)
    p = pool.malloc(4096)
    pool.record_event(p, stream())
    pool.free(p)
    assert pool.stats()["active_requests.current"] == 1
    b.complete_stream(7)                     # the stream's work completes
    assert b.destroyed_gate.wait(10), "the background thread never processed the event"
    assert pool.stats()["active_requests.current"] == 0   # no malloc call was needed
    assert any(n.startswith("accelrt-eventsim-host-events") for n in b.query_threads)
    worker = pool._worker
    if worker is not None:
        worker.join(10)
        assert not worker.is_alive()         # nothing pending: the thread ended
    assert pool.malloc(4096) == p


def test_background_mode_malloc_checks_only_its_own_size(config_guard) -> None:
    """malloc leaves other sizes' pending blocks to the thread (PyTorch's
    process_events_for_specific_size) and still reuses a completed block of its size."""
    _config._reset_for_tests(_config.parse_config("pinned_use_background_threads:True"))
    b = GatedBackend()
    pool = HostCachingAllocator(b)
    small, big = pool.malloc(1024), pool.malloc(8192)
    for p, s in ((small, 1), (big, 2)):
        pool.record_event(p, stream(0, s))
        pool.free(p)
    b.query_threads.clear()
    b.complete_stream(1)
    assert pool.malloc(1024) == small        # its event completed: reused at once
    assert pool.stats()["active_requests.current"] == 2        # big still waits
    b.complete_stream(2)
    worker = pool._worker
    if worker is not None:                   # it ends once nothing is pending
        worker.join(10)
    assert pool.stats()["active_requests.current"] == 1
    assert pool.malloc(8192) == big


def test_without_background_threads_no_thread_starts(config_guard) -> None:
    b = GatedBackend()
    pool = HostCachingAllocator(b)
    p = pool.malloc(4096)
    pool.record_event(p, stream())
    pool.free(p)
    assert pool._worker is None
    b.complete_stream(7)
    assert pool.malloc(4096) == p            # processed by malloc itself
    assert b.query_threads == {threading.current_thread().name}


# ------------------------------------------------------------ pinned_free_catch_all

class FailingRecordBackend(SimulatedBackend):
    def event_record(self, index: int, event: int, stream: int) -> None:
        raise RuntimeError("driver shutting down")


def test_free_catch_all_logs_instead_of_raising(config_guard, caplog) -> None:
    b = FailingRecordBackend(auto_complete=False)
    pool = HostCachingAllocator(b)
    p = pool.malloc(4096)
    pool.record_event(p, stream())
    with pytest.raises(RuntimeError, match="driver shutting down"):
        pool.free(p)                         # the default: the exception propagates
    _config._reset_for_tests(_config.parse_config("pinned_free_catch_all:True"))
    q = pool.malloc(4096)
    pool.record_event(q, stream())
    with caplog.at_level("WARNING", logger="accelrt.memory"):
        pool.free(q)
    assert "pinned_free_catch_all" in caplog.text and "driver shutting down" in caplog.text
    assert b.calls(0)["event_destroy"] >= 1  # the event made before the failure is destroyed
    assert pool.malloc(4096) not in (p, q)   # neither block is reused


# ------------------------------------------------------------ on a GPU

CUDA_REASON = registry.unavailable_reason("cuda")


@pytest.mark.skipif(CUDA_REASON is not None, reason=f"needs a CUDA GPU: {CUDA_REASON}")
def test_gpu_staged_copies_through_the_reserve_segment_and_background_thread(
        config_guard) -> None:
    """On CUDA, carved blocks of a cudaHostAlloc'd segment carry non-blocking copies, and the
    background thread (its own thread: CUDA event queries need the context there) frees them."""
    import accelrt as acc
    _config._reset_for_tests(_config.parse_config(
        "pinned_reserve_segment_size_mb:8,pinned_use_background_threads:True"))
    b = registry.get_backend("cuda")
    pool = get_host_allocator(b)
    acc.synchronize("cuda:0")
    pool.empty_cache()
    srcs = [np.arange(n, dtype=np.float32) * 0.5 for n in (10, 1000, 5000, 100_000, 3_000_000)]
    for rnd in range(10):                    # 12 MB for the last: beyond the 8 MiB segment
        arrs = []
        for src in srcs:
            a = acc.empty(src.shape, dtype="float32", device="cuda:0")
            a.copy_(src + rnd, non_blocking=True)
            arrs.append(a)
        for src, a in zip(srcs, arrs):
            np.testing.assert_array_equal(a.numpy(), src + rnd)
    acc.synchronize("cuda:0")
    reserve = pool._reserve
    assert reserve is not None and reserve.blocks, "nothing was carved from the segment"
    worker = pool._worker
    if worker is not None:
        worker.join(10)
    assert pool.stats()["active_requests.current"] == 0
    pool.empty_cache()
    assert pool._reserve is None and pool.stats()["allocations.current"] == 0
