"""Hostile inputs against the low-fragmentation policy (``expandable_segments:True,
page_reuse:True``): out-of-memory while a split maps its pieces and while a segment grows,
small devices, record_stream on blocks in split mappings, other streams, private pools,
snapshots and empty_cache mid-way. After every step the mappings are exactly the device's
(``check_mappings``), the statistics match the blocks, and nothing stays mapped or reserved
after the last free and empty_cache."""

from __future__ import annotations

import random

import pytest

from accelrt import OutOfMemoryError
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.testing._allocators import GeneralPathAllocator
from accelrt.memory._config import parse_config
from accelrt.testing._simulated import SimulatedBackend
from tests.helpers.mappings import check_mappings

MiB = 1 << 20
LOW_FRAG = "expandable_segments:True,page_reuse:True"


class FlakyMaps(SimulatedBackend):
    """A simulated device whose vm_map fails (out of memory) while ``fail`` is set, after
    ``after`` more successful mappings (another process taking the memory meanwhile)."""

    def __init__(self, capacity: int = 1 << 34, **kw: object) -> None:
        super().__init__(capacity=capacity, **kw)  # type: ignore[arg-type]
        self.fail = False
        self.after = 0
        self.failed = 0

    def vm_map(self, index: int, ptr: int, size: int) -> bool:
        if self.fail:
            if self.after == 0:
                self.failed += 1
                return False
            self.after -= 1
        return super().vm_map(index, ptr, size)


def consistent(a: DeviceCachingAllocator, b: SimulatedBackend) -> None:
    """The blocks, the statistics, the free lists and the device's mappings agree."""
    check_mappings(a, b)
    s = a.stats()
    segs = a.snapshot_segments()
    alloc = sum(x["size"] for seg in segs for x in seg["blocks"]
                if x["state"] == "active_allocated")
    active = sum(x["size"] for seg in segs for x in seg["blocks"] if x["state"] != "inactive")
    assert s["allocated_bytes.all.current"] == alloc == a.memory_allocated()
    assert s["active_bytes.all.current"] == active
    assert s["reserved_bytes.all.current"] == a.memory_reserved() == b.used
    assert sum(seg["total_size"] for seg in segs) == b.used   # (the mapped ranges)
    keys = sorted(blk.addr for pool in (a._small, a._large)
                  for fl in pool.free.values() for blk in fl)
    free = sorted(blk.addr for blk in a._blocks.values()
                  if not blk.allocated and blk.mapped and not blk.event_count
                  and not blk.stream_uses and blk.pool.owner is None)
    assert keys == free


def all_back(a: DeviceCachingAllocator, b: SimulatedBackend, live: list[int]) -> None:
    for p in live:
        a.free(p)
    b.complete_all()
    a.empty_cache()
    consistent(a, b)
    assert a.memory_reserved() == 0 == b.used
    assert b.reservations == {} and a._expandable_segments.segments == []
    assert a.stats()["active_bytes.all.current"] == 0


def _one_big_free_range(b: SimulatedBackend) -> tuple[DeviceCachingAllocator, int]:
    """An allocator whose only memory is one free 200 MiB mapped range (100 one-page
    mappings: the high-water mark was 0 when they were made)."""
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    p = a.malloc(200 * MiB, 0)
    a.free(p)
    es = a._expandable_segments
    assert es.piece_pages == 1 and len(es.segments[0].starts) == 100
    return a, p


@pytest.mark.parametrize("after", [0, 1, 20, 49])
def test_out_of_memory_while_growing_past_a_free_range(after: int) -> None:
    """A request larger than the free mapped range extends it into the unmapped pages after
    it; when the device runs out of memory part-way (another process took it), the pieces
    mapped for it are undone and the request is served after the cache is freed, or raises
    OutOfMemoryError; nothing leaks and the state stays consistent."""
    b = FlakyMaps()
    a, base = _one_big_free_range(b)
    b.fail, b.after = True, after
    try:
        q: int | None = a.malloc(300 * MiB, 0)
    except OutOfMemoryError:
        q = None
    assert b.failed >= 1
    consistent(a, b)
    b.fail = False
    r = a.malloc(3 * MiB, 0)                 # the device has memory again
    consistent(a, b)
    live = [x for x in (q, r) if x]
    if q is not None:
        assert q == base                     # the free range, extended
    assert a.memory_reserved() <= 303 * MiB
    all_back(a, b, live)


