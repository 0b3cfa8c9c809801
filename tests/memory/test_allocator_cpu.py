"""The caching allocator on the real cpu backend: real memory, real asynchronous streams.

Allocator logic is unit-tested on fake pointers elsewhere; these tests check what only a real
backend shows: a block used by another stream is not handed out while that stream's work is
pending (and the bytes it wrote survive), expandable segments grow in place in a real
``mmap`` reservation and give budget back, out-of-memory against the device budget is
recoverable, and concurrent threads never receive overlapping live memory.
"""

from __future__ import annotations

import ctypes
import random
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.backends.cpu._memory import vm_available
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import AllocatorConfig, parse_config

MiB = 1 << 20
GATE_TIMEOUT = 30.0   # a stuck gate fails the test instead of hanging it


def view(ptr: int, nbytes: int) -> np.ndarray:
    """A writable uint8 numpy view of cpu device memory (host memory at that address)."""
    return np.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype=np.uint8)


def read(b: CpuBackend, ptr: int, nbytes: int, stream: int) -> np.ndarray:
    """Copy device memory to a fresh host array in stream order and wait for it."""
    out = np.empty(nbytes, dtype=np.uint8)
    b.memcpy(0, int(out.ctypes.data), ptr, nbytes, "d2h", stream)
    b.stream_synchronize(0, stream)
    return out


def make(limit: str = "256MiB", settings: str = "", async_streams: bool = True
         ) -> tuple[CpuBackend, DeviceCachingAllocator]:
    b = CpuBackend(num_devices=1, memory_limit=limit, async_streams=async_streams)
    cfg = parse_config(settings) if settings else AllocatorConfig()
    return b, DeviceCachingAllocator(b, 0, cfg)


@pytest.fixture
def closing() -> Iterator[Callable[[CpuBackend, DeviceCachingAllocator], None]]:
    """Register (backend, allocator) pairs; at teardown every pool must be empty after
    ``empty_cache`` and the backend's budget fully returned."""
    made: list[tuple[CpuBackend, DeviceCachingAllocator]] = []
    yield lambda b, a: made.append((b, a))
    for b, a in made:
        b.synchronize(0)
        a.empty_cache()
        reserved, allocated = a.memory_reserved(), a.memory_allocated()
        free, total = b.get_memory_info(0)
        b.close()
        assert allocated == 0, f"test leaked {allocated} allocated bytes"
        assert reserved == 0, f"empty_cache left {reserved} bytes reserved"
        assert free == total, f"the backend still holds {total - free} bytes"


def _overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


# ====================================================================== 1. stream ordering

