"""The hand-inlined fast paths of ``malloc`` and ``free`` match the general code they mirror.

:class:`GeneralPathAllocator` runs every call through ``_malloc_locked`` / ``_free_locked``
(the one split, :meth:`_cut_block`, and the one merge, :meth:`_merge`); the plain allocator
takes its inlined fast paths whenever they apply. Both run the same operation sequences
(random ones and the recorded traces) and must end every step in the same state: addresses,
blocks, free lists and every statistic.
"""

from __future__ import annotations

import glob
import os
import random

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.testing._allocators import GeneralPathAllocator
from accelrt.memory._config import parse_config
from accelrt.memory.tools._replay import load_trace, trace_ops
from accelrt.testing._simulated import SimulatedBackend

MiB = 1 << 20
TRACES = sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "traces",
                                       "trace_*.json.gz")))


def state(a: DeviceCachingAllocator) -> tuple[object, ...]:
    """Everything observable plus the free lists (keys per pool and stream); the statistics
    are read first, while a free the fast path deferred is still pending (the snapshot
    completes it before the free lists are read)."""
    stats = a.stats()
    segments = a.snapshot_segments()
    free = [(id_, s, fl.keys()) for id_, pool in (("small", a._small), ("large", a._large))
            for s, fl in sorted(pool.free.items())]
    return (segments, stats, free, len(a._blocks))


sizes = st.one_of(st.integers(1, 4096), st.integers(4097, 1 * MiB),
                  st.integers(1 * MiB + 1, 12 * MiB), st.integers(12 * MiB, 40 * MiB))
ops = st.lists(st.one_of(
    st.tuples(st.just("alloc"), sizes, st.sampled_from([0, 0, 0, 7])),
    st.tuples(st.just("free"), st.integers(0, 1000), st.just(0)),
    # free a live block and at once allocate about its size again (the same rounded size
    # when |delta| is small: the fast path's immediate reuse of a deferred free)
    st.tuples(st.just("realloc"), st.integers(0, 1000),
              st.one_of(st.just(0), st.integers(-700, 700))),
    st.tuples(st.just("reset_peak"), st.just(0), st.just(0)),
    st.tuples(st.just("empty_cache"), st.just(0), st.just(0)),
), min_size=1, max_size=80)


@pytest.mark.parametrize("conf", ["", "expandable_segments:True",
                                  "expandable_segments:True,page_reuse:True"])
@settings(max_examples=40, deadline=None)
@given(seq=ops)
def test_fast_paths_match_the_general_code(conf: str, seq: list[tuple[str, int, int]]) -> None:
    fast = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 34), 0, parse_config(conf))
    general = GeneralPathAllocator(SimulatedBackend(capacity=1 << 34), 0, parse_config(conf))
    live: list[tuple[int, int, int]] = []
    for op, arg, stream in seq:
        if op == "alloc":
            p = fast.malloc(arg, stream)
            assert general.malloc(arg, stream) == p
            live.append((p, arg, stream))
        elif op == "free" and live:
            p = live.pop(arg % len(live))[0]
            fast.free(p)
            general.free(p)
        elif op == "realloc" and live:
            p, size, s = live.pop(arg % len(live))
            fast.free(p)
            general.free(p)
            size = max(1, size + stream)
            q = fast.malloc(size, s)
            assert general.malloc(size, s) == q
            live.append((q, size, s))
        elif op == "reset_peak":
            fast.reset_peak_stats()
            general.reset_peak_stats()
        elif op == "empty_cache":
            fast.empty_cache()
            general.empty_cache()
        assert state(fast) == state(general)


@pytest.mark.parametrize("conf", ["", "expandable_segments:True,page_reuse:True"],
                         ids=["default", "low-frag"])
@pytest.mark.parametrize("path", TRACES, ids=lambda p: os.path.basename(p).split(".")[0])
def test_fast_paths_match_the_general_code_on_traces(path: str, conf: str) -> None:
    ops_ = trace_ops(load_trace(path), path)[:6000]
    fast = DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(conf))
    general = GeneralPathAllocator(SimulatedBackend(), 0, parse_config(conf))
    handles: dict[int, int] = {}
    for i, (is_alloc, addr, size, stream) in enumerate(ops_):
        if is_alloc:
            p = fast.malloc(size, stream)
            assert general.malloc(size, stream) == p
            handles[addr] = p
        else:
            p = handles.pop(addr)
            fast.free(p)
            general.free(p)
        if i % 1000 == 0:
            assert state(fast) == state(general)
    assert state(fast) == state(general)


