"""The low-fragmentation policy (``expandable_segments:True,page_reuse:True``) and the driver
calls a replay reports at the simulated device's boundary."""

from __future__ import annotations

import glob
import math
import os

import pytest

from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.memory._expandable import MAP_FRACTION
from accelrt.memory.tools._replay import driver_cost_us, load_trace, replay_ops, trace_ops
from accelrt.testing._simulated import SimulatedBackend
from accelrt.memory.tools._synthetic import convnet_inference_ops
from tests.helpers.mappings import check_mappings

MiB = 1 << 20
LOW_FRAG = "expandable_segments:True,page_reuse:True"
TRACES = sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "traces",
                                       "trace_*.json.gz")))


def _ops(path: str):
    return trace_ops(load_trace(path), path)


def _mappings_of(a: DeviceCachingAllocator, b: SimulatedBackend, ptr: int) -> list[int]:
    """The sizes of the device's mappings that the block at ``ptr`` touches, by address."""
    end = ptr + a._blocks[ptr].size
    maps = b._devices[0].mappings
    return [maps[m] for m in sorted(maps) if m < end and m + maps[m] > ptr]


def _low_frag_ratios() -> list[float]:
    assert TRACES
    return [replay_ops(_ops(p), parse_config(LOW_FRAG))["reserved_over_live"] for p in TRACES]


def test_low_fragmentation_on_every_trace() -> None:
    """Issue 13's targets: geometric mean of peak reserved / peak live <= 1.01 over every
    trace, and no trace above 1.02."""
    ratios = _low_frag_ratios()
    assert max(ratios) <= 1.02, dict(zip(TRACES, ratios))
    assert math.exp(sum(math.log(r) for r in ratios) / len(ratios)) <= 1.01, ratios


@pytest.mark.parametrize("name", ["dlrm_train", "unet_train", "varlen_encoder"])
def test_repeating_steps_make_no_driver_call_in_the_steady_state(name: str) -> None:
    """Issue 24: in the last third of a training or inference trace whose steps repeat their
    shapes, the policy reuses its mappings whatever shape reuses them (no split: 5 to 24
    driver calls per 1,000 operations before) and stays within 1% of peak live."""
    (path,) = [p for p in TRACES if os.path.basename(p) == f"trace_{name}.json.gz"]
    r = replay_ops(_ops(path), parse_config(LOW_FRAG))
    assert r["steady_driver_calls_per_1k_ops"] <= 2, r
    assert r["reserved_over_live"] <= 1.01, r