def test_out_of_memory_on_every_map_keeps_the_cache_consistent() -> None:
    """Every mapping fails: the request that needs new pages raises OutOfMemoryError naming
    its size, and the allocator still serves what is mapped."""
    b = FlakyMaps()
    a, _ = _one_big_free_range(b)
    b.fail = True
    with pytest.raises(OutOfMemoryError) as e:
        a.malloc(300 * MiB, 0)
    assert "Tried to allocate 300.00 MiB" in str(e.value)
    consistent(a, b)
    # the retry after freeing the cache (as PyTorch's) gave every free mapping back
    assert a.memory_reserved() == b.used == 0
    with pytest.raises(OutOfMemoryError):
        a.malloc(1000, 0)
    consistent(a, b)
    b.fail = False
    all_back(a, b, [a.malloc(1000, 0), a.malloc(3 * MiB, 0)])


@pytest.mark.parametrize("after", [0, 1])
def test_out_of_memory_while_a_segment_grows(after: int) -> None:
    """A request that needs several mappings (its whole pages, a partial last page) fails on
    one of them: the mappings made for it are undone, and nothing else changes."""
    b = FlakyMaps()
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    keep = a.malloc(5 * MiB + 100, 0)
    before = (a.snapshot_segments(), a.memory_reserved(), b.used)
    b.fail, b.after = True, after
    with pytest.raises(OutOfMemoryError):
        a.malloc(7 * MiB + 100, 0)
    consistent(a, b)
    segs = a.snapshot_segments()
    assert (a.memory_reserved(), b.used) == before[1:]
    assert [x["blocks"] for x in segs] == [x["blocks"] for x in before[0]]
    b.fail = False
    all_back(a, b, [keep, a.malloc(7 * MiB + 100, 0)])


def test_record_stream_on_blocks_in_split_mappings() -> None:
    """Blocks in pieces of a split mapping, used on other streams: their frees wait for the
    streams' work; neither a split, nor the unmapping that growth does below the high-water
    mark, nor empty_cache while they wait touches their pages before it completes."""
    b = SimulatedBackend(capacity=1 << 34, auto_complete=False)
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    s1, s2 = b.stream_create(0, 0), b.stream_create(0, 0)
    p = a.malloc(200 * MiB, 0)
    a.free(p)
    blocks = [a.malloc(3 * MiB, 0) for _ in range(4)]   # split the mapping: 1-page pieces
    assert len(a._expandable_segments.segments[0].starts) > 2
    for i, q in enumerate(blocks):
        a.record_stream(q, (s1, s2)[i % 2])
    b.launch_work(s1)
    b.launch_work(s2)
    for q in blocks[:3]:
        a.free(q)                                        # pending: work queued on s1/s2
    consistent(a, b)
    pending = a.stats()["active_bytes.all.current"]
    assert pending == 4 * 3 * MiB
    big = a.malloc(150 * MiB, 0)       # reuses the free pages, not the pending ones
    consistent(a, b)
    for q in blocks[:3]:
        assert not (big <= q < big + 150 * MiB) and not (q <= big < q + 3 * MiB)
    b.complete_stream(s1)
    a.empty_cache()                    # waits for s2's work: every pending free completes
    consistent(a, b)
    assert a.stats()["active_bytes.all.current"] == 3 * MiB + 150 * MiB
    all_back(a, b, [blocks[3], big])


def test_other_streams_and_private_pools_with_expandable_segments() -> None:
    """Each stream has its own reservations; a private pool's expandable segments keep
    PyTorch's behaviour beside the policy; all go back at the end."""
    b = SimulatedBackend(capacity=1 << 34)
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    s = b.stream_create(0, 0)
    x = a.malloc(30 * MiB, s)
    y = a.malloc(30 * MiB, 0)
    assert a.segment_of(x)[0] != a.segment_of(y)[0]
    a.create_pool((9, 1))
    a.begin_allocate_to_pool((9, 1))
    z = a.malloc(3 * MiB, 0)
    w = a.malloc(600, s)
    a.end_allocate_to_pool((9, 1))
    a.release_pool((9, 1))
    consistent(a, b)
    assert {seg["segment_pool_id"] for seg in a.snapshot_segments()} == {(0, 0), (9, 1)}
    a.free(x)
    a.free(z)
    a.empty_cache()
    consistent(a, b)
    a.free(w)
    a.release_pool((9, 1))
    all_back(a, b, [y])


