"""Hostile sequences against the deferred free of the default policy's fast path.

The plain :class:`DeviceCachingAllocator` defers a free that leaves its whole segment free
(see ``DeviceCachingAllocator.free``); :class:`GeneralPathAllocator` never does. Both run the
same random sequences of every public operation (statistics and snapshot readers, resets,
record_stream with pending work, private pools, history on and off, settings and fraction
changes, out-of-memory on a small device, empty_cache) and must agree on every result and on
the whole state whenever it is read, and leave nothing mapped at the end.
"""

from __future__ import annotations

import os
import random
import signal
import time
import threading

import pytest

from accelrt import OutOfMemoryError
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.testing._allocators import GeneralPathAllocator
from accelrt.memory._config import parse_config
from accelrt.testing._simulated import SimulatedBackend
from helpers.gates import Gate, open_when_blocked

MiB = 1 << 20

CONFS = ["", "max_split_size_mb:40", "roundup_power2_divisions:4",
         "garbage_collection_threshold:0.5", "expandable_segments:True",
         "expandable_segments:True,page_reuse:True"]


def state(a: DeviceCachingAllocator) -> tuple[object, ...]:
    stats = a.stats()
    segments = a.snapshot_segments()
    free = [(id_, s, fl.keys()) for id_, pool in (("small", a._small), ("large", a._large))
            for s, fl in sorted(pool.free.items())]
    return (segments, stats, free, len(a._blocks), a.memory_reserved(),
            a.max_memory_reserved())


class Pair:
    """The same operation on a fast and a general allocator, each on its own backend."""

    def __init__(self, capacity: int, conf: str = "", auto_complete: bool = False) -> None:
        self.backends = [SimulatedBackend(capacity=capacity, auto_complete=auto_complete)
                         for _ in range(2)]
        self.fast = DeviceCachingAllocator(self.backends[0], 0, parse_config(conf))
        self.general = GeneralPathAllocator(self.backends[1], 0, parse_config(conf))
        self.streams = [0] + [self.both_backends("stream_create", 0, 0) for _ in range(2)]

    def both_backends(self, name: str, *args: object) -> object:
        r = getattr(self.backends[0], name)(*args)
        assert getattr(self.backends[1], name)(*args) == r
        return r

    def both(self, name: str, *args: object) -> object:
        """Run on both; the results, or the exception types and messages, are equal."""
        results = []
        for a in (self.fast, self.general):
            try:
                results.append(("ok", getattr(a, name)(*args)))
            except (OutOfMemoryError, ValueError, RuntimeError) as e:
                results.append((type(e).__name__, str(e)))
        assert results[0] == results[1], (name, args)
        return results[0][1] if results[0][0] == "ok" else None

    def check(self) -> None:
        assert state(self.fast) == state(self.general)


#: The operations without arguments the random sequences interleave with deferred frees.
_READS_AND_RESETS = ("stats", "sorted_stats", "memory_allocated", "max_memory_allocated",
                     "reset_peak_stats", "reset_accumulated_stats", "snapshot_segments",
                     "empty_cache")


