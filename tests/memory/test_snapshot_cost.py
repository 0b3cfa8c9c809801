"""Snapshot cost is linear in the blocks: no deep copy of the segments, the garbage
collector paused while they are made, and a result that shares nothing with the allocator.
(Timings live in bench/bench_allocator.py; these tests check the behaviour behind them.)"""

from __future__ import annotations

import gc
import importlib
import itertools
import threading

import pytest

from accelrt import backends, memory
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.testing._simulated import SimulatedBackend
from accelrt.memory._snapshot import build_snapshot, gc_paused, snapshot_segments

KiB = 1 << 10
_snapshot = importlib.import_module("accelrt.memory._snapshot")
_names = itertools.count()


def _allocator(segments: int, history: bool = False) -> tuple[DeviceCachingAllocator, list[int]]:
    """``segments`` small segments of 7 blocks each (6 x 300 KiB, two of them freed)."""
    a = DeviceCachingAllocator(SimulatedBackend(capacity=1 << 40), 0)
    if history:
        a.record_history("all")
    groups = [[a.malloc(300 * KiB, 0) for _ in range(6)] for _ in range(segments)]
    keep = []
    for ps in groups:
        a.free(ps[1])
        a.free(ps[3])
        keep += ps[0:1] + ps[2:3] + ps[4:]
    return a, keep


@pytest.mark.parametrize("segments", [5, 50])
def test_segments_are_not_deep_copied(segments: int, monkeypatch) -> None:
    a, _ = _allocator(segments)
    calls = [0]
    real = _snapshot.to_plain

    def counting(obj, path="snapshot"):
        calls[0] += 1
        return real(obj, path)

    monkeypatch.setattr(_snapshot, "to_plain", counting)
    segs = snapshot_segments([a])
    assert len(segs) == segments and {len(s["blocks"]) for s in segs} == {7}
    assert calls[0] == 0
    build_snapshot(None, [a], {"k": 1})
    # the settings only (the dict and its value): independent of the number of blocks
    assert calls[0] == 2


def test_trace_entries_are_not_walked_value_by_value(monkeypatch) -> None:
    a, keep = _allocator(20, history=True)
    a.record_annotation({"step": 3})
    calls = [0]
    real = _snapshot.to_plain

    def counting(obj, path="snapshot"):
        calls[0] += 1
        return real(obj, path)

    monkeypatch.setattr(_snapshot, "to_plain", counting)
    snap = build_snapshot(None, [a], {})
    assert len(snap["device_traces"][0]) > 100
    # the settings dict, and the annotation's metadata dict and its value
    assert calls[0] == 3
    for p in keep:
        a.free(p)


class _GcSpy:
    """An allocator that records whether the collector ran while it made its segments (a
    wrapper, not a patched method: the compiled build's allocator methods are read-only)."""

    def __init__(self, a: DeviceCachingAllocator, seen: list[bool]) -> None:
        self._a, self._seen = a, seen

    def snapshot_segments(self, pool_id=None):
        self._seen.append(gc.isenabled())
        return self._a.snapshot_segments(pool_id)

    def __getattr__(self, name: str):
        return getattr(self._a, name)


def test_segments_made_with_the_collector_paused() -> None:
    a, _ = _allocator(3)
    seen: list[bool] = []
    spy = _GcSpy(a, seen)
    assert gc.isenabled()
    snapshot_segments([spy])
    build_snapshot(None, [spy], {})
    assert seen == [False, False]
    assert gc.isenabled()


def test_gc_paused_nests_across_threads_and_restores() -> None:
    assert gc.isenabled()
    inside = threading.Event()
    release = threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            release.wait(10)

    t = threading.Thread(target=other)
    with gc_paused():
        t.start()
        assert inside.wait(10)
    assert not gc.isenabled()          # the other thread's block still runs
    release.set()
    t.join(10)
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()      # a collector the caller turned off stays off
    finally:
        gc.enable()


def test_gc_restored_after_an_error() -> None:
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_result_shares_nothing_with_the_allocator() -> None:
    a, keep = _allocator(2, history=True)
    first = snapshot_segments([a])
    block = next(b for b in first[0]["blocks"] if b["frames"])
    block["frames"][0]["name"] = "mutated"
    block["frames"].clear()
    first[0]["frames"].clear()
    again = snapshot_segments([a])
    assert again[0]["blocks"][0]["frames"][0]["name"] != "mutated"
    assert again[0]["frames"]
    for p in keep:
        a.free(p)


def test_memory_snapshot_equals_full_snapshot_segments(monkeypatch) -> None:
    name = f"snapcost{next(_names)}"

    backends.register(name, lambda: SimulatedBackend(name=name, capacity=1 << 30, device_count=2))
    import accelrt._device as d
    monkeypatch.setattr(d, "_current_backend", backends.get_backend(name))
    ps = [memory.caching_allocator_alloc(s, f"{name}:{i}")
          for i in (1, 0) for s in (1000, 3 << 20, 700 * KiB)]
    segs = memory.memory_snapshot()
    assert segs == memory._snapshot(name)["segments"]
    assert [(s["device"], s["address"]) for s in segs] == sorted(
        (s["device"], s["address"]) for s in segs)
    assert {s["device"] for s in segs} == {0, 1}
    for p in ps:
        memory.caching_allocator_delete(p)
