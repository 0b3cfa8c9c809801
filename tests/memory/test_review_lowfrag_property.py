"""Property test of the low-fragmentation policy (``expandable_segments:True,page_reuse:True``)
after this round's change of its rule 4 (give back only the mappings a request lacks, at the
end of a free block next to unmapped memory): random malloc/free/empty_cache sequences on two
streams, of sizes from a few bytes to many pages, checked after every step against a model of
the live blocks:

- live blocks never overlap, each holds its request, and lies on mapped pages;
- the statistics are the model's (allocated, requested, active, allocation counts and peaks),
  and reserved >= allocated, reserved == the device's mapped bytes;
- the mappings are exactly the device's (``check_mappings``);
- requests larger than every free mapped block (rule 4 unmaps some of them first);
- a freed block's bytes serve the same request again at once, with no driver call;
- an out-of-memory error (a 96 MiB device) changes nothing;
- with everything freed, one request as large as the high-water mark does not raise it, and
  ``empty_cache`` gives every byte back.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from accelrt import OutOfMemoryError
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.testing._simulated import SimulatedBackend
from tests.helpers.mappings import check_mappings

MiB = 1 << 20
LOW_FRAG = "expandable_segments:True,page_reuse:True"

PAGES = st.integers(1, 24).map(lambda n: n * 2 * MiB)   # whole pages: blocks of many mappings
SIZES = st.one_of(st.integers(1, 4096), st.integers(4096, 2 * MiB),
                  st.integers(2 * MiB, 24 * MiB), PAGES, PAGES)
STEPS = st.lists(st.one_of(
    st.tuples(st.just("malloc"), SIZES, st.integers(0, 1)),
    st.tuples(st.just("free"), st.integers(0, 1 << 16), st.just(0)),
    st.tuples(st.just("free"), st.integers(0, 1 << 16), st.just(0)),
    st.tuples(st.just("free_malloc"), st.integers(0, 1 << 16), st.just(0)),
    st.tuples(st.just("beyond"), st.integers(1, 3 * MiB), st.integers(0, 1)),
    st.tuples(st.just("empty_cache"), st.just(0), st.just(0))), max_size=40)


class Model:
    """The live blocks and the counters PyTorch's statistics keep."""

    def __init__(self) -> None:
        self.live: dict[int, tuple[int, int, int]] = {}   # ptr -> (requested, size, stream)
        self.allocations = 0
        self.frees = 0
        self.peak_allocated = 0
        self.peak_reserved = 0

    def allocated(self) -> int:
        return sum(size for _, size, _ in self.live.values())


def _check(a: DeviceCachingAllocator, b: SimulatedBackend, m: Model) -> None:
    check_mappings(a, b)
    spans = sorted((ptr, ptr + size) for ptr, (_, size, _) in m.live.items())
    for (_, end), (start, _) in zip(spans, spans[1:]):
        assert end <= start, "live blocks overlap"
    for ptr, (requested, size, stream) in m.live.items():
        blk = a._blocks[ptr]
        assert blk.allocated and blk.mapped and blk.size == size >= requested
        assert blk.stream == stream
    s = a.stats()
    allocated = m.allocated()
    m.peak_allocated = max(m.peak_allocated, allocated)
    m.peak_reserved = max(m.peak_reserved, a.memory_reserved())
    assert s["allocated_bytes.all.current"] == allocated == a.memory_allocated()
    assert s["requested_bytes.all.current"] == sum(r for r, _, _ in m.live.values())
    assert s["active_bytes.all.current"] == allocated   # nothing pending on a stream
    assert s["allocation.all.current"] == len(m.live)
    assert s["allocation.all.allocated"] == m.allocations
    assert s["allocation.all.freed"] == m.frees
    assert s["allocated_bytes.all.peak"] == m.peak_allocated
    assert s["reserved_bytes.all.current"] == a.memory_reserved() == b.used
    assert a.memory_reserved() >= allocated
    assert a.max_memory_reserved() >= m.peak_reserved


