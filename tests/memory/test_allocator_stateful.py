"""Stateful property test: random alloc/free/record_stream/empty_cache/... sequences keep the
allocator's blocks, statistics and backend usage consistent."""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from accelrt import OutOfMemoryError
from accelrt.memory import _block
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.testing import SimulatedBackend
from tests.helpers.mappings import check_mappings

MiB = 1 << 20
TYPES = ("small", "large")

CONFIGS = ["", "max_split_size_mb:40", "expandable_segments:True",
           "roundup_power2_divisions:[1:2,>:4],max_split_size_mb:24",
           "expandable_segments:True,page_reuse:True"]

sizes = st.one_of(st.integers(1, 4096), st.integers(4097, 1 * MiB),
                  st.integers(1 * MiB + 1, 12 * MiB), st.integers(12 * MiB, 60 * MiB))


class AllocatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[int, int]] = {}   # ptr -> (requested size, stream)
        self.peaks: dict[str, int] = {}
        self.pools: list[tuple[int, int]] = []       # private pools made (released at the end)
        self.acc_base: dict[str, int] = {}           # each current value at the last
                                                     # reset_accumulated_stats

    @initialize(conf=st.sampled_from(CONFIGS), tiny=st.booleans())
    def setup(self, conf: str, tiny: bool) -> None:
        # tiny free lists: buckets of 2 keys, so their splits and removals run on few blocks
        self.old_limits = _block.BUCKET_MAX
        if tiny:
            _block.BUCKET_MAX = 2
        self.b = SimulatedBackend(capacity=256 * MiB, auto_complete=False)
        self.a = DeviceCachingAllocator(self.b, 0, parse_config(conf))

    # ------------------------------------------------------------------ rules
    @rule(size=sizes, stream=st.sampled_from([0, 1]))
    def alloc(self, size: int, stream: int) -> None:
        try:
            p = self.a.malloc(size, stream)
        except OutOfMemoryError as e:
            assert e.size > 0
            return
        for q, (qs, _) in self.live.items():
            assert p + size <= q or q + qs <= p, "overlapping allocations"
        self.live[p] = (size, stream)

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from(sorted(self.live)))
        del self.live[p]
        self.a.free(p)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), delta=st.one_of(st.just(0), st.integers(-600, 600)))
    def realloc(self, data: st.DataObject, delta: int) -> None:
        """Free a block and at once allocate about its size on its stream (the fast path's
        immediate reuse of a deferred free when the rounded size is the same)."""
        p = data.draw(st.sampled_from(sorted(self.live)))
        size, stream = self.live.pop(p)
        self.a.free(p)
        self.alloc(max(1, size + delta), stream)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), stream=st.sampled_from([1, 2, 3]))
    def record_stream(self, data: st.DataObject, stream: int) -> None:
        p = data.draw(st.sampled_from(sorted(self.live)))
        self.b.launch_work(stream)
        self.a.record_stream(p, stream)

    @rule(stream=st.sampled_from([1, 2, 3]))
    def complete(self, stream: int) -> None:
        self.b.complete_stream(stream)

    @rule()
    def empty_cache(self) -> None:
        self.a.empty_cache()
        # every free mapping of the default pools went back (a partly free one cannot)
        for blk in self.a._blocks.values():
            if (not blk.allocated and blk.mapped and blk.exp is not None
                    and not blk.event_count and not blk.stream_uses
                    and blk.pool.owner is None):
                assert not blk.exp.unmappable(blk.addr, blk.size), "a free mapping stayed"

    @rule()
    def reset_peak(self) -> None:
        self.a.reset_peak_stats()
        self.peaks.clear()

    @rule(f=st.sampled_from([0.3, 0.6, 1.0]))
    def set_fraction(self, f: float) -> None:
        self.a.set_memory_fraction(f)

    @rule()
    def reset_accumulated(self) -> None:
        self.a.reset_accumulated_stats()
        # (what allocated - freed means from now on: the current value at the reset; frees
        # that finalizers queued may complete between the reset and this read)
        s = self.a.stats()
        self.acc_base = {k[:-len(".current")]: v - s[k[:-len("current")] + "allocated"]
                         + s[k[:-len("current")] + "freed"]
                         for k, v in s.items() if k.endswith(".current")
                         and k[:-len("current")] + "allocated" in s}

    @rule(conf=st.sampled_from(CONFIGS))
    def set_config(self, conf: str) -> None:
        """Another policy mid-way (a free deferred by the fast path completes under the old
        one; the blocks and segments made under it stay until freed and released)."""
        self.a.set_config(parse_config(conf))

    @rule(enabled=st.sampled_from(["all", "state", None]))
    def history(self, enabled: str | None) -> None:
        self.a.record_history(enabled, "all", "python")

    @rule(size=sizes, stream=st.sampled_from([0, 1]), new=st.booleans())
    def pool_alloc(self, size: int, stream: int, new: bool) -> None:
        """An allocation in a private pool (a MemPool's use_mem_pool on one allocation)."""
        if new or not self.pools:
            self.pools.append((7, len(self.pools) + 1))
            self.a.create_pool(self.pools[-1])
        pid = self.pools[-1]
        self.a.begin_allocate_to_pool(pid)
        try:
            self.alloc(size, stream)
        finally:
            self.a.end_allocate_to_pool(pid)
            self.a.release_pool(pid)   # (the reference begin_allocate_to_pool took)

    @rule()
    def bad_free(self) -> None:
        before = self.a.stats()
        try:
            self.a.free(12345)
        except ValueError:
            pass
        else:
            raise AssertionError("foreign pointer accepted")
        assert self.a.stats() == before

    # ------------------------------------------------------------------ invariants
    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "a"):
            return
        a, b = self.a, self.b
        segs = a.snapshot_segments()
        s = a.stats()
        exp = {t: {"allocation": 0, "allocated_bytes": 0, "active": 0, "active_bytes": 0,
                   "requested_bytes": 0, "reserved_bytes": 0, "segment": 0,
                   "inactive_split": 0, "inactive_split_bytes": 0} for t in TYPES}
        allocated_ptrs = {}
        for seg in segs:
            e = exp[seg["segment_type"]]
            e["reserved_bytes"] += seg["total_size"]
            if not seg["is_expandable"]:
                e["segment"] += 1
            split = len(seg["blocks"]) > 1
            addr = seg["address"]
            for blk in seg["blocks"]:
                assert blk["address"] == addr
                addr += blk["size"]
                if blk["state"] == "active_allocated":
                    e["allocation"] += 1
                    e["allocated_bytes"] += blk["size"]
                    allocated_ptrs[blk["address"]] = blk["requested_size"]
                if blk["state"] != "inactive":
                    e["active"] += 1
                    e["active_bytes"] += blk["size"]
                    e["requested_bytes"] += blk["requested_size"]
                elif split and not seg["is_expandable"]:
                    e["inactive_split"] += 1
                    e["inactive_split_bytes"] += blk["size"]
        assert allocated_ptrs == {p: v[0] for p, v in self.live.items()}
        for name in exp["small"]:
            small, large = exp["small"][name], exp["large"][name]
            assert s[f"{name}.small_pool.current"] == small, name
            assert s[f"{name}.large_pool.current"] == large, name
            assert s[f"{name}.all.current"] == small + large, name
            for t in ("all", "small_pool", "large_pool"):
                cur = s[f"{name}.{t}.current"]
                key = f"{name}.{t}"
                assert (s[f"{key}.allocated"] - s[f"{key}.freed"]
                        == cur - self.acc_base.get(key, 0))
                assert s[f"{key}.peak"] >= cur
                self.peaks[key] = max(self.peaks.get(key, 0), cur)
                if name in ("allocation", "allocated_bytes", "active", "active_bytes",
                            "requested_bytes", "inactive_split", "inactive_split_bytes",
                            "segment"):
                    assert s[f"{key}.peak"] >= self.peaks[key], key
                if name in ("allocation", "allocated_bytes", "active", "active_bytes",
                            "requested_bytes"):
                    # each step only lowers these before raising them: the true peak is
                    # the largest value seen between steps
                    assert s[f"{key}.peak"] == self.peaks[key], key
        assert s["reserved_bytes.all.current"] == b.used == a.memory_reserved()
        assert s["allocated_bytes.all.current"] == a.memory_allocated()
        assert sorted(x["address"] for x in segs) == [x["address"] for x in segs]
        # free lists: buckets none empty nor past their limit, sorted keys that are their
        # blocks' sizes and addresses, and exactly the free mapped blocks
        keys = []
        for pool in (a._small, a._large):
            for stream, fl in pool.free.items():
                buckets = fl.bucket_sizes()
                assert all(0 < n <= fl.bucket_max for n in buckets)
                flat = fl.keys()
                assert flat == sorted(set(flat)) and len(fl) == len(flat) == sum(buckets)
                assert [(b_.size, b_.addr) for b_ in fl] == flat
                assert all(b_.pool is pool and b_.stream == stream for b_ in fl)
                keys += [(addr, size, stream) for size, addr in flat]
        free_blocks = [(b_.addr, b_.size, b_.stream) for b_ in a._blocks.values()
                       if not b_.allocated and b_.mapped and not b_.event_count
                       and not b_.stream_uses and b_.pool.owner is None]
        assert sorted(keys) == sorted(free_blocks)
        # expandable segments: the mappings (made whole, split by the low-fragmentation
        # policy) are exactly the simulated device's
        check_mappings(a, b)

    def teardown(self) -> None:
        if not hasattr(self, "a"):
            return
        if hasattr(self, "old_limits"):
            _block.BUCKET_MAX = self.old_limits
        self.a.record_history(None)
        for p in list(self.live):
            self.a.free(p)
        self.live.clear()
        self.b.complete_all()
        for pid in self.pools:
            self.a.release_pool(pid)
        self.a.empty_cache()
        assert self.a.memory_reserved() == 0 == self.b.used
        assert self.b.reservations == {}
        s = self.a.stats()
        assert s["active_bytes.all.current"] == 0 and s["requested_bytes.all.current"] == 0


AllocatorMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=40,
                                              deadline=None)
TestAllocatorMachine = AllocatorMachine.TestCase