def run_sequence(seed: int, steps: int, conf: str = "") -> Pair:
    rng = random.Random(seed)
    pair = Pair(capacity=rng.choice([64 * MiB, 200 * MiB, 1 << 34]), conf=conf)
    sizes = [512, 3000, MiB, 3 * MiB, 12 * MiB, 20 * MiB, 50 * MiB]
    live: list[tuple[int, int, int]] = []
    pool_open = False
    pools_made = 0
    for _ in range(steps):
        r = rng.random()
        if r < 0.25 or not live:
            size = rng.choice(sizes) - rng.randrange(0, 400)
            s = rng.choice(pair.streams[:2] + [0, 0])
            p = pair.both("malloc", size, s)
            if p:
                live.append((p, size, s))   # type: ignore[arg-type]
        elif r < 0.55:
            # free + malloc of about the same size (the deferred free's reuse), or of another
            p, size, s = live.pop(rng.randrange(len(live)))
            pair.both("free", p)
            size = max(1, size + rng.choice((0, 0, -300, 200, 5 * MiB)))
            s = rng.choice((s, s, s, pair.streams[1]))
            q = pair.both("malloc", size, s)
            if q:
                live.append((q, size, s))   # type: ignore[arg-type]
        elif r < 0.65:
            pair.both("free", live.pop(rng.randrange(len(live)))[0])
        else:
            # a free, then one other operation while it may still be deferred
            if live and rng.random() < 0.7:
                pair.both("free", live.pop(rng.randrange(len(live)))[0])
            what = rng.randrange(19)
            if what < len(_READS_AND_RESETS):
                pair.both(_READS_AND_RESETS[what])
            elif what == 8 and live:
                # used on another stream with work queued there: the free waits for it
                p = rng.choice(live)[0]
                s = pair.streams[2]
                pair.both("record_stream", p, s)
                pair.both_backends("launch_work", s)
            elif what == 9:
                pair.both_backends("complete_all")
            elif what == 10:
                pair.both("set_memory_fraction", rng.choice((0.3, 0.9, 1.0)))
            elif what == 11:
                pair.both("record_history", rng.choice(("all", "state", None)), "all", "python")
                pair.both("record_history", None)
            elif what == 12 and not pool_open:
                pools_made += 1
                pair.both("begin_allocate_to_pool", (1, pools_made))
                pool_open = True
            elif what == 13 and pool_open:
                pair.both("end_allocate_to_pool", (1, pools_made))
                pair.both("release_pool", (1, pools_made))
                pool_open = False
            elif what == 14:
                pair.both("set_config", parse_config(rng.choice(CONFS)))
            elif what == 15 and live:
                pair.both("segment_of", rng.choice(live)[0])
            elif what == 16 and live:
                # a double free of a freed block (or of a live one's neighbour address)
                p = rng.choice(live)[0]
                pair.both("free", p)
                pair.both("free", p)
                live = [x for x in live if x[0] != p]
            elif what == 17:
                pair.check()
            elif what == 18:
                pair.both("drain_pending")
    if pool_open:
        pair.both("end_allocate_to_pool", (1, pools_made))
        pair.both("release_pool", (1, pools_made))
    pair.check()
    for p, _, _ in live:
        pair.both("free", p)
    pair.both_backends("complete_all")
    pair.both("empty_cache")
    pair.check()
    for b, a in zip(pair.backends, (pair.fast, pair.general)):
        assert a.memory_reserved() == 0
        assert b.used == 0 and not b.reservations, a.snapshot_segments()
    return pair


@pytest.mark.parametrize("seed", range(6))
def test_every_public_operation_after_a_deferred_free_matches_the_general_code(
        seed: int) -> None:
    run_sequence(seed, 400)


@pytest.mark.parametrize("conf", CONFS[1:])
def test_other_settings_match_the_general_code(conf: str) -> None:
    run_sequence(100 + CONFS.index(conf), 300, conf)


@pytest.mark.parametrize("conf", ["", "expandable_segments:True,page_reuse:True"],
                         ids=["default", "low-frag"])
def test_a_free_waiting_for_events_turns_every_fast_malloc_path_off(conf: str) -> None:
    """A free recorded on another stream waits for an event; every malloc then completes the
    frees whose events have completed first (PyTorch's process_events), so the fast malloc
    paths (the default policy's and the low-fragmentation policy's malloc_cached) are off
    until no free waits. (The low-frag fast path kept serving cached blocks, leaving the
    completed free pending and its memory active.)"""
    pair = Pair(capacity=1 << 34, conf=conf)
    s = pair.streams[2]
    keep = pair.both("malloc", 4096, 0)
    small = pair.both("malloc", 4096, 0)
    pair.both("free", small)                       # cached: the next malloc's fast path fits
    big = pair.both("malloc", 50 * MiB, 0)
    pair.both("record_stream", big, s)
    pair.both_backends("launch_work", s)
    pair.both("free", big)                         # waits for the work queued on s
    assert not pair.fast._fast
    pair.both_backends("complete_all")
    small = pair.both("malloc", 4096, 0)           # completes the free of big first
    assert pair.fast.stats()["active_bytes.all.current"] == 8192
    pair.check()
    for p in (small, keep):
        pair.both("free", p)
    pair.check()


