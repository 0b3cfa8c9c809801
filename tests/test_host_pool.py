"""Pinned host caching pool: power-of-two buckets, stream-ordered reuse, stats."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from accelrt import OutOfMemoryError
from accelrt.memory import _config
from accelrt.memory._host import (
    HostCachingAllocator,
    get_host_allocator,
    peek_host_allocator,
)
from accelrt.memory._simulated import SimulatedBackend


class EventBackend(SimulatedBackend):
    """Events complete only when the test says so; host memory can be limited."""

    name = "eventsim"

    def __init__(self, host_limit: int | None = None) -> None:
        super().__init__()
        self.done: set[int] = set()
        self.recorded: list[tuple[int, int, int]] = []
        self.destroyed: list[int] = []
        self.host_limit = host_limit

    def event_record(self, index: int, event: int, stream: int) -> None:
        self.recorded.append((index, event, stream))

    def event_query(self, index: int, event: int) -> bool:
        return event in self.done

    def event_destroy(self, index: int, event: int) -> None:
        self.destroyed.append(event)

    def host_malloc(self, size: int) -> int:
        if self.host_limit is not None and self.host_bytes() + size > self.host_limit:
            return 0
        return super().host_malloc(size)


def stream(index: int = 0, handle: int = 7) -> SimpleNamespace:
    return SimpleNamespace(_index=index, _handle=handle)


@pytest.fixture
def config_guard():
    old = _config.get_config()
    yield
    _config._reset_for_tests(old)


def test_rounds_to_power_of_two_and_reuses() -> None:
    b = EventBackend()
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
    pool = HostCachingAllocator(EventBackend())
    assert pool.malloc(0) == 0
    pool.free(0)
    with pytest.raises(TypeError):
        pool.malloc(1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        pool.malloc(-1)


def test_block_used_on_a_stream_waits_for_its_event() -> None:
    b = EventBackend()
    pool = HostCachingAllocator(b)
    p = pool.malloc(1 << 20)
    assert pool.record_event(p, stream(0, 42))
    pool.free(p)
    assert len(b.recorded) == 1 and b.recorded[0][2] == 42
    q = pool.malloc(1 << 20)                 # event pending: not reused
    assert q != p
    b.done.add(b.recorded[0][1])
    r = pool.malloc(1 << 20)                 # event complete: reused
    assert r == p
    assert b.destroyed == [b.recorded[0][1]]


def test_block_waits_for_every_stream() -> None:
    b = EventBackend()
    pool = HostCachingAllocator(b)
    p = pool.malloc(4096)
    pool.record_event(p, stream(0, 1))
    pool.record_event(p, stream(0, 2))
    pool.record_event(p, stream(0, 2))       # the same stream twice records one event
    pool.free(p)
    assert len(b.recorded) == 2
    b.done.add(b.recorded[0][1])
    assert pool.malloc(4096) != p
    b.done.add(b.recorded[1][1])
    assert pool.malloc(4096) == p


def test_record_event_on_unknown_pointer_and_bad_stream() -> None:
    pool = HostCachingAllocator(EventBackend())
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

    pool = HostCachingAllocator(EventBackend())
    p = pool.malloc(10)
    with pytest.raises(ValueError, match="stream of backend 'cpu'.*'eventsim' host pool"):
        pool.record_event(p, acc.Stream("cpu:0"))
    pool.free(p)
    assert pool.malloc(10) == p              # nothing was recorded: reused at once


def test_double_free_and_foreign_pointer() -> None:
    pool = HostCachingAllocator(EventBackend())
    p = pool.malloc(100)
    pool.free(p)
    with pytest.raises(ValueError, match="double free"):
        pool.free(p)
    with pytest.raises(ValueError, match="not a live pinned block"):
        pool.free(p + 8)


def test_empty_cache_returns_free_blocks_only() -> None:
    b = EventBackend()
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
    b.done.add(b.recorded[0][1])
    pool.empty_cache()
    assert b.host_bytes() == 1024
    pool.free(keep)


def test_out_of_pinned_memory_empties_cache_then_raises() -> None:
    b = EventBackend(host_limit=8192)
    pool = HostCachingAllocator(b)
    pool.free(pool.malloc(4096))
    p = pool.malloc(8192)                    # only fits after the cached 4 KiB block goes
    assert p and b.host_bytes() == 8192
    with pytest.raises(OutOfMemoryError, match="pinned host memory"):
        pool.malloc(16)
    pool.free(p)


def test_duration_and_peak_stats() -> None:
    pool = HostCachingAllocator(EventBackend())
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
    b = EventBackend()
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
    b = EventBackend()
    pool = HostCachingAllocator(b)
    p = pool.malloc(4096)
    pool.record_event(p, stream(0, 42))
    pool.free(p)
    st = pool.stats()
    assert st["active_requests.current"] == 1 and st["active_bytes.current"] == 4096
    b.done.add(b.recorded[0][1])
    pool.empty_cache()                       # processes the event, then frees the block
    st = pool.stats()
    assert st["active_requests.current"] == 0 and st["active_bytes.current"] == 0
    assert st["active_requests.freed"] == 1 and st["allocations.current"] == 0


def test_cache_limit_is_per_block_and_stops_rounding(config_guard) -> None:
    """pinned_max_cached_size caps each cached block (CachingHostAllocator.h
    maybe_cache_block), and sizes above it are not rounded up."""
    _config._reset_for_tests(_config.parse_config("pinned_max_cached_size_mb:2"))
    b = EventBackend()
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
    b = EventBackend()
    pool = get_host_allocator(b)
    assert get_host_allocator(b) is pool
    assert peek_host_allocator("eventsim") is pool
    assert peek_host_allocator("no-such-backend") is None