def test_small_requests_fill_partial_pages_of_large_blocks() -> None:
    """The policy serves small requests (<= 1 MiB) from the same pool as large ones, so a
    small block fills the free part of a page a large block left, instead of mapping a page
    in a separate small-pool reservation."""
    a = DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(LOW_FRAG))
    x = a.malloc(3 * MiB, 0)               # pages [0, 4) MiB; [3, 4) mapped and free
    assert a.memory_reserved() == 4 * MiB
    y = a.malloc(MiB // 2, 0)              # fills [3, 3.5): no new page
    assert y == x + 3 * MiB
    assert a.memory_reserved() == 4 * MiB
    st = a.stats()
    assert st["allocated_bytes.large_pool.current"] == 3 * MiB + MiB // 2
    assert st["allocated_bytes.small_pool.current"] == 0
    a.free(x)
    a.free(y)
    a.empty_cache()
    assert a.memory_reserved() == 0


def test_plain_expandable_segments_keep_the_small_pool() -> None:
    """Without ``page_reuse``, small requests keep PyTorch's small pool."""
    a = DeviceCachingAllocator(SimulatedBackend(), 0, parse_config("expandable_segments:True"))
    x = a.malloc(3 * MiB, 0)
    y = a.malloc(MiB // 2, 0)
    assert a.stats()["allocated_bytes.small_pool.current"] == MiB // 2
    a.free(x)
    a.free(y)


@pytest.mark.parametrize("seed", [0, 1])
def test_low_fragmentation_on_varying_batch_sizes(seed: int) -> None:
    """A synthetic convnet serving batches of 1..32: the policy stays within a few percent of
    live memory (it reserved 19-25% more before the page-granular mappings)."""
    ops = convnet_inference_ops(batches=40, seed=seed)
    low = replay_ops(ops, parse_config(LOW_FRAG))
    exp = replay_ops(ops, parse_config("expandable_segments:True"))
    assert low["reserved_over_live"] <= 1.04
    assert low["reserved_over_live"] < exp["reserved_over_live"]


def test_replay_reports_driver_calls() -> None:
    ops = [(True, 1, 3 * MiB, 0), (True, 2, 1000, 0), (False, 1, 0, 0), (False, 2, 0, 0)]
    r = replay_ops(ops)
    assert (r["device_mallocs"], r["device_frees"], r["vm_maps"], r["vm_unmaps"]) == (2, 0, 0, 0)
    assert r["driver_us_h100"] == driver_cost_us({"malloc": 2}) == 124.0
    r = replay_ops(ops, parse_config("expandable_segments:True"))
    assert r["device_mallocs"] == 0 and r["vm_maps"] == 2   # a 20 MiB and a 2 MiB page
    assert r["vm_unmaps"] == 0 and r["driver_us_h100"] == 2 * 73.5


def test_replay_counts_unmaps_of_the_low_fragmentation_policy() -> None:
    # a 40 MiB block freed, then a 60 MiB one: the high-water mark would rise, so the free
    # mapping goes back first and its memory is mapped again where the 60 MiB fit
    ops = [(True, 1, 40 * MiB, 0), (True, 2, 512, 0), (False, 1, 0, 0), (True, 3, 60 * MiB, 0)]
    r = replay_ops(ops, parse_config(LOW_FRAG))
    assert r["vm_unmaps"] >= 1
    assert r["peak_reserved_bytes"] == 60 * MiB + 2 * MiB


def test_mappings_are_pieces_of_the_high_water_mark() -> None:
    """Every mapping the policy makes is at most 1/MAP_FRACTION of the memory mapped at the
    high-water mark (a page at least): a 1 GiB request from nothing maps page by page, the
    same request once the mark is 1 GiB maps 128 pieces of 8 MiB; freed, they unmap whole."""
    b = SimulatedBackend()
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    big = MAP_FRACTION * 8 * MiB
    p = a.malloc(big, 0)
    assert b.calls(0)["vm_map"] == big // (2 * MiB)   # the mark was 0: pieces of one page
    a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0
    q = a.malloc(big + MiB, 0)                    # 4-page pieces now, the last one shorter
    assert b.calls(0)["vm_map"] == big // (2 * MiB) + MAP_FRACTION + 1
    assert set(_mappings_of(a, b, q)) == {8 * MiB, 2 * MiB}
    check_mappings(a, b)
    a.free(q)
    a.empty_cache()
    calls = b.calls(0)
    assert a.memory_reserved() == 0
    assert calls["vm_unmapped_mappings"] == calls["vm_map"]
    assert calls["vm_release"] == calls["vm_reserve"]


def test_reusing_freed_memory_makes_no_driver_call() -> None:
    """A loop that frees and allocates the same shapes reuses its mappings, and so does a
    block of another shape placed in part of a free mapping: no mapping is ever split."""
    b = SimulatedBackend()
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    for _ in range(3):
        ps = [a.malloc(s, 0) for s in (300 * MiB, 7 * MiB, 120 * MiB + 5)]
        for p in ps:
            a.free(p)
    calls = dict(b.calls(0))
    assert calls["vm_unmap"] == 0
    for s in (3 * MiB, 250 * MiB + 7, 40 * MiB):   # other shapes, in the same memory
        a.free(a.malloc(s, 0))
    assert b.calls(0)["vm_map"] == calls["vm_map"] and b.calls(0)["vm_unmap"] == 0


def test_a_block_pins_only_the_pieces_it_touches() -> None:
    """A small block placed in a large free range pins only its pieces: after the rest is
    given back, the reservation is those pieces."""
    b = SimulatedBackend()
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    big = MAP_FRACTION * 8 * MiB
    a.free(a.malloc(big, 0))
    a.empty_cache()                               # the mark is now ``big``: 8 MiB pieces
    p = a.malloc(big, 0)
    a.free(p)
    calls = dict(b.calls(0))
    q = a.malloc(3 * MiB, 0)                      # the head of the free range
    r = a.malloc(3 * MiB, 0)                      # beside q, in the same piece
    assert q == p and r == q + 3 * MiB
    assert b.calls(0)["vm_map"] == calls["vm_map"] and b.calls(0)["vm_unmap"] == calls["vm_unmap"]
    assert _mappings_of(a, b, q) == [8 * MiB]
    a.empty_cache()
    assert a.memory_reserved() == 8 * MiB         # q and r pin one 8 MiB piece
    a.free(q)
    a.free(r)
    a.empty_cache()
    assert a.memory_reserved() == 0


def test_reuse_beside_an_unmapped_range() -> None:
    """A block placed in a free mapped range that starts right after an unmapped range, against
    a live block, keeps the blocks, the lists and the device in step."""
    b = SimulatedBackend()
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    x = a.malloc(8 * MiB, 0)
    y = a.malloc(64 * MiB, 0)                     # 32 one-page mappings (a small mark)
    z = a.malloc(2 * MiB, 0)
    a.free(x)
    a.empty_cache()                               # x's pages unmapped, before y's
    a.free(y)
    w = a.malloc(4 * MiB, 0)                      # against live z: the tail of y's range
    assert w == y + 60 * MiB
    check_mappings(a, b)
    assert _mappings_of(a, b, w) == [2 * MiB, 2 * MiB]  # two of y's pages
    a.empty_cache()
    assert a.memory_reserved() == 6 * MiB         # w's two pages and z's
    a.free(w)
    a.free(z)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used


class _FailingMaps(SimulatedBackend):
    """Refuses vm_map after ``allow`` more successful ones (device memory taken elsewhere)."""

    def __init__(self) -> None:
        super().__init__()
        self.allow = -1

    def vm_map(self, index: int, ptr: int, size: int) -> bool:
        if self.allow == 0:
            return False
        self.allow -= 1
        return super().vm_map(index, ptr, size)


def test_out_of_memory_while_mapping_pieces_leaves_a_consistent_state() -> None:
    """If mapping the pieces of a request fails part way (the memory went to another process
    in between), the pieces already mapped are unmapped again and the cache stays usable."""
    b = _FailingMaps()
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    z = a.malloc(2 * MiB, 0)
    b.allow = 3                                   # three of the 32 pieces, then failures
    with pytest.raises(Exception, match="out of memory"):
        a.malloc(64 * MiB, 0)
    check_mappings(a, b)
    assert a.memory_reserved() == b.used == 2 * MiB
    b.allow = -1
    w = a.malloc(64 * MiB, 0)
    check_mappings(a, b)
    for p in (w, z):
        a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used


def test_growth_keeps_the_free_head_of_its_run_mapped() -> None:
    """A request that extends a free mapped block into the unmapped range after it maps only
    the difference; when that would raise the high-water mark, other free mappings are
    unmapped first, never that block (which was unmapped and mapped again before)."""
    b = SimulatedBackend()
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    x = a.malloc(20 * MiB, 0)
    y = a.malloc(40 * MiB, 0)
    z = a.malloc(40 * MiB, 0)
    a.free(x)
    a.free(z)                                     # z's range is the free head of the run
    w = a.malloc(60 * MiB, 0)
    assert w == z                                 # z's 40 MiB and 20 MiB more
    calls = b.calls(0)
    assert calls["vm_unmapped_mappings"] == 10    # x's ten one-page pieces only
    assert a.max_memory_reserved() == 100 * MiB == a.memory_reserved()
    for p in (y, w):
        a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0


def test_low_fragmentation_out_of_memory_leaves_nothing_mapped() -> None:
    b = SimulatedBackend(capacity=100 * MiB)
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    p = a.malloc(60 * MiB, 0)
    with pytest.raises(Exception, match="out of memory"):
        a.malloc(60 * MiB, 0)
    assert a.memory_reserved() == 60 * MiB
    assert b.get_memory_info(0)[0] == 40 * MiB
    a.free(p)
    q = a.malloc(90 * MiB, 0)                    # the freed mapping is reused after an unmap
    a.free(q)
    a.empty_cache()
    assert b.get_memory_info(0)[0] == 100 * MiB


@pytest.mark.parametrize("name, reserved, mallocs", [
    ("resnet50_train", 6_962_544_640, 108),
    ("varlen_encoder", 1_608_515_584, 30),
])
def test_default_policy_matches_pytorch_device_mallocs(name: str, reserved: int,
                                                      mallocs: int) -> None:
    """Conformance, counted at the device: PyTorch's peak reserved bytes and cudaMalloc calls
    (traces/README.md) on the shared traces, and not one free or mapping."""
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "traces", f"trace_{name}.json.gz")
    r = replay_ops(_ops(path))
    assert (r["peak_reserved_bytes"], r["device_mallocs"]) == (reserved, mallocs)
    assert r["device_frees"] == r["vm_maps"] == r["vm_unmaps"] == 0


def test_new_mappings_fill_mapped_partial_pages_first() -> None:
    """A request that needs new pages goes where it reuses the most mapped memory: after a
    free partial page pinned by a live block, not into the first unmapped range by address
    (which would map a page more and leave that partial page stranded)."""
    a = DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(LOW_FRAG))
    x1 = a.malloc(4 * MiB, 0)              # pages [0, 4) MiB
    x2 = a.malloc(8 * MiB, 0)              # [4, 12)
    x3 = a.malloc(3 * MiB, 0)              # [12, 15); [15, 16) stays mapped and free
    a.free(x2)
    a.empty_cache()                        # unmaps [4, 12): an unmapped range between x1, x3
    assert a.memory_reserved() == 8 * MiB
    y = a.malloc(5 * MiB, 0)               # [15, 20): maps [16, 20), not [4, 10)
    assert y == x3 + 3 * MiB
    assert a.memory_reserved() == 12 * MiB
    for p in (x1, x3, y):
        a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0