def test_general_path_allocator_takes_no_fast_path() -> None:
    a = GeneralPathAllocator(SimulatedBackend(), 0, parse_config(""))
    a.free(a.malloc(512, 0))
    assert not a._fast
    assert DeviceCachingAllocator(SimulatedBackend(), 0, parse_config(""))._fast


def test_fast_path_returns_once_each_component_is_idle() -> None:
    """Each component (history, private pools, stream-ordered frees) turns the fast path off
    while it has work and gives it back when it is idle again."""
    b = SimulatedBackend(auto_complete=False)
    a = DeviceCachingAllocator(b, 0, parse_config(""))
    a.record_history("all")
    assert not a._fast and a._history is not None
    a.record_history(None)
    assert a._fast and a._history is None
    a.begin_allocate_to_pool((1, 1))
    assert not a._fast
    a.end_allocate_to_pool((1, 1))
    assert a._fast
    a.release_pool((1, 1))
    s = b.stream_create(0, 0)
    p = a.malloc(512, 0)
    a.record_stream(p, s)
    a.free(p)                                  # waits for an event on s
    assert not a._fast and a._stream_frees.waiting()
    b.complete_all()
    a.free(a.malloc(4096, 0))                  # the next malloc completes the pending free
    assert a._fast and not a._stream_frees.waiting()
    assert a.stats()["active.all.current"] == 0


def _pair() -> tuple[DeviceCachingAllocator, GeneralPathAllocator]:
    return (DeviceCachingAllocator(SimulatedBackend(capacity=1 << 34), 0, parse_config("")),
            GeneralPathAllocator(SimulatedBackend(capacity=1 << 34), 0, parse_config("")))


def _both(pair: tuple[DeviceCachingAllocator, GeneralPathAllocator], name: str,
          *args: object) -> object:
    fast, general = pair
    r = getattr(fast, name)(*args)
    assert getattr(general, name)(*args) == r
    return r


@pytest.mark.parametrize("size", [512, 1000, MiB, 3 * MiB, 20 * MiB])
def test_immediate_reuse_takes_the_deferred_free_back(size: int) -> None:
    """free() of a block that leaves its segment free defers the list insertion (and the merge
    with the segment's free rest); malloc() of the same size takes the block back at once.
    Addresses, statistics (requested sizes smaller and larger) and the final state match the
    general code. (Reading statistics in between would complete the free: see below.)"""
    pair = _pair()
    fast = pair[0]
    ksize = 5 * MiB if size <= MiB else 4096        # a live block of the other pool
    keep = _both(pair, "malloc", ksize, 0)
    p = _both(pair, "malloc", size, 0)
    for req in (size, size - 100, size, size - 7, size):
        _both(pair, "free", p)
        assert fast._deferred is not None
        q = _both(pair, "malloc", req, 0)
        assert q == p and fast._deferred is None
        assert fast.stats() == pair[1].stats()
    assert state(fast) == state(pair[1])
    s = fast.stats()
    assert s["requested_bytes.all.peak"] == ksize + size
    assert s["allocation.all.allocated"] == 7 and s["allocation.all.current"] == 2
    _both(pair, "free", p)
    _both(pair, "free", keep)
    assert state(fast) == state(pair[1])


FLUSHES = ["snapshot_segments", "empty_cache", "reset_peak_stats", "reset_accumulated_stats",
           "stats", "sorted_stats", "memory_allocated", "max_memory_allocated", "segment_of", "other_malloc", "other_free", "set_fraction", "history",
           "double_free", "other_stream", "pool"]


