"""Peaks and sums stay exact when statistics are read rarely.

The allocator brings peaks up to date lazily (before a stat decreases, or when stats are read)
and, on the fast path, inline or at once. The stateful test reads ``stats()`` after every step,
which settles everything each time; here random operation sequences run with reads only now and
then, and the expected values come from ``snapshot_segments()`` (which does not touch the
statistics) after every step.
"""

from __future__ import annotations

import hypothesis.strategies as st
from hypothesis import given, settings

from accelrt import OutOfMemoryError
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._config import parse_config
from accelrt.testing import SimulatedBackend

MiB = 1 << 20
NAMES = ("allocation", "allocated_bytes", "active", "active_bytes", "requested_bytes",
         "inactive_split", "inactive_split_bytes")
#: Stats whose true peak is the largest value seen between operations.
EXACT = ("allocation", "allocated_bytes", "active", "active_bytes", "requested_bytes")
TYPES = {"small": "small_pool", "large": "large_pool"}

sizes = st.one_of(st.integers(1, 4096), st.integers(4097, 1 * MiB),
                  st.integers(1 * MiB + 1, 12 * MiB), st.integers(12 * MiB, 40 * MiB))
ops = st.lists(st.one_of(
    st.tuples(st.just("alloc"), sizes, st.sampled_from([0, 0, 0, 1])),
    st.tuples(st.just("free"), st.integers(0, 1000), st.just(0)),
    # free and at once allocate about the same size (the fast path's immediate reuse)
    st.tuples(st.just("realloc"), st.integers(0, 1000),
              st.one_of(st.just(0), st.integers(-600, 600))),
    st.tuples(st.just("record"), st.integers(0, 1000), st.sampled_from([2, 3])),
    st.tuples(st.just("complete"), st.just(0), st.sampled_from([2, 3])),
    st.tuples(st.just("read"), st.just(0), st.just(0)),
    st.tuples(st.just("reset_peak"), st.just(0), st.just(0)),
    st.tuples(st.just("empty_cache"), st.just(0), st.just(0)),
), min_size=1, max_size=60)


def _currents(a: DeviceCachingAllocator) -> dict[str, int]:
    """The current value of every stat in NAMES, per type and ``all``, from a snapshot."""
    cur = {f"{n}.{t}": 0 for n in NAMES for t in ("all", "small_pool", "large_pool")}
    for seg in a.snapshot_segments():
        t = TYPES[seg["segment_type"]]
        split = len(seg["blocks"]) > 1
        for blk in seg["blocks"]:
            add: dict[str, int] = {}
            if blk["state"] == "active_allocated":
                add["allocation"] = 1
                add["allocated_bytes"] = blk["size"]
            if blk["state"] != "inactive":
                add["active"] = 1
                add["active_bytes"] = blk["size"]
                add["requested_bytes"] = blk["requested_size"]
            elif split and not seg["is_expandable"]:
                add["inactive_split"] = 1
                add["inactive_split_bytes"] = blk["size"]
            for n, v in add.items():
                cur[f"{n}.{t}"] += v
                cur[f"{n}.all"] += v
    return cur


def _check(a: DeviceCachingAllocator, maxima: dict[str, int], cur: dict[str, int]) -> None:
    s = a.stats()
    for key, value in cur.items():
        name = key.split(".")[0]
        assert s[f"{key}.current"] == value, key
        assert s[f"{key}.allocated"] - s[f"{key}.freed"] == value, key
        assert s[f"{key}.peak"] >= maxima[key], key
        if name in EXACT:
            assert s[f"{key}.peak"] == maxima[key], key
    assert s == dict(a.sorted_stats())


@settings(max_examples=60, deadline=None)
@given(conf=st.sampled_from(["", "max_split_size_mb:24", "expandable_segments:True"]),
       seq=ops)
def test_rarely_read_stats_are_exact(conf: str, seq: list[tuple[str, int, int]]) -> None:
    b = SimulatedBackend(capacity=256 * MiB, auto_complete=False)
    a = DeviceCachingAllocator(b, 0, parse_config(conf))
    live: list[int] = []
    sizes: dict[int, tuple[int, int]] = {}
    maxima = _currents(a)
    for op, x, stream in seq:
        if op == "alloc":
            try:
                live.append(a.malloc(x, stream))
                sizes[live[-1]] = (x, stream)
            except OutOfMemoryError:
                pass
        elif op == "free" and live:
            a.free(live.pop(x % len(live)))
        elif op == "realloc" and live:
            p = live.pop(x % len(live))
            a.free(p)
            size, s = sizes[p]
            size = max(1, size + stream)
            try:
                live.append(a.malloc(size, s))
                sizes[live[-1]] = (size, s)
            except OutOfMemoryError:
                pass
        elif op == "record" and live:
            b.launch_work(stream)
            a.record_stream(live[x % len(live)], stream)
        elif op == "complete":
            b.complete_stream(stream)
        elif op == "read":
            _check(a, maxima, _currents(a))
        elif op == "reset_peak":
            a.reset_peak_stats()
            maxima = _currents(a)
        elif op == "empty_cache":
            a.empty_cache()
        cur = _currents(a)
        maxima = {k: max(v, cur[k]) for k, v in maxima.items()}
    _check(a, maxima, _currents(a))
    for p in live:
        a.free(p)
    b.complete_all()
    a.empty_cache()
    assert a.memory_reserved() == 0


def test_alternating_cycles_keep_peaks() -> None:
    """The churn the fast path is built for: peaks stay those of one live block, sums grow."""
    b = SimulatedBackend(capacity=256 * MiB)
    a = DeviceCachingAllocator(b, 0, parse_config(""))
    keep = a.malloc(3 * MiB, 0)
    for size in (512, MiB, 20 * MiB):
        for _ in range(5):
            a.free(a.malloc(size, 0))
    s = a.sorted_stats()
    assert s["allocation.all.peak"] == 2 and s["allocation.all.current"] == 1
    assert s["allocation.all.allocated"] == 16 and s["allocation.all.freed"] == 15
    assert s["allocated_bytes.large_pool.peak"] == 3 * MiB + 20 * MiB
    assert s["allocated_bytes.small_pool.peak"] == MiB
    assert s["inactive_split.small_pool.peak"] == 1
    assert s["inactive_split_bytes.small_pool.peak"] == 2 * MiB - 512
    assert s["requested_bytes.all.current"] == 3 * MiB
    a.free(keep)
    a.empty_cache()


def test_stat_keys_are_pytorchs_sorted_and_match_stats() -> None:
    """``sorted_stats()`` (``memory_stats()``) zips a fixed key tuple with values emitted in
    that order: the tuple must be sorted and hold every key of ``stats()`` once."""
    from accelrt.memory._stats import FLAT_KEYS, SORTED_KEYS

    assert list(SORTED_KEYS) == sorted(FLAT_KEYS) and len(set(FLAT_KEYS)) == len(FLAT_KEYS) == 123
    a = DeviceCachingAllocator(SimulatedBackend(capacity=256 * MiB), 0, parse_config(""))
    p = a.malloc(3 * MiB, 0)
    s = a.sorted_stats()
    assert list(s) == list(SORTED_KEYS) and s == a.stats()
    assert (s["allocated_bytes.large_pool.current"], s["reserved_bytes.large_pool.current"],
            s["segment.all.current"], s["max_split_size"]) == (3 * MiB, 20 * MiB, 1, -1)
    a.free(p)
    a.empty_cache()
