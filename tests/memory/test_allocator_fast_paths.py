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

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from accelrt.memory._allocator import DeviceCachingAllocator, GeneralPathAllocator
from accelrt.memory._config import parse_config
from accelrt.memory._replay import load_trace, trace_ops
from accelrt.memory._simulated import SimulatedBackend

MiB = 1 << 20
TRACES = sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "traces",
                                       "trace_*.json.gz")))


def state(a: DeviceCachingAllocator) -> tuple[object, ...]:
    """Everything observable plus the free lists (keys per pool and stream)."""
    free = [(id_, s, list(fl)) for id_, pool in (("small", a._small), ("large", a._large))
            for s, fl in sorted(pool.free.items())]
    return (a.snapshot_segments(), a.stats(), free, len(a._blocks))


sizes = st.one_of(st.integers(1, 4096), st.integers(4097, 1 * MiB),
                  st.integers(1 * MiB + 1, 12 * MiB), st.integers(12 * MiB, 40 * MiB))
ops = st.lists(st.one_of(
    st.tuples(st.just("alloc"), sizes, st.sampled_from([0, 0, 0, 7])),
    st.tuples(st.just("free"), st.integers(0, 1000), st.just(0)),
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
    live: list[int] = []
    for op, arg, stream in seq:
        if op == "alloc":
            p = fast.malloc(arg, stream)
            assert general.malloc(arg, stream) == p
            live.append(p)
        elif op == "free" and live:
            p = live.pop(arg % len(live))
            fast.free(p)
            general.free(p)
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
    low_frag = parse_config("expandable_segments:True,page_reuse:True")
    assert not GeneralPathAllocator(SimulatedBackend(), 0, low_frag)._fast_reuse
    assert DeviceCachingAllocator(SimulatedBackend(), 0, low_frag)._fast_reuse


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