class Gate:
    """A host function that blocks its stream until :meth:`open` (bounded by a timeout)."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.timed_out = False

    def __call__(self) -> None:
        if not self.event.wait(GATE_TIMEOUT):
            self.timed_out = True

    def open(self) -> None:
        self.event.set()


@pytest.mark.parametrize("size", [1000, 3 * MiB + 100, 24 * MiB],
                         ids=["small-pool", "large-pool", "own-segment"])
def test_block_used_by_busy_stream_is_not_reused_until_that_stream_finishes(
        size: int, closing: Callable[..., None]) -> None:
    b, a = make()
    closing(b, a)
    sa, sb = b.stream_create(0, 0), b.stream_create(0, 0)
    gate = Gate()
    try:
        ptr = a.malloc(size, sa)
        b.memset(0, ptr, 0x11, size, sa)          # A initialises the block
        ev = b.event_create(0, False, False, False)
        b.event_record(0, ev, sa)
        b.stream_wait_event(0, sb, ev)            # B starts after A's initialisation
        b.launch_host_func(0, gate, sb)           # B is busy until the gate opens
        b.memset(0, ptr, 0xAB, size, sb)          # ... then B writes the block
        a.record_stream(ptr, sb)
        a.free(ptr)                               # free requested while B is still busy

        seg = next(s for s in a.snapshot_segments()
                   if s["address"] <= ptr < s["address"] + s["total_size"])
        state = next(blk["state"] for blk in seg["blocks"] if blk["address"] == ptr)
        assert state == "active_pending_free"
        assert not b.stream_query(0, sb)

        # New allocations of the same size on A get other memory while B is busy, and
        # writing them does not touch the pending block.
        others = [a.malloc(size, sa) for _ in range(2)]
        for q in others:
            assert q != ptr
            assert not _overlaps((q, size), (ptr, size))
            b.memset(0, q, 0xCD, size, sa)
        b.stream_synchronize(0, sa)
        assert not b.stream_query(0, sb), "B finished although its gate is still closed"
        assert a.stats()["active_bytes.all.current"] >= 3 * ((size + 511) // 512 * 512)
    finally:
        gate.open()

    b.stream_synchronize(0, sb)
    assert not gate.timed_out
    # B's bytes are intact: nobody wrote the block while it was pending
    assert np.all(view(ptr, size) == 0xAB)
    # once B's work completed, the next allocation of that size on A reuses the block
    again = a.malloc(size, sa)
    assert again == ptr
    assert np.all(read(b, again, size, sa) == 0xAB)
    for q in (*others, again):
        a.free(q)
    b.event_destroy(0, ev)
    b.synchronize(0)
    b.stream_destroy(0, sa)
    b.stream_destroy(0, sb)


def test_pending_block_is_not_given_to_another_stream_either(
        closing: Callable[..., None]) -> None:
    b, a = make()
    closing(b, a)
    sa, sb, sc = (b.stream_create(0, 0) for _ in range(3))
    gate = Gate()
    try:
        ptr = a.malloc(4096, sa)
        b.launch_host_func(0, gate, sb)
        b.memset(0, ptr, 0x5A, 4096, sb)
        a.record_stream(ptr, sb)
        a.record_stream(ptr, sc)                   # used on two streams
        a.free(ptr)
        got = [a.malloc(4096, s) for s in (sa, sb, sc)]
        assert ptr not in got
    finally:
        gate.open()
    b.synchronize(0)
    assert np.all(view(ptr, 4096) == 0x5A)
    # freed once both recorded streams passed their events; blocks stay per stream (A)
    assert a.malloc(4096, sa) == ptr
    a.free(ptr)
    for q in got:
        a.free(q)
    for s in (sa, sb, sc):
        b.stream_destroy(0, s)


class _SyncHookBackend(CpuBackend):
    """A cpu backend that runs ``on_event_synchronize`` when the host blocks on an event,
    standing in for "the device finishes while the host waits" without any timing."""

    on_event_synchronize: Callable[[], None] = staticmethod(lambda: None)

    def event_synchronize(self, index: int, event: int) -> None:
        self.on_event_synchronize()
        super().event_synchronize(index, event)


def test_out_of_memory_waits_for_pending_frees_instead_of_failing(
        closing: Callable[..., None]) -> None:
    """With the budget nearly used, a pending (record_stream) free is completed by the OOM
    retry path, which synchronises the recorded stream's events before releasing the cache."""
    b = _SyncHookBackend(num_devices=1, memory_limit="64MiB", async_streams=True)
    a = DeviceCachingAllocator(b, 0, AllocatorConfig())
    closing(b, a)
    sa, sb = b.stream_create(0, 0), b.stream_create(0, 0)
    gate = Gate()
    b.on_event_synchronize = gate.open  # B can only finish once the allocator waits for it
    done: list[bool] = []
    ptr = a.malloc(40 * MiB, sa)
    b.launch_host_func(0, gate, sb)
    b.memset(0, ptr, 0x77, 40 * MiB, sb)
    b.launch_host_func(0, lambda: done.append(bool(np.all(view(ptr, 40 * MiB) == 0x77))), sb)
    a.record_stream(ptr, sb)
    a.free(ptr)
    try:
        q = a.malloc(40 * MiB, sa)     # only fits once the pending block is released
    finally:
        gate.open()
    assert not gate.timed_out
    assert done == [True], "B's work must complete before its block is released"
    assert a.stats()["num_sync_all_streams"] >= 1
    assert a.memory_reserved() == 40 * MiB
    b.memset(0, q, 1, 40 * MiB, sa)
    assert np.all(read(b, q, 40 * MiB, sa) == 1)
    a.free(q)
    b.synchronize(0)
    b.stream_destroy(0, sa)
    b.stream_destroy(0, sb)