class _GatedMalloc(SimulatedBackend):
    """A device whose next malloc once ``armed`` sets ``inside`` and blocks until its gate
    opens (inside the allocator's lock, or without it under release_lock_on_cudamalloc)."""

    def __init__(self, capacity: int = 1 << 34) -> None:
        super().__init__(capacity=capacity)
        self.gate = Gate()
        self.inside = threading.Event()
        self.armed = False

    def malloc(self, index: int, size: int) -> int:  # type: ignore[override]
        if self.armed:
            self.armed = False
            self.inside.set()
            assert self.gate.event.wait(30)
        return super().malloc(index, size)  # type: ignore[return-value]


def test_memory_allocated_counts_a_deferred_free_while_another_thread_holds_the_lock() -> None:
    """A thread that freed a block reads memory_allocated() without it, even while another
    thread is inside the allocator (memory_allocated then cannot take the lock to complete
    the deferred free): every locked operation completes a deferred free before it can block
    (here: in the device malloc of a cache miss)."""
    b = _GatedMalloc()
    a = DeviceCachingAllocator(b, 0, parse_config(""))
    keep = a.malloc(4096, 0)
    p = a.malloc(20 * MiB, 0)
    a.free(p)                                  # leaves its segment free: deferred
    assert a._deferred is not None
    b.armed = True
    got: list[int] = []
    other = threading.Thread(target=lambda: got.append(a.malloc(40 * MiB, 0)))
    other.start()                              # misses the cache: blocks in the device malloc
    assert b.inside.wait(10)
    with open_when_blocked(b.gate):
        seen = a.memory_allocated()
    other.join(10)
    assert not other.is_alive() and got
    assert seen in (4096, 4096 + 40 * MiB)     # the free counted (the other malloc maybe)
    assert a.memory_allocated() == 4096 + 40 * MiB
    a.free(got[0])
    a.free(keep)
    assert a.memory_allocated() == 0


def test_memory_allocated_counts_a_deferred_free_while_another_thread_has_just_taken_the_lock(
        ) -> None:
    """The window the test above leaves: another thread holds the lock and has not yet
    completed the deferred free (it is at the very start of its operation). The freeing
    thread's memory_allocated() must still leave the freed block out, without waiting."""
    a = DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(""))
    keep = a.malloc(4096, 0)
    p = a.malloc(20 * MiB, 0)
    a.free(p)                                  # leaves its segment free: deferred
    assert a._deferred is not None
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        a._acquire()                           # another operation's first step
        held.set()
        done.wait(10)
        a._release(None)

    other = threading.Thread(target=hold)
    other.start()
    try:
        assert held.wait(10)
        assert a.memory_allocated() == 4096
        assert a._deferred is not None         # (still pending: the lock was held)
    finally:
        done.set()
        other.join(10)
    assert a.memory_allocated() == 4096
    a.free(keep)
    assert a.memory_allocated() == 0
    assert a.stats()["allocated_bytes.all.current"] == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_sees_the_parents_deferred_free() -> None:
    """A child forked while a free is deferred reads the statistics with it completed, takes
    the block back on the same-size malloc, and empties the cache (it has its own copy)."""
    import accelrt as acc
    from accelrt.memory._allocator import get_allocator
    from accelrt.backends import get_backend

    a = get_allocator(get_backend("cpu"), 0)
    base = a.memory_allocated()
    for _ in range(64):                            # (past the deferral's back-off)
        p = acc.memory.caching_allocator_alloc(20 * MiB + 4096, "cpu:0")
        acc.memory.caching_allocator_delete(p)
        if a._deferred is not None:
            break
    deferred = a._deferred is not None
    pid = os.fork()
    if pid == 0:   # the child: report by exit status only
        code = 1
        try:
            if (deferred and a._deferred is not None and a.memory_allocated() == base
                    and acc.memory.caching_allocator_alloc(20 * MiB + 4096, "cpu:0") == p
                    and a.memory_allocated() == base + 20 * MiB + 4096):
                acc.memory.caching_allocator_delete(p)
                a.empty_cache()
                code = 0 if a.memory_allocated() == base else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung")
        time.sleep(0.005)   # polling a child's exit status, not ordering work
    assert os.waitstatus_to_exitcode(status) == 0
    assert a.memory_allocated() == base            # the parent's own copy
    a.empty_cache()