@pytest.mark.parametrize("what", FLUSHES)
def test_every_other_operation_sees_the_deferred_free_completed(what: str) -> None:
    """Between a deferred free and the next malloc, any other operation leaves the allocator
    exactly as the general code does (the deferred insertion and merge done first)."""
    pair = _pair()
    fast, general = pair
    keep = _both(pair, "malloc", 4096, 0)
    other = _both(pair, "malloc", 3 * MiB, 0)
    p = _both(pair, "malloc", 512, 0)
    _both(pair, "free", keep)     # (the block before p is now free: p's free is eager)
    keep = _both(pair, "malloc", 4096, 0)
    q = _both(pair, "malloc", 20 * MiB, 0)
    _both(pair, "free", q)        # leaves its segment free: deferred
    assert fast._deferred is not None
    if what in ("snapshot_segments", "empty_cache", "reset_peak_stats",
                "reset_accumulated_stats", "stats", "sorted_stats", "memory_allocated",
                "max_memory_allocated"):
        _both(pair, what)
    elif what == "segment_of":
        _both(pair, what, p)
    elif what == "other_malloc":
        _both(pair, "malloc", 600, 0)
    elif what == "other_free":
        _both(pair, "free", other)
        other = 0
    elif what == "set_fraction":
        _both(pair, "set_memory_fraction", 0.5)
    elif what == "history":
        _both(pair, "record_history", "all")
        _both(pair, "record_history", None)   # (the stacks of the two calls differ)
    elif what == "double_free":
        for a in pair:
            with pytest.raises(ValueError, match="double free"):
                a.free(q)
    elif what == "other_stream":
        _both(pair, "malloc", 20 * MiB, 7)
    elif what == "pool":
        _both(pair, "begin_allocate_to_pool", (1, 1))
        _both(pair, "malloc", 20 * MiB, 0)
        _both(pair, "end_allocate_to_pool", (1, 1))
    assert state(fast) == state(general)
    # the peak after a reset: the reuse must not skip a peak the reset lowered
    r = _both(pair, "malloc", 20 * MiB, 0)
    assert state(fast) == state(general)
    for x in (p, keep, other, r):
        if x:
            _both(pair, "free", x)
    assert state(fast) == state(general)


def test_deferral_backs_off_when_not_reused() -> None:
    """Frees that are not followed by a reuse are deferred less and less often (1, 3, 7, ...
    skipped), and a reuse makes the next one deferred again; the state never differs."""
    pair = _pair()
    fast = pair[0]
    ps = [_both(pair, "malloc", 20 * MiB, 0) for _ in range(40)]
    deferred = []
    for p in reversed(ps[10:]):                    # (each the lowest free: a best fit)
        _both(pair, "free", p)
        deferred.append(fast._deferred is not None)
        _both(pair, "malloc", 4096, 0)             # not a reuse
    assert deferred[:7] == [True, False, True, False, False, False, True]
    assert sum(deferred) == 4                      # the 1st, 3rd, 7th and 15th
    assert state(fast) == state(pair[1])
    assert fast._defer_misses == 4 and fast._defer_skip == 0   # the next one is deferred
    _both(pair, "free", ps[0])
    assert fast._deferred is not None
    assert _both(pair, "malloc", 20 * MiB, 0) == ps[0]
    assert fast._defer_misses == 0
    assert state(fast) == state(pair[1])


@pytest.mark.parametrize("seed", range(3))
def test_reuse_heavy_sequences_match_the_general_code(seed: int) -> None:
    """Many immediate reuses (free + malloc of about the same size, few sizes) mixed with
    plain frees, allocations on two streams, stat reads and resets: the fast allocator (with
    its deferred frees) and the general code stay in the same state."""
    rng = random.Random(seed)
    pair = _pair()
    fast = pair[0]
    sizes = [512, 3000, MiB, 3 * MiB, 12 * MiB, 20 * MiB]
    live: list[tuple[int, int, int]] = []
    reuses = 0
    for i in range(1500):
        r = rng.random()
        if r < 0.3 or not live:
            size, s = rng.choice(sizes) - rng.randrange(0, 400), rng.choice((0, 0, 0, 1))
            live.append((_both(pair, "malloc", size, s), size, s))   # type: ignore[arg-type]
        elif r < 0.45:
            _both(pair, "free", live.pop(rng.randrange(len(live)))[0])
        elif r < 0.95:
            p, size, s = live.pop(rng.randrange(len(live)))
            _both(pair, "free", p)
            deferred = fast._deferred is not None
            size = max(1, size + rng.choice((0, 0, -300, 200)))
            q = _both(pair, "malloc", size, s)
            reuses += deferred and q == p and fast._deferred is None
            live.append((q, size, s))   # type: ignore[arg-type]
        elif r < 0.98:
            assert fast.stats() == pair[1].stats()
        else:
            _both(pair, "reset_peak_stats")
        if i % 100 == 0:
            assert state(fast) == state(pair[1])
    assert reuses > 25
    assert state(fast) == state(pair[1])
    for p, _, _ in live:
        _both(pair, "free", p)
    assert state(fast) == state(pair[1])


@pytest.mark.parametrize("conf", ["", "expandable_segments:True",
                                  "expandable_segments:True,page_reuse:True"],
                         ids=["default", "expandable", "low-frag"])