# ====================================================================== 2. expandable segments

@pytest.mark.skipif(not vm_available(), reason="the cpu backend's virtual memory needs Linux mmap")
@pytest.mark.parametrize("async_streams", [False, True], ids=["sync", "async"])
def test_expandable_segment_grows_in_place_and_gives_memory_back(
        async_streams: bool, closing: Callable[..., None]) -> None:
    b, a = make(limit="256MiB", settings="expandable_segments:True",
                async_streams=async_streams)
    closing(b, a)
    budget = b.get_memory_info(0)[1]
    page = 20 * MiB   # large-pool page: large_segment_size rounded to the 2 MiB granularity

    p1 = a.malloc(30 * MiB, 0)                  # maps 2 pages
    assert a.memory_reserved() == 2 * page
    assert b.get_memory_info(0) == (budget - 2 * page, budget)
    p2 = a.malloc(20 * MiB, 0)                  # needs one more page: grows in place
    assert p2 == p1 + 30 * MiB
    assert a.memory_reserved() == 3 * page
    assert b.get_memory_info(0)[0] == budget - 3 * page
    segs = [s for s in a.snapshot_segments() if s["segment_type"] == "large"]
    assert len(segs) == 1 and segs[0]["is_expandable"]
    assert segs[0]["address"] == p1 and segs[0]["total_size"] == 3 * page

    # the memory is real and writable everywhere, across page boundaries
    b.memset(0, p1, 0x3C, 30 * MiB, 0)
    b.memset(0, p2, 0xC3, 20 * MiB, 0)
    b.synchronize(0)
    v1, v2 = view(p1, 30 * MiB), view(p2, 20 * MiB)
    assert np.all(v1 == 0x3C) and np.all(v2 == 0xC3)
    v1[page - 8: page + 8] = 9                   # straddles the first page boundary
    assert v1[page - 8: page + 8].tolist() == [9] * 16

    # freeing the last block merges it with the free tail of the mapped range
    a.free(p2)
    blocks = segs_blocks(a)
    assert blocks == [(p1, 30 * MiB, "active_allocated"), (p2, 30 * MiB, "inactive")]

    # empty_cache unmaps the whole free pages and gives their budget back
    a.empty_cache()
    assert a.memory_reserved() == 2 * page
    assert b.get_memory_info(0)[0] == budget - 2 * page
    assert np.all(view(p1, 30 * MiB)[:page - 8] == 0x3C)   # the live block is untouched

    # growing again reuses the same reservation right after p1
    p3 = a.malloc(10 * MiB, 0)
    assert p3 == p1 + 30 * MiB
    view(p3, 10 * MiB)[:] = 1
    a.free(p3)
    a.free(p1)
    a.empty_cache()
    assert a.memory_reserved() == 0
    assert b.get_memory_info(0) == (budget, budget)
    assert a.snapshot_segments() == []


def segs_blocks(a: DeviceCachingAllocator) -> list[tuple[int, int, str]]:
    return [(blk["address"], blk["size"], blk["state"])
            for s in a.snapshot_segments() for blk in s["blocks"]]