def test_a_free_recorded_on_another_stream_is_never_deferred() -> None:
    """record_stream then free: the block waits for the stream's work (no deferral, no
    immediate reuse by a same-size malloc); once the work completes the next malloc takes it.
    A same-size malloc after the wait matches the general code."""
    pair = Pair(capacity=1 << 34)
    fast = pair.fast
    s = pair.streams[2]
    p = pair.both("malloc", 20 * MiB, 0)
    pair.both("record_stream", p, s)
    pair.both_backends("launch_work", s)
    pair.both("free", p)
    assert fast._deferred is None
    q = pair.both("malloc", 20 * MiB, 0)
    assert q != p                                 # p's memory may still be in use on s
    pair.both_backends("complete_stream", s)
    pair.both("free", q)                          # (deferred: q's segment is its best fit)
    r = pair.both("malloc", 20 * MiB, 0)
    assert r in (p, q)
    pair.check()
    pair.both("free", r)
    pair.both("empty_cache")
    pair.check()
    assert fast.memory_reserved() == 0
    # record_stream on a freed (deferred) block is a double use, as in the general code
    for _ in range(64):                           # (past the deferral's back-off)
        p = pair.both("malloc", 20 * MiB, 0)
        pair.both("free", p)
        if fast._deferred is not None:
            break
    assert fast._deferred is not None
    for a in (pair.fast, pair.general):
        with pytest.raises(ValueError, match="not allocated"):
            a.record_stream(p, s)
    pair.check()


def test_out_of_memory_retry_releases_a_deferred_free() -> None:
    """A malloc that does not fit the device frees the cache and retries (PyTorch's
    release_cached_blocks): the block whose free was deferred is part of that cache."""
    pair = Pair(capacity=64 * MiB)
    keep = pair.both("malloc", 4096, 0)
    p = pair.both("malloc", 40 * MiB, 0)
    pair.both("free", p)
    assert pair.fast._deferred is not None
    q = pair.both("malloc", 50 * MiB, 0)          # fits only once p's segment is released
    assert q
    s = pair.fast.stats()
    assert s["num_alloc_retries"] == 1 and s["reserved_bytes.all.current"] == 52 * MiB
    pair.check()
    pair.both("free", q)
    pair.both("free", keep)
    pair.both("empty_cache")
    pair.check()


@pytest.mark.parametrize("capacity", [64 * MiB, 1 << 34], ids=["out-of-memory", "fits"])
@pytest.mark.parametrize("cls", [DeviceCachingAllocator, GeneralPathAllocator],
                         ids=["fast", "general"])