@settings(max_examples=150)
@given(STEPS, st.sampled_from([1 << 34, 96 * MiB]))
def test_random_sequences_keep_the_allocator_invariants(
        steps: list[tuple[str, int, int]], capacity: int) -> None:
    b = SimulatedBackend(device_count=1, capacity=capacity)
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    m = Model()

    def malloc(size: int, stream: int) -> int:
        ptr = a.malloc(size, stream)
        m.live[ptr] = (size, a._blocks[ptr].size, stream)
        m.allocations += 1
        return ptr

    def free(ptr: int) -> tuple[int, int, int]:
        a.free(ptr)
        m.frees += 1
        return m.live.pop(ptr)

    for op, n, stream in steps:
        if op == "malloc":
            try:
                malloc(n, stream)
            except OutOfMemoryError:   # a small device: nothing changed, nothing leaked
                pass
        elif op == "beyond":   # larger than any free mapped block: rule 4 gives pages back
            free_mapped = [blk.size for blk in a._blocks.values()
                           if not blk.allocated and blk.mapped]
            try:
                malloc(max(free_mapped, default=0) + n, stream)
            except OutOfMemoryError:
                pass
        elif op in ("free", "free_malloc") and m.live:
            ptr = sorted(m.live)[n % len(m.live)]
            requested, _, stream = free(ptr)
            if op == "free_malloc":   # the freed bytes serve the same request, unmapped never
                _check(a, b, m)
                reserved, maps = a.memory_reserved(), b.calls(0)["vm_map"]
                malloc(requested, stream)
                assert a.memory_reserved() == reserved and b.calls(0)["vm_map"] == maps
        elif op == "empty_cache":
            a.empty_cache()
        _check(a, b, m)
    for ptr in list(m.live):
        free(ptr)
    _check(a, b, m)
    mark = a.max_memory_reserved()
    if mark:   # every freed byte is reusable: a request of the whole mark does not raise it
        ptr = malloc(mark, 0)
        _check(a, b, m)
        assert a.memory_reserved() <= mark and a.max_memory_reserved() == mark
        free(ptr)
    a.empty_cache()
    _check(a, b, m)
    assert a.memory_reserved() == 0 == b.used
    assert not b._devices[0].mappings


PAGE = 2 * MiB   # the simulated device's granularity


@settings(max_examples=150)
@given(st.lists(st.integers(1, 20), min_size=2, max_size=8), st.data())
def test_a_request_over_the_free_blocks_raises_the_mark_only_by_what_is_live(
        pages: list[int], data: st.DataObject) -> None:
    """Whole-page blocks (one-page mappings while the mark is under 256 pages), some freed,
    some of those given back by ``empty_cache`` first (unmapped ranges before and between the
    free blocks); then a request larger than every free block. Rule 4 unmaps free mappings
    (all or part of a block) for it, so the high-water mark grows only when the live bytes
    exceed it, and the mappings stay exactly the device's."""
    b = SimulatedBackend(device_count=1)
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    ptrs = [a.malloc(n * PAGE, 0) for n in pages]
    freed = data.draw(st.lists(st.sampled_from(range(len(ptrs))), unique=True), "freed")
    early = data.draw(st.integers(0, len(freed)), "freed before empty_cache")
    for i in freed[:early]:
        a.free(ptrs[i])
    a.empty_cache()
    for i in freed[early:]:
        a.free(ptrs[i])
    check_mappings(a, b)
    live = {ptrs[i]: pages[i] * PAGE for i in range(len(ptrs)) if i not in freed}
    biggest = max((blk.size for blk in a._blocks.values() if not blk.allocated and blk.mapped),
                  default=0)
    size = biggest + data.draw(st.integers(1, 4), "pages more") * PAGE
    mark = a.max_memory_reserved()
    r = a.malloc(size, 0)
    live[r] = size
    check_mappings(a, b)
    assert a.memory_allocated() == sum(live.values())
    assert a.max_memory_reserved() == max(mark, a.memory_allocated())
    assert a.memory_reserved() == b.used >= a.memory_allocated()
    for p in live:
        a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used