@pytest.mark.skipif(not vm_available(), reason="the cpu backend's virtual memory needs Linux mmap")
def test_expandable_segment_out_of_memory_unmaps_partial_growth(
        closing: Callable[..., None]) -> None:
    b, a = make(limit="64MiB", settings="expandable_segments:True", async_streams=False)
    closing(b, a)
    p = a.malloc(50 * MiB, 0)                  # 3 pages of 20 MiB = 60 MiB mapped
    assert b.get_memory_info(0)[0] == 4 * MiB
    with pytest.raises(acc.OutOfMemoryError) as info:
        a.malloc(20 * MiB, 0)                  # needs a 4th page: over the 64 MiB budget
    assert info.value.size == 20 * MiB
    assert b.get_memory_info(0)[0] == 4 * MiB  # nothing stays mapped by the failed attempt
    q = a.malloc(10 * MiB, 0)                  # fits in the mapped tail
    assert q == p + 50 * MiB
    view(q, 10 * MiB)[:] = 2
    a.free(p)
    a.free(q)


# ====================================================================== 3. out of memory

@pytest.mark.parametrize("async_streams", [False, True], ids=["sync", "async"])
def test_out_of_memory_reports_sizes_and_allocator_keeps_working(
        async_streams: bool, closing: Callable[..., None]) -> None:
    b, a = make(limit="64MiB", async_streams=async_streams)
    closing(b, a)
    p = a.malloc(40 * MiB, 0)
    b.memset(0, p, 0x42, 40 * MiB, 0)
    with pytest.raises(acc.OutOfMemoryError) as info:
        a.malloc(40 * MiB, 0)
    err = info.value
    assert isinstance(err, MemoryError) and isinstance(err, RuntimeError)
    assert (err.size, err.allocated, err.limit) == (40 * MiB, 40 * MiB, 64 * MiB)
    msg = str(err)
    assert "Tried to allocate 40.00 MiB" in msg
    assert "total capacity of 64.00 MiB" in msg
    assert "24.00 MiB is free" in msg
    st = a.stats()
    assert st["num_ooms"] == 1
    assert st["num_alloc_retries"] == 1
    assert st["allocated_bytes.all.current"] == 40 * MiB
    assert st["reserved_bytes.all.current"] == 40 * MiB
    assert st["segment.all.current"] == 1
    assert np.all(read(b, p, 40 * MiB, 0) == 0x42)   # the failed request touched nothing

    # it keeps working: free + alloc of the same size reuses the cached segment
    a.free(p)
    q = a.malloc(40 * MiB, 0)
    assert q == p
    b.memset(0, q, 0x24, 40 * MiB, 0)
    assert np.all(read(b, q, 40 * MiB, 0) == 0x24)
    st = a.stats()
    assert st["allocated_bytes.all.current"] == 40 * MiB
    assert st["allocation.all.current"] == 1
    assert st["allocated_bytes.all.peak"] == 40 * MiB
    assert st["num_ooms"] == 1
    a.free(q)
    assert a.memory_allocated() == 0


def test_out_of_memory_frees_the_cache_and_retries(closing: Callable[..., None]) -> None:
    b, a = make(limit="64MiB", async_streams=False)
    closing(b, a)
    p = a.malloc(30 * MiB, 0)
    a.free(p)                                   # cached: the backend still holds 30 MiB
    assert b.get_memory_info(0)[0] == 34 * MiB
    q = a.malloc(50 * MiB, 0)                   # only fits after the cache is released
    st = a.stats()
    assert st["num_alloc_retries"] == 1 and st["num_ooms"] == 0
    assert st["reserved_bytes.all.current"] == 50 * MiB
    assert st["num_device_free"] == 1
    view(q, 50 * MiB)[:] = 3
    a.free(q)


def test_memory_fraction_limits_the_allocator_below_the_device_budget(
        closing: Callable[..., None]) -> None:
    b, a = make(limit="64MiB", async_streams=False)
    closing(b, a)
    a.set_memory_fraction(0.5)
    with pytest.raises(acc.OutOfMemoryError) as info:
        a.malloc(40 * MiB, 0)
    assert info.value.limit == 32 * MiB
    assert "32.00 MiB allowed" in str(info.value)
    assert b.get_memory_info(0)[0] == 64 * MiB   # the backend was not even asked
    p = a.malloc(30 * MiB, 0)
    a.set_memory_fraction(1.0)
    q = a.malloc(30 * MiB, 0)
    a.free(p)
    a.free(q)


