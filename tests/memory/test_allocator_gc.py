"""Finalizers run by the garbage collector inside the allocator's critical section.

The allocator's lock is not reentrant and Python's cyclic GC may run at any object allocation,
so an ``Array`` (or ``Graph``) collected while its own thread holds the lock must free its
memory without blocking: ``free_from_finalizer`` / ``release_pool_from_finalizer`` queue the
work and the allocator drains the queue at its next drain point.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import initialize, invariant, rule
from test_allocator_stateful import CONFIGS, AllocatorMachine, sizes

from accelrt import OutOfMemoryError
from accelrt.backends import get_backend
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.memory._lock import FastLock
from accelrt.testing import SimulatedBackend

MiB = 1 << 20


# ---------------------------------------------------------------------- the review's repro

REPRO = """
    import gc, subprocess, sys
    import accelrt as acc
    from accelrt.memory._allocator import peek_allocator

    class C:
        pass

    c = C(); c.me = c; c.arr = acc.empty(10, device="cpu:0"); del c
    alloc = peek_allocator("cpu", 0)
    before = alloc.memory_allocated()
    with alloc._lock:
        n = gc.collect()
    print(before, n, alloc.memory_allocated(), alloc.stats()["allocation.all.current"])
"""


def test_gc_collecting_an_array_inside_the_critical_section_does_not_hang() -> None:
    proc = subprocess.run(["timeout", "10", sys.executable, "-c", textwrap.dedent(REPRO)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    before, collected, after, count = map(int, proc.stdout.split())
    assert before == 512 and collected > 0
    assert after == 0 and count == 0          # the queued free completed after the lock


def test_gc_collecting_a_graph_inside_the_critical_section_does_not_hang() -> None:
    code = """
        import gc
        import accelrt as acc
        from accelrt.memory._allocator import peek_allocator
        acc.set_current_accelerator("cpu")
        a = acc.zeros(4, dtype="int32", device="cpu:0")
        g = acc.Graph()
        with acc.graph(g):
            a.fill_(1)
        pid = g.pool()
        alloc = peek_allocator("cpu", 0)
        assert alloc.pool_use_count(pid) == 1
        class C:
            pass
        c = C(); c.me = c; c.g = g; del g, c
        with alloc._lock:
            gc.collect()
            queued = len(alloc._gc_pending)
        print(queued, alloc.pool_use_count(pid))
    """
    proc = subprocess.run(["timeout", "10", sys.executable, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert proc.stdout.split() == ["1", "0"]


# ---------------------------------------------------------------------- the entry points

@pytest.fixture()
def alloc() -> DeviceCachingAllocator:
    return DeviceCachingAllocator(get_backend("cpu"), 0, parse_config(""))


def test_try_acquire_never_blocks() -> None:
    lock = FastLock()
    assert lock.try_acquire()
    assert lock.locked() and not lock.try_acquire()
    lock.release()
    assert not lock.locked()


def test_free_from_finalizer_with_the_lock_free_frees_at_once(alloc: Any) -> None:
    p = alloc.malloc(1000, 0)
    alloc.free_from_finalizer(p)
    assert not alloc._gc_pending
    assert alloc.memory_allocated() == 0
    assert alloc.stats()["allocation.all.freed"] == 1


def test_free_from_finalizer_under_the_lock_is_queued_then_drained(alloc: Any) -> None:
    p = alloc.malloc(1000, 0)
    q = alloc.malloc(3 * MiB, 0)
    with alloc._lock:
        alloc.free_from_finalizer(p)
        alloc.free_from_finalizer(q)
        assert list(alloc._gc_pending) == [p, q]
        assert not alloc.drain_pending()          # held: nothing drained, nothing blocks
    assert alloc.drain_pending()
    s = alloc.stats()
    assert s["allocation.all.current"] == 0 and s["requested_bytes.all.current"] == 0
    assert s["allocated_bytes.all.freed"] == s["allocated_bytes.all.allocated"]


@pytest.mark.parametrize("point", ["memory_allocated", "stats", "sorted_stats", "empty_cache",
                                   "max_memory_allocated", "reset_peak_stats",
                                   "snapshot_segments", "malloc_slow"])
def test_every_drain_point_completes_queued_frees(alloc: Any, point: str) -> None:
    p = alloc.malloc(2 * MiB, 0)
    with alloc._lock:
        alloc.free_from_finalizer(p)
    assert alloc._gc_pending
    if point == "malloc_slow":
        q = alloc.malloc(30 * MiB, 0)     # misses the cache: drains before the lookup
        alloc.free(q)
    else:
        getattr(alloc, point)()
    assert not alloc._gc_pending
    # (memory_allocated also completes a free the fast path deferred, as free(q) may be)
    assert alloc.memory_allocated() == 0


def test_queued_free_is_reused_by_the_next_cache_miss(alloc: Any) -> None:
    p = alloc.malloc(20 * MiB, 0)                 # a whole segment
    with alloc._lock:
        alloc.free_from_finalizer(p)
    # no cached block, so the fast path misses and the slow path drains before the lookup
    assert alloc.malloc(20 * MiB, 0) == p
    assert alloc.memory_reserved() == 20 * MiB
    alloc.free(p)


def test_a_bad_queued_free_is_reported_not_raised(alloc: Any,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    p = alloc.malloc(100, 0)
    alloc.free(p)
    with caplog.at_level("ERROR", logger="accelrt.memory"):
        with alloc._lock:
            alloc.free_from_finalizer(p)              # double free, found when drained
            alloc.free_from_finalizer(12345)          # foreign pointer
        assert alloc.memory_allocated() == 0
    err = caplog.text     # logged (logger accelrt.memory; stderr when logging is unconfigured)
    assert "Exception ignored in a queued finalizer" in err
    assert "double free" in err and "was not allocated by" in err
    assert alloc.stats()["allocation.all.freed"] == 1


def test_release_pool_from_finalizer(alloc: Any) -> None:
    alloc.create_pool((7, 7))
    alloc.create_pool((7, 7))
    with alloc._lock:
        alloc.release_pool_from_finalizer((7, 7))
        assert len(alloc._gc_pending) == 1
    assert alloc.pool_use_count((7, 7)) == 1
    alloc.release_pool_from_finalizer((7, 7))
    assert alloc.pool_use_count((7, 7)) == 0
    with pytest.raises(TypeError):
        alloc.release_pool_from_finalizer("pool")


def test_queued_release_happens_before_a_later_create(alloc: Any) -> None:
    alloc.create_pool((5, 5))
    with alloc._lock:
        alloc.release_pool_from_finalizer((5, 5))
    alloc.create_pool((5, 5))                     # drains the release first: count 0 -> 1
    assert alloc.pool_use_count((5, 5)) == 1


# ---------------------------------------------------------------------- stress

class GCBackend(SimulatedBackend):
    """A fake device whose memory calls (made under the allocator's lock) collect garbage."""

    def malloc(self, index: int, size: int) -> int:
        gc.collect(1)
        return super().malloc(index, size)

    def vm_map(self, index: int, ptr: int, size: int) -> bool:
        gc.collect(0)
        return super().vm_map(index, ptr, size)

    def free(self, index: int, ptr: int) -> None:
        gc.collect(0)
        super().free(index, ptr)

    def vm_unmap(self, index: int, ptr: int, size: int) -> None:
        gc.collect(0)
        super().vm_unmap(index, ptr, size)

    def event_record(self, index: int, event: int, stream: int) -> None:
        gc.collect(0)
        super().event_record(index, event, stream)

    def event_query(self, index: int, event: int) -> bool:
        gc.collect(0)
        return super().event_query(index, event)


class Owner:
    """An allocation kept alive only by a reference cycle: freed by the GC's finalizer."""

    def __init__(self, machine: Any, alloc: DeviceCachingAllocator, ptr: int) -> None:
        self.machine = machine
        self.alloc = alloc
        self.ptr = ptr
        self.me = self

    def __del__(self) -> None:
        m = self.machine
        if self.alloc._lock.locked():
            m.inside += 1
        del m.cyc[self.ptr]
        self.alloc.free_from_finalizer(self.ptr)


class GCLock:
    """Wraps an allocator's lock: while ``active``, the GC is enabled only while the lock is
    held, so the cyclic garbage made between calls is collected inside the critical section
    (at its first object allocation)."""

    def __init__(self, lock: FastLock) -> None:
        self._lock = lock
        self.active = True

    @classmethod
    def install(cls, alloc: DeviceCachingAllocator) -> GCLock:
        w = cls(alloc._lock)
        alloc._lock = w                           # type: ignore[assignment]
        alloc._acquire = w.acquire                # type: ignore[method-assign]
        alloc._release = w.put                    # type: ignore[method-assign]
        alloc._try_acquire = w.try_acquire        # type: ignore[method-assign]
        alloc._acquire_nowait = w.acquire_nowait  # type: ignore[method-assign]
        return w

    def acquire(self) -> None:
        self._lock.acquire()
        if self.active:
            gc.enable()

    def acquire_nowait(self) -> None:
        self._lock.acquire_nowait()
        if self.active:
            gc.enable()

    def try_acquire(self) -> bool:
        if not self._lock.try_acquire():
            return False
        if self.active:
            gc.enable()
        return True

    def release(self) -> None:
        gc.disable()
        self._lock.release()

    def put(self, _: None) -> None:
        self.release()

    def locked(self) -> bool:
        return self._lock.locked()

    @property
    def stream_waits(self) -> int:     # (the wrapped lock's: its contention hook reads it)
        return int(self._lock.stream_waits)

    @stream_waits.setter
    def stream_waits(self, n: int) -> None:
        self._lock.stream_waits = n

    def __enter__(self) -> None:
        self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.fixture()
def gc_often() -> Iterator[None]:
    old = gc.get_threshold()
    gc.set_threshold(1, 5, 1000)                  # a young collection at every allocation
    try:
        yield
    finally:
        gc.set_threshold(*old)


@pytest.mark.parametrize("conf", ["", "expandable_segments:True",
                                  "expandable_segments:True,page_reuse:True"])
def test_finalizers_fire_inside_malloc_and_free(gc_often: None, conf: str) -> None:
    class M:
        pass

    m: Any = M()
    m.b = GCBackend(capacity=512 * MiB)
    m.a = DeviceCachingAllocator(m.b, 0, parse_config(conf))
    m.cyc = {}
    m.inside = 0
    live = []
    for i in range(300):
        size = (i * 7919) % (24 * MiB) + 1
        p = m.a.malloc(size, i % 2)
        if i % 3:
            m.cyc[p] = size
            Owner(m, m.a, p)                           # garbage at once: only the GC frees it
        else:
            live.append(p)
        if i % 5 == 0 and live:
            m.a.free(live.pop(0))
        if i % 50 == 49:
            m.a.empty_cache()
    gc.collect()
    assert m.inside > 0                           # finalizers did run inside the lock
    assert not m.cyc
    for p in live:
        m.a.free(p)
    m.a.empty_cache()
    assert m.a.memory_allocated() == 0 and not m.a._gc_pending
    s = m.a.stats()
    assert s["allocation.all.current"] == 0 and s["active_bytes.all.current"] == 0
    assert m.a.memory_reserved() == 0 == m.b.used


class GCAllocatorMachine(AllocatorMachine):
    """The stateful machine, with cyclic garbage freed by finalizers during its operations."""

    def __init__(self) -> None:
        super().__init__()
        self.cyc: dict[int, tuple[int, int]] = {}  # ptr -> (size, stream) of garbage cycles
        self.inside = 0
        self._old_threshold = gc.get_threshold()
        self._was_enabled = gc.isenabled()
        gc.set_threshold(1, 5, 1000)
        gc.disable()                              # garbage piles up until an allocator call

    @initialize(conf=st.sampled_from(CONFIGS))
    def setup(self, conf: str) -> None:
        self.b = GCBackend(capacity=256 * MiB, auto_complete=False)
        self.a = DeviceCachingAllocator(self.b, 0, parse_config(conf))
        self.gclock = GCLock.install(self.a)

    @rule(reqs=st.lists(st.tuples(sizes, st.sampled_from([0, 1])), min_size=1, max_size=3))
    def alloc_in_cycle(self, reqs: list[tuple[int, int]]) -> None:
        for size, stream in reqs:
            try:
                p = self.a.malloc(size, stream)
            except OutOfMemoryError:
                return
            for q, (qs, _) in (self.live | self.cyc).items():
                assert p + size <= q or q + qs <= p, "overlapping allocations"
            self.cyc[p] = (size, stream)
            Owner(self, self.a, p)                # garbage at once: only the GC frees it

    def bad_free(self) -> None:                   # overrides: no collection between stats
        self.gclock.active = False
        try:
            super().bad_free()
        finally:
            self.gclock.active = True

    @invariant()
    def consistent(self) -> None:
        if not hasattr(self, "a"):
            return
        # Garbage not yet collected still holds its memory: the next allocator call collects
        # it inside the lock. Frees already queued by finalizers are completed here.
        assert self.a.drain_pending()
        self.gclock.active = False                # no collection during the checks
        saved = self.live
        self.live = {**saved, **self.cyc}
        try:
            # finalizers queued during an operation free later than the operation: the peaks
            # may exceed the values seen between steps, never fall below them
            s = self.a.stats()
            for name, value in s.items():
                if name.endswith(".peak"):
                    key = name[:-5]
                    assert value >= self.peaks.get(key, 0), key
                    assert value >= s[f"{key}.current"], key
                    self.peaks[key] = value
            super().consistent()
        finally:
            self.live = saved
            self.gclock.active = True

    def teardown(self) -> None:
        try:
            gc.collect()
            if hasattr(self, "a"):
                self.gclock.active = False
                assert self.a.drain_pending() and not self.cyc
            super().teardown()
        finally:
            gc.set_threshold(*self._old_threshold)
            if self._was_enabled:
                gc.enable()


GCAllocatorMachine.TestCase.settings = settings(max_examples=30, stateful_step_count=40,
                                                deadline=None)
TestGCAllocatorMachine = GCAllocatorMachine.TestCase