@pytest.mark.parametrize("seed", range(2))
def test_long_free_lists_match_the_general_code(conf: str, seed: int) -> None:
    """Many live blocks of many sizes, freed at random: long free lists in which a split's
    remainder key either takes the place of the key it replaces or moves past keys between
    (the low-fragmentation fast path updates the list in place where nothing lies between),
    and the best fit's scan past blocks followed by unmapped ranges. The fast and general code stay in
    the same state."""
    rng = random.Random(seed)
    fast = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 34), 0, parse_config(conf))
    general = GeneralPathAllocator(SimulatedBackend(capacity=1 << 34), 0, parse_config(conf))
    pair = (fast, general)
    live: list[int] = []
    for i in range(2500):
        if len(live) < 40 or (rng.random() < 0.5 and len(live) < 400):
            r = rng.random()
            size = (rng.randrange(1, 64 * 1024) if r < 0.4 else
                    rng.randrange(1, 4 * MiB) if r < 0.8 else rng.randrange(1, 48 * MiB))
            live.append(_both(pair, "malloc", size, 0))   # type: ignore[arg-type]
        else:
            _both(pair, "free", live.pop(rng.randrange(len(live))))
        if i % 50 == 0:
            assert state(fast) == state(general)
    assert len(fast._small.free.get(0, ())) + len(fast._large.free.get(0, ())) > 15
    for p in live:
        _both(pair, "free", p)
    assert state(fast) == state(general)


@pytest.mark.parametrize("seed", range(3))
def test_bucketed_free_lists_match_the_general_code(monkeypatch: pytest.MonkeyPatch,
                                                     seed: int) -> None:
    """With buckets of at most 3 keys, the fast paths' free-list work (the best-fit pop, a
    split's remainder added, merges with the block before, after and both, in place or moved)
    splits and drops buckets on two streams and matches the general code step by step."""
    from accelrt.memory import _block
    monkeypatch.setattr(_block, "BUCKET_MAX", 3)
    rng = random.Random(seed)
    pair = _pair()
    fast, general = pair
    live: list[int] = []
    bucketed = 0
    for i in range(1500):
        if len(live) < 10 or (rng.random() < 0.5 and len(live) < 120):
            r = rng.random()
            size = (rng.randrange(1, 64 * 1024) if r < 0.5 else
                    rng.randrange(1, 3 * MiB) if r < 0.85 else rng.randrange(1, 30 * MiB))
            live.append(_both(pair, "malloc", size, rng.choice((0, 0, 1))))  # type: ignore[arg-type]
        else:
            _both(pair, "free", live.pop(rng.randrange(len(live))))
        bucketed += any(len(fl.bucket_sizes()) > 1 for pool in (fast._small, fast._large)
                        for fl in pool.free.values())
        if i % 25 == 0:
            assert state(fast) == state(general)
    assert bucketed > 500
    for p in live:
        _both(pair, "free", p)
    assert state(fast) == state(general)


def test_the_hot_flags_follow_the_deferred_free() -> None:
    """malloc's fast path is off exactly while a free is deferred, free's general path is
    taken exactly then (or while history is recorded); a reuse and a flush turn them back."""
    pair = _pair()
    fast = pair[0]
    p = _both(pair, "malloc", 3 * MiB, 0)
    assert fast._fast_malloc and not fast._free_slow
    _both(pair, "free", p)                            # leaves its segment free: deferred
    assert fast._deferred is not None and not fast._fast_malloc and fast._free_slow
    assert _both(pair, "malloc", 3 * MiB, 0) == p     # the immediate reuse
    assert fast._deferred is None and fast._fast_malloc and not fast._free_slow
    _both(pair, "free", p)
    assert fast._deferred is not None
    q = _both(pair, "malloc", 4096, 0)                # not a reuse: completed, general path
    assert fast._deferred is None and fast._fast_malloc and not fast._free_slow
    _both(pair, "record_history", "all")
    assert not fast._fast_malloc and fast._free_slow
    _both(pair, "record_history", None)
    assert fast._fast_malloc and not fast._free_slow
    _both(pair, "free", q)
    assert state(fast) == state(pair[1])


def test_a_bad_free_raises_without_a_chained_lookup_error() -> None:
    """The fast path looks the pointer up by subscript: an unknown one still raises the
    general path's ValueError, with no KeyError chained to it."""
    a = _pair()[0]
    p = a.malloc(4096, 0)
    with pytest.raises(ValueError) as info:
        a.free(p + 512)
    assert info.value.__context__ is None and info.value.__cause__ is None
    a.free(p)
    with pytest.raises(ValueError, match="double free") as info:
        a.free(p)
    assert info.value.__context__ is None
