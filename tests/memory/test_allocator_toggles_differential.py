"""Stateful differential test: the fast paths against the general code while the flags they
test change mid-run.

The plain :class:`DeviceCachingAllocator` tests one flag per hot path (``_fast_malloc``,
``_free_slow``), set from the options, the
history, the frees waiting for events and the deferred free. :class:`GeneralPathAllocator`
runs every call through the general code. Hypothesis interleaves allocations and frees with
everything that flips those flags (history on and off and kept on, record_stream with work
pending, event completion, settings changes, the memory fraction, private pools, frees queued
by finalizers, resets, empty_cache, bad and double frees, out of memory on a small device);
both allocators must return the same addresses and errors and agree on the whole state
(every statistic, snapshots, free lists, ``memory_allocated`` read without the lock, the
history's trace) whenever it is read. The full comparison is a rule, not an invariant, so
that a free the fast path deferred is often still pending at the next malloc.
"""

from __future__ import annotations

from typing import Any

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from accelrt import OutOfMemoryError
from accelrt.memory import _allocator, _block
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.testing._allocators import GeneralPathAllocator
from accelrt.memory._config import parse_config
from accelrt.testing._simulated import SimulatedBackend

MiB = 1 << 20

CONFS = ["", "max_split_size_mb:40", "roundup_power2_divisions:4",
         "garbage_collection_threshold:0.5", "expandable_segments:True",
         "expandable_segments:True,page_reuse:True",
         "max_split_size_mb:24,garbage_collection_threshold:0.7"]

sizes = st.one_of(st.integers(1, 4096), st.integers(4097, 1 * MiB),
                  st.integers(1 * MiB + 1, 12 * MiB), st.integers(12 * MiB, 40 * MiB))


def _trace(a: DeviceCachingAllocator) -> list[tuple[Any, ...]]:
    return [(e["action"], e.get("addr"), e.get("size"), e.get("stream"))
            for e in a.trace_entries()]


def state(a: DeviceCachingAllocator) -> tuple[object, ...]:
    """What the public API shows, plus the free lists; ``memory_allocated`` first (it reads
    the counters without the lock, with a free the fast path deferred maybe still pending)."""
    allocated = a.memory_allocated()
    stats = a.stats()
    segments = a.snapshot_segments()
    free = [(id_, s, fl.keys()) for id_, pool in (("small", a._small), ("large", a._large))
            for s, fl in sorted(pool.free.items())]
    return (allocated, stats, a.sorted_stats(), segments, free, len(a._blocks),
            a.memory_reserved(), a.max_memory_reserved(), a.max_memory_allocated(), _trace(a))


class ToggleMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.live: list[tuple[int, int, int]] = []   # (ptr, size, stream)
        self.freed: list[int] = []                   # pointers freed (for double frees)
        self.pool_seq = 0
        self.open_pool: tuple[int, int] | None = None

    @initialize(conf=st.sampled_from(["", "", "expandable_segments:True,page_reuse:True",
                                      *CONFS]), tiny=st.booleans(),
                capacity=st.sampled_from([96 * MiB, 1 << 34]))
    def setup(self, conf: str, tiny: bool, capacity: int) -> None:
        # tiny: every free list has buckets of 2 keys
        self.old_limits = _block.BUCKET_MAX
        if tiny:
            _block.BUCKET_MAX = 2
        self.backends = [SimulatedBackend(capacity=capacity, auto_complete=False)
                         for _ in range(2)]
        self.fast = DeviceCachingAllocator(self.backends[0], 0, parse_config(conf))
        self.general = GeneralPathAllocator(self.backends[1], 0, parse_config(conf))
        self.streams = [0] + [self.on_backends("stream_create", 0, 0) for _ in range(2)]
        # a queued finalizer's free that fails (freed meanwhile) is only logged: record it
        # instead (both allocators must report the same)
        self.finalizer_errors: list[tuple[object, str]] = []
        self.old_report = _allocator.report_finalizer_error
        _allocator.report_finalizer_error = (  # type: ignore[assignment]
            lambda item, e: self.finalizer_errors.append((item, str(e))))

    def on_backends(self, name: str, *args: object) -> Any:
        r = getattr(self.backends[0], name)(*args)
        assert getattr(self.backends[1], name)(*args) == r
        return r

    def both(self, name: str, *args: object) -> Any:
        """Run on both; the results, or the exception types and messages, are equal."""
        results = []
        for a in (self.fast, self.general):
            try:
                results.append(("ok", getattr(a, name)(*args)))
            except (OutOfMemoryError, ValueError, RuntimeError, TypeError) as e:
                results.append((type(e).__name__, str(e)))
        assert results[0] == results[1], (name, args, results)
        return results[0][1] if results[0][0] == "ok" else None

    # ------------------------------------------------------------------ rules
    @rule(batch=st.lists(st.tuples(sizes, st.integers(0, 2)), min_size=1, max_size=4))
    def malloc(self, batch: list[tuple[int, int]]) -> None:
        for size, s in batch:
            stream = self.streams[s]
            p = self.both("malloc", size, stream)
            if p:
                self.live.append((p, size, stream))

    @precondition(lambda self: self.live)
    @rule(picks=st.lists(st.integers(0, 1 << 16), min_size=1, max_size=3))
    def free(self, picks: list[int]) -> None:
        for i in picks:
            if self.live:
                p = self.live.pop(i % len(self.live))[0]
                self.both("free", p)
                self.freed.append(p)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 1 << 16), delta=st.sampled_from([0, 0, -300, 200, 5 * MiB]),
          other=st.booleans())
    def realloc(self, i: int, delta: int, other: bool) -> None:
        """A free and at once a malloc of about its size (the deferred free's reuse)."""
        p, size, stream = self.live.pop(i % len(self.live))
        self.both("free", p)
        self.freed.append(p)
        size = max(1, size + delta)
        stream = self.streams[1] if other else stream
        q = self.both("malloc", size, stream)
        if q:
            self.live.append((q, size, stream))

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 1 << 16), s=st.integers(1, 2), work=st.booleans())
    def record_stream(self, i: int, s: int, work: bool) -> None:
        """Used on another stream (with work queued there, the free waits for events)."""
        stream = self.streams[s]
        if work:
            self.on_backends("launch_work", stream)
        self.both("record_stream", self.live[i % len(self.live)][0], stream)

    @rule(s=st.integers(1, 2))
    def complete(self, s: int) -> None:
        self.on_backends("complete_stream", self.streams[s])

    @rule(enabled=st.sampled_from(["all", "state", None, None, None]),
          context=st.sampled_from(["all", "alloc", "state", None]))
    def history(self, enabled: str | None, context: str | None) -> None:
        """History on (and left on) or off."""
        self.both("record_history", enabled, context, "python")

    @rule(conf=st.sampled_from(["", "", "", "expandable_segments:True,page_reuse:True",
                                 *CONFS]))
    def set_config(self, conf: str) -> None:
        self.both("set_config", parse_config(conf))

    @rule(f=st.sampled_from([0.3, 0.6, 1.0]))
    def set_fraction(self, f: float) -> None:
        self.both("set_memory_fraction", f)

    @rule(what=st.sampled_from(["empty_cache", "reset_peak_stats", "reset_accumulated_stats",
                                "drain_pending", "max_memory_allocated"]))
    def call(self, what: str) -> None:
        self.both(what)

    @precondition(lambda self: self.open_pool is None)
    @rule(filtered=st.booleans())
    def begin_pool(self, filtered: bool) -> None:
        """Allocations (on stream 1 only, when filtered) go to a new private pool."""
        self.pool_seq += 1
        self.open_pool = (1, self.pool_seq)
        s1 = self.streams[1]
        self.both("begin_allocate_to_pool", self.open_pool,
                  (lambda s: s == s1) if filtered else None)

    @precondition(lambda self: self.open_pool is not None)
    @rule()
    def end_pool(self) -> None:
        self.both("end_allocate_to_pool", self.open_pool)
        self.both("release_pool", self.open_pool)
        self.open_pool = None

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 1 << 16))
    def finalizer_free(self, i: int) -> None:
        """A finalizer's free while the lock is held: queued, then completed by
        drain_pending (a malloc served from the cache need not complete it: the general
        code's always does, so the addresses would differ by design)."""
        p = self.live.pop(i % len(self.live))[0]
        for a in (self.fast, self.general):
            with a._lock:
                a.free_from_finalizer(p)
        self.freed.append(p)
        self.both("drain_pending")

    @precondition(lambda self: self.freed or self.live)
    @rule(i=st.integers(0, 1 << 16), offset=st.sampled_from([0, 0, 512, 1]))
    def bad_free(self, i: int, offset: int) -> None:
        """A double free, or an address inside a live block: an error, no change."""
        p = (self.freed[i % len(self.freed)] if self.freed and offset == 0
             else self.live[i % len(self.live)][0] + offset if self.live else 12345)
        if any(q == p for q, _, _ in self.live):
            return
        self.both("free", p)

    @rule()
    def check(self) -> None:
        errors = len(self.finalizer_errors)
        fast = state(self.fast)
        fast_errors = self.finalizer_errors[errors:]
        assert fast == state(self.general)
        assert self.finalizer_errors[errors + len(fast_errors):] == fast_errors

    @invariant()
    def reserved(self) -> None:
        if hasattr(self, "fast"):
            assert self.fast.memory_reserved() == self.general.memory_reserved()

    def teardown(self) -> None:
        if not hasattr(self, "fast"):
            return
        try:
            if self.open_pool is not None:
                self.end_pool()
            self.check()
            self.both("record_history", None)
            for p, _, _ in self.live:
                self.both("free", p)
            self.on_backends("complete_all")
            self.both("empty_cache")
            self.check()
            for b, a in zip(self.backends, (self.fast, self.general)):
                assert a.memory_reserved() == 0 == b.used
        finally:
            _allocator.report_finalizer_error = self.old_report  # type: ignore[assignment]
            _block.BUCKET_MAX = self.old_limits


ToggleMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=60,
                                           deadline=None)
TestToggleMachine = ToggleMachine.TestCase


def test_general_path_allocator_queues_a_finalizers_free_while_the_lock_is_held() -> None:
    """GeneralPathAllocator.free(nonblocking=True) (free_from_finalizer) queues the free
    when the lock is held, as DeviceCachingAllocator's does (it blocked on its own lock)."""
    import subprocess
    import sys

    code = (
        "from accelrt.testing._allocators import GeneralPathAllocator\n"
        "from accelrt.testing._simulated import SimulatedBackend\n"
        "a = GeneralPathAllocator(SimulatedBackend(), 0)\n"
        "p = a.malloc(1000, 0)\n"
        "with a._lock:\n"
        "    a.free_from_finalizer(p)\n"
        "assert a.memory_allocated() == 0\n"
        "assert a.stats()['allocation.all.freed'] == 1\n"
        "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