# ====================================================================== 4. threads

@pytest.mark.parametrize("async_streams", [False, True], ids=["sync", "async"])
def test_threads_with_own_streams_get_disjoint_memory(
        async_streams: bool, closing: Callable[..., None]) -> None:
    b, a = make(limit="512MiB", async_streams=async_streams)
    closing(b, a)
    registry_lock = threading.Lock()
    live: dict[int, tuple[int, int]] = {}        # ptr -> (size, thread id); guarded by lock
    errors: list[str] = []
    barrier = threading.Barrier(4)

    def worker(tid: int) -> None:
        rng = random.Random(1234 + tid)
        s = b.stream_create(0, 0)
        mine: list[tuple[int, int, int]] = []     # (ptr, size, byte value)
        try:
            barrier.wait(GATE_TIMEOUT)
            for it in range(60):
                if mine and (len(mine) >= 5 or rng.random() < 0.4):
                    ptr, size, val = mine.pop(rng.randrange(len(mine)))
                    got = read(b, ptr, size, s)
                    if not np.all(got == val):
                        errors.append(f"thread {tid}: block {ptr:#x}+{size} was overwritten")
                    with registry_lock:
                        del live[ptr]
                    a.free(ptr)
                    continue
                size = rng.choice([rng.randrange(1, 4096), rng.randrange(4096, MiB),
                                   rng.randrange(MiB, 6 * MiB)])
                ptr = a.malloc(size, s)
                with registry_lock:
                    for other, (osize, otid) in live.items():
                        if _overlaps((ptr, size), (other, osize)):
                            errors.append(f"thread {tid}: {ptr:#x}+{size} overlaps live "
                                          f"{other:#x}+{osize} of thread {otid}")
                    live[ptr] = (size, tid)
                val = (tid * 60 + it) % 251 + 1
                b.memset(0, ptr, val, size, s)
                mine.append((ptr, size, val))
            for ptr, size, val in mine:
                if not np.all(read(b, ptr, size, s) == val):
                    errors.append(f"thread {tid}: block {ptr:#x}+{size} was overwritten")
                with registry_lock:
                    del live[ptr]
                a.free(ptr)
            b.stream_synchronize(0, s)
            b.stream_destroy(0, s)
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(f"thread {tid}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(GATE_TIMEOUT * 2)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert not live
    st = a.stats()
    assert st["allocated_bytes.all.current"] == 0
    assert st["active_bytes.all.current"] == 0
    assert st["allocation.all.allocated"] == st["allocation.all.freed"] > 0
    assert a.memory_reserved() > 0               # cached until empty_cache
    a.empty_cache()
    assert a.memory_reserved() == 0
    assert b.get_memory_info(0)[0] == b.get_memory_info(0)[1]


# ====================================================================== bad streams

def test_record_stream_rejects_an_invalid_stream_handle() -> None:
    b, a = make(limit="64MiB")
    try:
        p = a.malloc(4096, 0)
        with pytest.raises(ValueError):
            a.record_stream(p, 99999)
        a.free(p)
        a.empty_cache()
        assert a.memory_reserved() == 0
    finally:
        b.close()


def test_free_after_the_recorded_stream_was_destroyed() -> None:
    b, a = make(limit="64MiB")
    try:
        s = b.stream_create(0, 0)
        p = a.malloc(4096, 0)
        b.memset(0, p, 1, 4096, s)
        a.record_stream(p, s)
        b.stream_destroy(0, s)      # its queued work still runs
        a.free(p)                   # must neither raise nor leak the block
        b.synchronize(0)
        assert a.stats()["active_bytes.all.current"] == 0
        a.empty_cache()
        assert a.memory_reserved() == 0
    finally:
        b.close()