def test_block_goes_against_its_live_neighbour() -> None:
    """A cached block whose only live neighbour follows it serves a smaller request from its
    end: the new block shares that neighbour's page, and the free pages before it stay
    unmappable, where starting at the front would pin a page of its own."""
    a = DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(LOW_FRAG))
    x = a.malloc(5 * MiB, 0)               # [0, 5) MiB, pages [0, 6)
    z = a.malloc(3 * MiB, 0)               # [5, 8), pages up to 8: nothing free after it
    a.free(x)                              # free [0, 5) before live z
    y = a.malloc(MiB, 0)
    assert y == x + 4 * MiB                # [4, 5): in z's page [4, 6)
    a.empty_cache()                        # unmaps pages [0, 4)
    assert a.memory_reserved() == 4 * MiB
    a.free(y)
    a.free(z)
    a.empty_cache()
    assert a.memory_reserved() == 0


def test_giving_back_unmaps_only_what_the_request_lacks() -> None:
    """Rule 4 unmaps free mappings only until the pages a request lacks are covered: of a
    free block larger than that, the mappings at its end go and the rest stays mapped (and
    cached: a later request that fits it makes no driver call), where unmapping the whole
    block would make the same memory be mapped again soon after."""
    b = SimulatedBackend()
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    x = a.malloc(40 * MiB, 0)              # [0, 40) MiB: 20 one-page mappings (a small mark)
    y = a.malloc(2 * MiB, 0)               # [40, 42), live
    z = a.malloc(30 * MiB, 0)              # [42, 72), before the unmapped rest
    a.free(x)
    a.free(z)
    r = a.malloc(44 * MiB, 0)              # fits no free block: z's 30 MiB and 14 MiB more
    assert r == z
    calls = b.calls(0)
    assert calls["vm_unmapped_mappings"] == 7   # 14 MiB of x's end, not its 20 mappings
    assert a.memory_reserved() == a.max_memory_reserved() == 72 * MiB
    check_mappings(a, b)
    maps = calls["vm_map"]
    s = a.malloc(26 * MiB, 0)              # the part of x still mapped
    assert s == x and b.calls(0)["vm_map"] == maps
    for p in (r, s, y):
        a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used


