"""Threads hammering one allocator, then invariant checks."""

from __future__ import annotations

import itertools
import random
import threading

import pytest

from accelrt import OutOfMemoryError
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.testing import SimulatedBackend
from tests.helpers.mappings import check_mappings

MiB = 1 << 20
THREADS = 4
OPS = 10_000


def _run_threads(worker, errors: list[BaseException]) -> None:
    """Run ``worker(tid)`` on THREADS threads to the end; fail with what they raised."""
    threads = [threading.Thread(target=worker, args=(t,)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def _disjoint_live(owned: list[dict[int, int]]) -> list[tuple[int, int]]:
    """The threads' live ``(address, size)`` pairs by address, checked not to overlap."""
    live = sorted((p, s) for m in owned for p, s in m.items())
    for (p, s), (q, _) in itertools.pairwise(live):
        assert p + s <= q
    return live


@pytest.mark.parametrize("conf", ["", "expandable_segments:True",
                                  "expandable_segments:True,page_reuse:True"])
def test_four_threads_mixed_operations(conf):
    b = SimulatedBackend(capacity=2048 * MiB, auto_complete=False)
    a = DeviceCachingAllocator(b, 0, parse_config(conf) if conf else None)
    errors: list[BaseException] = []
    owned: list[dict[int, int]] = [{} for _ in range(THREADS)]
    barrier = threading.Barrier(THREADS)

    def worker(tid: int) -> None:
        rng = random.Random(tid)
        mine = owned[tid]
        stream = tid % 2
        try:
            barrier.wait()
            for i in range(OPS):
                r = rng.random()
                if r < 0.5 or not mine:
                    size = rng.choice((rng.randint(1, 8192), rng.randint(8193, 2 * MiB),
                                       rng.randint(2 * MiB, 24 * MiB)))
                    try:
                        p = a.malloc(size, stream)
                    except OutOfMemoryError:
                        continue
                    assert p not in mine
                    mine[p] = size
                elif r < 0.9:
                    p = rng.choice(list(mine))
                    del mine[p]
                    a.free(p)
                elif r < 0.95:
                    p = rng.choice(list(mine))
                    b.launch_work(10 + tid)
                    a.record_stream(p, 10 + tid)
                elif r < 0.97:
                    b.complete_stream(10 + tid)
                elif r < 0.98:
                    a.empty_cache()
                else:
                    a.stats()
                    a.memory_allocated()
                    if i % 500 == 0:
                        a.snapshot_segments()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    _run_threads(worker, errors)

    # live allocations never overlap and are exactly what the allocator shows
    live = _disjoint_live(owned)
    segs = a.snapshot_segments()
    shown = sorted((blk["address"], blk["requested_size"]) for seg in segs
                   for blk in seg["blocks"] if blk["state"] == "active_allocated")
    assert shown == live
    st = a.stats()
    assert st["allocation.all.current"] == len(live)
    assert st["allocated_bytes.all.current"] == sum(
        blk["size"] for seg in segs for blk in seg["blocks"]
        if blk["state"] == "active_allocated")
    assert st["reserved_bytes.all.current"] == sum(seg["total_size"] for seg in segs) == b.used
    check_mappings(a, b)

    for p, _ in live:
        a.free(p)
    b.complete_all()
    a.empty_cache()
    st = a.stats()
    assert a.memory_reserved() == 0 == b.used
    assert st["active_bytes.all.current"] == 0 and st["inactive_split.all.current"] == 0
    assert st["allocation.all.allocated"] == st["allocation.all.freed"]


def test_threads_reusing_deferred_frees():
    """Each thread frees a block and at once allocates its size again (the fast path defers
    such frees and lets the next malloc take the block back) while the others allocate, free
    and read statistics: a deferred free is completed by whichever thread comes next, and at
    the end every statistic matches the blocks."""
    b = SimulatedBackend(capacity=2048 * MiB)
    a = DeviceCachingAllocator(b, 0)
    errors: list[BaseException] = []
    owned: list[dict[int, int]] = [{} for _ in range(THREADS)]
    barrier = threading.Barrier(THREADS)
    reuses = [0] * THREADS

    def worker(tid: int) -> None:
        rng = random.Random(100 + tid)
        mine = owned[tid]
        sizes = (512, 3000, MiB, 12 * MiB, 20 * MiB)
        try:
            barrier.wait()
            for _ in range(OPS // 2):
                r = rng.random()
                if (r < 0.3 and len(mine) < 10) or not mine:
                    size = rng.choice(sizes)
                    try:
                        p = a.malloc(size, 0)
                    except OutOfMemoryError:
                        continue
                    assert p not in mine
                    mine[p] = size
                elif r < 0.9:
                    p = rng.choice(list(mine))
                    size = mine.pop(p)
                    a.free(p)
                    try:
                        q = a.malloc(size, 0)
                    except OutOfMemoryError:
                        continue
                    assert q not in mine
                    mine[q] = size
                    reuses[tid] += q == p
                elif r < 0.97:
                    p = rng.choice(list(mine))
                    del mine[p]
                    a.free(p)
                else:
                    st = a.stats()
                    assert st["allocation.all.current"] >= len(mine)
                    a.memory_allocated()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    _run_threads(worker, errors)
    assert sum(reuses) > 0
    live = _disjoint_live(owned)
    st = a.stats()
    segs = a.snapshot_segments()
    assert st["allocation.all.current"] == len(live)
    assert st["requested_bytes.all.current"] == sum(s for _, s in live)
    assert st["allocated_bytes.all.current"] == a.memory_allocated() == sum(
        blk["size"] for seg in segs for blk in seg["blocks"]
        if blk["state"] == "active_allocated")
    assert st["inactive_split.all.current"] == sum(
        1 for seg in segs if len(seg["blocks"]) > 1
        for blk in seg["blocks"] if blk["state"] == "inactive")
    for p, _ in live:
        a.free(p)
    a.empty_cache()
    st = a.stats()
    assert a.memory_reserved() == 0 == b.used
    assert st["allocation.all.allocated"] == st["allocation.all.freed"]
    assert st["requested_bytes.all.current"] == 0 and st["inactive_split.all.current"] == 0