def test_a_free_deferred_while_the_lock_is_released_for_a_device_malloc(
        cls: type, capacity: int) -> None:
    """release_lock_on_cudamalloc: another thread's free runs while a malloc waits for the
    device without the lock. When the device is out of memory, the malloc frees the cache
    and retries: the block freed meanwhile is part of that cache (its free deferred by the
    fast path must be completed before the malloc goes on), so the retry succeeds, and the
    peak counts the free before the new allocation."""
    b = _GatedMalloc(capacity=capacity)
    a = cls(b, 0, parse_config("release_lock_on_cudamalloc:True"))
    keep = a.malloc(4096, 0)
    p = a.malloc(40 * MiB, 0)                       # 42 MiB reserved: 30 more do not fit
    b.armed = True
    got: list[object] = []

    def other() -> None:
        try:
            got.append(a.malloc(30 * MiB, 0))
        except Exception as e:  # noqa: BLE001 - reported below
            got.append(e)

    t = threading.Thread(target=other)
    t.start()
    assert b.inside.wait(30)                        # in the device malloc, without the lock
    a.free(p)                                       # (the fast path may defer it)
    b.gate.open()
    t.join(30)
    assert not t.is_alive()
    assert isinstance(got[0], int), got
    s = a.stats()
    oom = capacity == 64 * MiB
    assert s["num_alloc_retries"] == oom
    assert s["allocated_bytes.all.current"] == 4096 + 30 * MiB
    assert s["allocated_bytes.all.peak"] == 4096 + 40 * MiB
    assert a.memory_reserved() == 2 * MiB + 30 * MiB + (0 if oom else 40 * MiB)
    a.free(got[0])
    a.free(keep)
    a.empty_cache()
    assert a.memory_reserved() == 0 == b.used


def _ignore(*_: object) -> None:
    """(a reader whose value the test does not compare)"""


PUBLIC_READERS = [
    ("memory_stats", lambda m: m.memory_stats("cpu:0")["allocated_bytes.all.current"]),
    ("memory_stats_as_nested_dict",
     lambda m: m.memory_stats_as_nested_dict("cpu:0")["allocated_bytes"]["all"]["current"]),
    ("memory_allocated", lambda m: m.memory_allocated("cpu:0")),
    ("max_memory_allocated", lambda m: _ignore(m.max_memory_allocated("cpu:0"))),
    ("memory_summary", lambda m: _ignore(m.memory_summary("cpu:0"))),
    ("memory_snapshot", lambda m: _ignore(m.memory_snapshot())),
    ("reset_peak_memory_stats", lambda m: m.reset_peak_memory_stats("cpu:0")),
    ("reset_accumulated_memory_stats", lambda m: m.reset_accumulated_memory_stats("cpu:0")),
    ("empty_cache", lambda m: m.empty_cache()),
    ("set_per_process_memory_fraction",
     lambda m: m.set_per_process_memory_fraction(1.0, "cpu:0")),
    ("record_memory_history", lambda m: _ignore(m.record_memory_history("all", device="cpu:0"),
                                                m.record_memory_history(None, device="cpu:0"))),
    ("set_allocator_settings", lambda m: m.set_allocator_settings(m.get_allocator_settings())),
]


@pytest.mark.parametrize("name,read", PUBLIC_READERS, ids=[n for n, _ in PUBLIC_READERS])
def test_public_memory_api_sees_a_deferred_free_completed(name: str, read: object) -> None:
    """Through the public API (the cpu device's caching allocator): every reader or setting
    call after a free the fast path deferred sees the allocator as if the free had completed
    (the block inactive in the snapshot, not counted as allocated)."""
    import accelrt as acc
    from accelrt.backends import get_backend
    from accelrt.memory._allocator import get_allocator

    a = get_allocator(get_backend("cpu"), 0)
    base = a.memory_allocated()
    for _ in range(64):                            # (past the deferral's back-off)
        p = acc.memory.caching_allocator_alloc(20 * MiB + 4096, "cpu:0")
        acc.memory.caching_allocator_delete(p)
        if a._deferred is not None:
            break
    assert a._deferred is not None
    got = read(acc.memory)  # type: ignore[operator]
    assert a._deferred is None
    if got is not None:
        assert got == base
    assert a.memory_allocated() == base
    blocks = [b for seg in a.snapshot_segments() for b in seg["blocks"] if b["address"] == p]
    assert all(b["state"] == "inactive" for b in blocks)
    a.empty_cache()