def test_giving_back_part_of_a_block_widens_the_unmapped_range_beside_it() -> None:
    """The mappings rule 4 takes from a free block lie next to unmapped memory: at its start
    when only the range before it is unmapped, so that the unmapped ranges grow and the
    mapped rest stays in one piece."""
    b = SimulatedBackend()
    a = DeviceCachingAllocator(b, 0, parse_config(LOW_FRAG))
    w = a.malloc(8 * MiB, 0)               # [0, 8) MiB
    x = a.malloc(40 * MiB, 0)              # [8, 48): 20 one-page mappings
    y = a.malloc(2 * MiB, 0)               # [48, 50), live
    z = a.malloc(30 * MiB, 0)              # [50, 80), before the unmapped rest
    a.free(w)
    a.empty_cache()                        # [0, 8) unmapped: the mark stays 80 MiB
    a.free(x)
    a.free(z)
    before = b.calls(0)["vm_unmapped_mappings"]
    r = a.malloc(44 * MiB, 0)              # 14 MiB more than z: 6 MiB over the mark
    assert r == z
    assert b.calls(0)["vm_unmapped_mappings"] - before == 3
    assert a.memory_reserved() == a.max_memory_reserved() == 80 * MiB
    check_mappings(a, b)
    s = a.malloc(34 * MiB, 0)              # x's mapped rest: [14, 48), no mapping made
    assert s == x + 6 * MiB and not a._blocks[w].mapped and a._blocks[w].size == 14 * MiB
    for p in (r, s, y):
        a.free(p)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used