@pytest.mark.parametrize("seed", range(4))
def test_random_sequences_on_a_small_device(seed: int) -> None:
    """Random allocations of many shapes on a small device (out-of-memory, splits, unmaps
    before growth), record_stream with pending work, empty_cache, resets, snapshots; the
    allocator with its fast paths (the cached free) and the general code agree, and the
    mappings are the device's at every check."""
    rng = random.Random(seed)
    capacity = rng.choice((48, 96, 160)) * MiB
    bs = [SimulatedBackend(capacity=capacity, auto_complete=False) for _ in range(2)]
    fast = DeviceCachingAllocator(bs[0], 0, parse_config(LOW_FRAG))
    general = GeneralPathAllocator(bs[1], 0, parse_config(LOW_FRAG))
    streams = [0] + [bs[0].stream_create(0, 0) for _ in range(2)]
    assert [bs[1].stream_create(0, 0) for _ in range(2)] == streams[1:]
    live: list[int] = []

    def both(name: str, *args: object) -> object:
        out = []
        for a in (fast, general):
            try:
                out.append(("ok", getattr(a, name)(*args)))
            except OutOfMemoryError as e:
                out.append(("oom", str(e)))
        assert out[0] == out[1], (name, args)
        return out[0][1] if out[0][0] == "ok" else None

    for i in range(300):
        r = rng.random()
        if r < 0.45 or not live:
            size = rng.choice((rng.randrange(1, 4096), rng.randrange(1, 3 * MiB),
                               rng.randrange(1, 40 * MiB)))
            p = both("malloc", size, rng.choice((0, 0, streams[1])))
            if p:
                live.append(p)   # type: ignore[arg-type]
        elif r < 0.8:
            both("free", live.pop(rng.randrange(len(live))))
        elif r < 0.87:
            p = rng.choice(live)
            both("record_stream", p, streams[2])
            for b in bs:
                b.launch_work(streams[2])
        elif r < 0.9:
            for b in bs:
                b.complete_all()
        elif r < 0.93:
            both("empty_cache")
        elif r < 0.95:
            both("reset_peak_stats")
        else:
            assert fast.snapshot_segments() == general.snapshot_segments()
        if i % 25 == 0:
            for a, b in zip((fast, general), bs):
                consistent(a, b)
            assert fast.stats() == general.stats()
    assert fast.stats() == general.stats()
    all_back(fast, bs[0], live)
    all_back(general, bs[1], live)


@pytest.mark.parametrize("seed", range(3))
def test_simulated_mappings_match_a_page_model(seed: int) -> None:
    """The simulated device's interval book-keeping (sorted mapping starts) accepts and
    refuses exactly what a page-by-page model does: a map overlapping any mapped page, an
    unmap with an unmapped page in it or cutting a mapping at either end, a release with a
    page still mapped; the capacity counts mapped bytes."""
    rng = random.Random(seed)
    page = 2 * MiB
    b = SimulatedBackend(capacity=40 * page)
    base = b.vm_reserve(0, 64 * page)
    maps: dict[int, int] = {}                  # first page -> pages
    for _ in range(600):
        first, n = rng.randrange(64), rng.randrange(1, 6)
        n = min(n, 64 - first)
        pages = {p for s, m in maps.items() for p in range(s, s + m)}
        want = set(range(first, first + n))
        if rng.random() < 0.5:
            if want & pages:
                with pytest.raises(ValueError, match="overlaps"):
                    b.vm_map(0, base + first * page, n * page)
            elif len(pages) + n > 40:
                assert not b.vm_map(0, base + first * page, n * page)
            else:
                assert b.vm_map(0, base + first * page, n * page)
                maps[first] = n
        else:
            if not want <= pages:
                with pytest.raises(ValueError, match="not entirely mapped"):
                    b.vm_unmap(0, base + first * page, n * page)
                continue
            run = sorted(s for s in maps if first <= s < first + n)
            whole = (run and run[0] == first and run[-1] + maps[run[-1]] == first + n)
            if not whole:
                with pytest.raises(ValueError, match="cuts a mapping"):
                    b.vm_unmap(0, base + first * page, n * page)
            else:
                b.vm_unmap(0, base + first * page, n * page)
                for s in run:
                    del maps[s]
        assert b.used == sum(maps.values()) * page
        assert b._devices[0].mappings == {base + s * page: m * page for s, m in maps.items()}
    if maps:
        with pytest.raises(ValueError, match="still has mapped pages"):
            b.vm_release(0, base, 64 * page)
    for s, m in list(maps.items()):
        b.vm_unmap(0, base + s * page, m * page)
    b.vm_release(0, base, 64 * page)
    assert b.used == 0 and b.reservations == {}
