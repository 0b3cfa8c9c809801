"""Review by tests of the history and statistics API against PyTorch 2.14 (issue 24 s25):
the ``max_entries`` PyTorch's ring buffer takes, when the ``snapshot`` trace entry appears,
and the ``reserved_bytes_by_private_pools`` statistics. Each expectation was read in
PyTorch's source (``c10/cuda/CUDACachingAllocator.cpp``, ``torch/csrc/cuda/Module.cpp``,
``torch/csrc/cuda/memory_snapshot.cpp``, ``torch/cuda/memory.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import accelrt as acc
from accelrt import memory

MiB = 1 << 20


def _history_entry_points(dev: str) -> list[Callable[..., None]]:
    """Every ``record_memory_history`` of the simulated backend's device 0: accelrt.memory's,
    the device module's and its ``memory._record_memory_history``."""
    dm = acc.backends.device_module(dev)
    return [lambda **kw: memory.record_memory_history(device=f"{dev}:0", **kw),
            lambda **kw: dm.record_memory_history(device=0, **kw),
            lambda **kw: dm.memory._record_memory_history(device=0, **kw)]


# ---------------------------------------------------------------------- max_entries

@pytest.mark.parametrize("entry", range(3))
def test_max_entries_zero_keeps_one_entry(dev: str, entry: int) -> None:
    """PyTorch's ``RingBuffer::setMaxEntries`` keeps ``max(1, n)`` entries: ``max_entries=0``
    records a ring of one entry (accelrt refused it with a ValueError)."""
    record = _history_entry_points(dev)[entry]
    record(max_entries=0)
    d = f"{dev}:0"
    memory.caching_allocator_delete(memory.caching_allocator_alloc(512, d))
    (trace, other) = memory._snapshot(dev)["device_traces"]
    assert [e["action"] for e in trace] == ["free_completed"] and other == []
    record(enabled=None)


@pytest.mark.parametrize("entry", range(3))
@pytest.mark.parametrize("value", [-1, -(2 ** 63), 2 ** 64, 2 ** 70])
def test_max_entries_outside_size_t_is_a_type_error(dev: str, entry: int, value: int) -> None:
    """PyTorch's binding takes ``max_entries`` as a size_t: a negative int or one of 2**64
    or more fails its conversion with a TypeError, whether recording starts or stops."""
    record = _history_entry_points(dev)[entry]
    for enabled in ("all", "state", None):
        with pytest.raises(TypeError, match=r"max_entries must be an int in \[0, 2\*\*64\)"):
            record(enabled=enabled, max_entries=value)
    record(max_entries=2 ** 64 - 1)                # the largest size_t: unbounded
    record(enabled=None)


# ---------------------------------------------------------------------- the snapshot entry

def test_snapshot_entry_shows_in_the_next_snapshot(dev: str) -> None:
    """PyTorch's ``NativeCachingAllocator::snapshot`` reads each device's trace, then takes
    its segments (``DeviceCachingAllocator::snapshot``), which records the ``snapshot`` entry
    (addr 0, size the active bytes): a snapshot's own entry is in the next one's traces."""
    d = f"{dev}:0"
    memory.record_memory_history(device=d)
    p = memory.caching_allocator_alloc(3 * MiB, d)
    first = memory._snapshot(dev)["device_traces"][0]
    assert [e["action"] for e in first] == ["segment_alloc", "alloc"]
    second = memory._snapshot(dev)["device_traces"][0]
    assert [e["action"] for e in second] == ["segment_alloc", "alloc", "snapshot"]
    entry = second[-1]
    assert (entry["addr"], entry["size"], entry["stream"]) == (0, 3 * MiB, 0)
    acc.backends.device_module(dev).memory_snapshot()   # the segments alone record one too
    assert [e["action"] for e in memory._snapshot(dev)["device_traces"][0]][-2:] == [
        "snapshot", "snapshot"]
    memory.caching_allocator_delete(p)
    memory.record_memory_history(None, device=d)


def test_snapshot_entry_of_each_device_in_its_own_trace(dev: str) -> None:
    """Every device's trace is read before any device records its ``snapshot`` entry."""
    memory.record_memory_history(device=f"{dev}:0")
    memory.record_memory_history(device=f"{dev}:1")
    ps = [memory.caching_allocator_alloc(512, f"{dev}:{i}") for i in (0, 1)]
    traces = memory._snapshot(dev)["device_traces"]
    assert [[e["action"] for e in t] for t in traces] == [["segment_alloc", "alloc"]] * 2
    traces = memory._snapshot(dev)["device_traces"]
    assert [t[-1]["action"] for t in traces] == ["snapshot", "snapshot"]
    for p in ps:
        memory.caching_allocator_delete(p)
    for i in (0, 1):
        memory.record_memory_history(None, device=f"{dev}:{i}")


# ---------------------------------------------------------------------- private pool stats

PRIVATE = "reserved_bytes_by_private_pools"


def _private(flat: dict[str, int]) -> dict[str, int]:
    return {k: v for k, v in flat.items() if k.startswith(PRIVATE + ".")}


def _allocator(conf: str = "") -> Any:
    from accelrt.memory._allocator import DeviceCachingAllocator
    from accelrt.memory._config import AllocatorConfig, parse_config
    from accelrt.testing._simulated import SimulatedBackend
    return DeviceCachingAllocator(SimulatedBackend(capacity=1 << 34), 0,
                                  parse_config(conf) if conf else AllocatorConfig())


def test_private_pool_reserved_bytes_follow_its_segments(dev: str) -> None:
    """PyTorch 2.14's ``DeviceStats::reserved_bytes_by_private_pools``: per private pool
    id, the ``reserved_bytes`` rows ``all`` and the segment's pool type, changed by the
    pool's segment allocations and frees (``alloc_block``/``release_block``); flattened by
    ``memory_stats()`` as ``reserved_bytes_by_private_pools.{a}_{b}.{row}.{field}``, sorted
    with the other keys; in ``memory_stats_as_nested_dict()`` keyed by the pool id tuple."""
    d = f"{dev}:0"
    memory.caching_allocator_delete(memory.caching_allocator_alloc(512, d))
    assert _private(memory.memory_stats(d)) == {}
    assert memory.memory_stats_as_nested_dict(d)[PRIVATE] == {}
    pool = memory.MemPool()
    assert _private(memory.memory_stats(d)) == {}          # made by the pool's first segment
    with memory.use_mem_pool(pool, d):
        big = memory.caching_allocator_alloc(3 * MiB, d)   # a 20 MiB large segment
        small = memory.caching_allocator_alloc(1000, d)    # a 2 MiB small segment
    flat = memory.memory_stats(d)
    assert list(flat) == sorted(flat)
    a, b = pool.id
    head = f"{PRIVATE}.{a}_{b}"
    expect = {"all": 22 * MiB, "large_pool": 20 * MiB, "small_pool": 2 * MiB}
    assert _private(flat) == {f"{head}.{row}.{field}": (0 if field == "freed" else n)
                              for row, n in expect.items()
                              for field in ("allocated", "current", "freed", "peak")}
    assert flat["reserved_bytes.all.current"] == 24 * MiB  # the default pool's 2 MiB too
    nested = memory.memory_stats_as_nested_dict(d)[PRIVATE]
    assert list(nested) == [pool.id] and nested[pool.id]["large_pool"]["peak"] == 20 * MiB
    memory.caching_allocator_delete(big)
    memory.caching_allocator_delete(small)
    memory.empty_cache()                                   # a live pool keeps its cache
    assert memory.memory_stats(d)[f"{head}.all.current"] == 22 * MiB
    del pool
    memory.empty_cache()                                   # the pool is gone: released
    flat = memory.memory_stats(d)
    assert [flat[f"{head}.all.{f}"] for f in ("current", "peak", "allocated", "freed")] == [
        0, 22 * MiB, 22 * MiB, 22 * MiB]                   # kept after the pool is gone
    memory.reset_peak_memory_stats(d)
    assert memory.memory_stats(d)[f"{head}.large_pool.peak"] == 0
    memory.reset_accumulated_memory_stats(d)
    flat = memory.memory_stats(d)
    assert set(_private(flat).values()) == {0} and len(_private(flat)) == 12   # still there
    assert PRIVATE not in memory.memory_summary(d)         # PyTorch's table has no such row


def test_private_pool_keys_sort_as_strings() -> None:
    """Several pools: keys sorted as PyTorch's ``memory_stats()`` sorts them (as strings:
    ``0_10`` before ``0_2``), the nested dict keyed by tuples."""
    a = _allocator()
    ptrs = []
    for pid in [(0, 2), (0, 10), (3, 1)]:
        a.begin_allocate_to_pool(pid)
        ptrs.append(a.malloc(512, 0))
        a.end_allocate_to_pool(pid)
    flat = a.sorted_stats()
    assert list(flat) == sorted(flat)
    heads = list(dict.fromkeys(k.split(".")[1] for k in _private(flat)))
    assert heads == ["0_10", "0_2", "3_1"]
    from accelrt.memory._stats import nest_stats
    assert set(nest_stats(flat)[PRIVATE]) == {(0, 2), (0, 10), (3, 1)}
    assert a.stats() == dict(flat)
    for p in ptrs:
        a.free(p)


def test_private_pool_expandable_segments_count_mapped_pages() -> None:
    """With expandable segments a private pool's mapped pages count (``map_block`` /
    ``unmap_block`` update the pool's entry as ``reserved_bytes``)."""
    a = _allocator("expandable_segments:True")
    a.begin_allocate_to_pool((0, 5))                     # (made, one reference)
    p = a.malloc(30 * MiB, 0)
    a.end_allocate_to_pool((0, 5))
    flat = a.stats()
    assert flat[f"{PRIVATE}.0_5.large_pool.current"] == flat["reserved_bytes.large_pool.current"]
    assert flat[f"{PRIVATE}.0_5.all.current"] >= 30 * MiB
    a.free(p)
    a.release_pool((0, 5))
    a.empty_cache()
    flat = a.stats()
    assert flat[f"{PRIVATE}.0_5.all.current"] == 0 == flat["reserved_bytes.all.current"]
    assert flat[f"{PRIVATE}.0_5.all.freed"] == flat[f"{PRIVATE}.0_5.all.allocated"] > 0


def test_retired_default_pool_segments_have_no_private_entry() -> None:
    """A default-pool segment retired after a fork (a twin pool of id (0, 0)) is not a
    private pool's: no ``0_0`` entry when it is given back; a private pool's retired
    segments stay under its id."""
    from accelrt.memory._pools import retire_segments
    a = _allocator()
    p = a.malloc(512, 0)
    a.begin_allocate_to_pool((0, 7))
    q = a.malloc(512, 0)
    a.end_allocate_to_pool((0, 7))
    with a._lock:
        assert retire_segments(a) == 2
    a.free(p)
    a.free(q)
    a.release_pool((0, 7))
    a.empty_cache()
    flat = a.stats()
    assert {k.split(".")[1] for k in _private(flat)} == {"0_7"}
    assert flat[f"{PRIVATE}.0_7.all.current"] == 0 == flat["reserved_bytes.all.current"]


# ---------------------------------------------------------------------- the legacy form

def _actions_and_frames(dev: str) -> tuple[list[tuple[str, bool]], list[bool]]:
    snap = memory._snapshot(dev)
    trace = [(e["action"], bool(e.get("frames"))) for e in snap["device_traces"][0]]
    blocks = [bool(b["frames"]) for s in snap["segments"] for b in s["blocks"]
              if b["state"] == "active_allocated"]
    return trace, blocks


def test_legacy_form_defaults(dev: str) -> None:
    """``torch.cuda.memory._record_memory_history(True)`` is PyTorch's legacy form
    (``_record_memory_history_legacy``): ``record_context=True`` keeps the stacks of live
    blocks, and the trace ring holds ``trace_alloc_max_entries=1`` entry without stacks
    (accelrt took True for ``"all"`` with every entry and every stack); ``False`` stops and
    clears, on every device."""
    rec = acc.backends.device_module(dev).memory._record_memory_history
    d = f"{dev}:0"
    rec(True)
    memory.caching_allocator_delete(memory.caching_allocator_alloc(512, d))
    p = memory.caching_allocator_alloc(512, d)
    assert _actions_and_frames(dev) == ([("alloc", False)], [True])
    rec(False)
    assert memory._snapshot(dev)["device_traces"] == [[], []]
    memory.caching_allocator_delete(p)


def test_legacy_form_arguments(dev: str) -> None:
    """The legacy arguments, positional as PyTorch's: ``trace_alloc_max_entries`` sizes the
    ring (0 keeps one entry, a negative int64 is unbounded), ``trace_alloc_record_context``
    puts stacks on trace entries, ``record_context=False`` keeps none; ``device`` is not used
    (PyTorch records every device)."""
    rec = acc.backends.device_module(dev).memory._record_memory_history
    d = f"{dev}:0"
    rec(True, True, 100, True, 1)                        # device=1: every device anyway
    p = memory.caching_allocator_alloc(512, d)
    memory.caching_allocator_delete(p)
    trace, _ = _actions_and_frames(dev)
    assert trace == [("segment_alloc", True), ("alloc", True), ("free_requested", True),
                     ("free_completed", True)]
    rec(True, False, -1, clear_history=True)             # unbounded, no stacks at all
    for _ in range(3):
        memory.caching_allocator_delete(memory.caching_allocator_alloc(512, d))
    p = memory.caching_allocator_alloc(512, d)
    trace, blocks = _actions_and_frames(dev)
    assert len(trace) == 10 and not any(f for _, f in trace) and blocks == [False]
    rec(True, trace_alloc_max_entries=0)                 # a ring of one entry
    memory.caching_allocator_delete(p)
    assert [a for a, _ in _actions_and_frames(dev)[0]] == ["free_completed"]
    rec(False)


@pytest.mark.parametrize("kwargs", [
    {"record_context": [1]}, {"trace_alloc_record_context": "no"},
    {"record_context_cpp": "yes"}, {"clear_history": {}},
    {"trace_alloc_max_entries": 1.0}, {"trace_alloc_max_entries": "1"},
    {"trace_alloc_max_entries": 2 ** 63}, {"trace_alloc_max_entries": -(2 ** 63) - 1}])
def test_legacy_form_refuses_what_its_binding_refuses(dev: str, kwargs: dict[str, Any]) -> None:
    """PyTorch's legacy binding takes bools and an int64: anything else is a TypeError (its
    bool binding reads None and numbers by their truth, its int64 one a bool or a numpy
    integer by its value: session 41, checked on torch 2.15's binding)."""
    rec = acc.backends.device_module(dev).memory._record_memory_history
    with pytest.raises(TypeError, match="must be a bool|must be an int"):
        rec(True, **kwargs)


def test_torch_private_name_shows_the_new_form(dev: str) -> None:
    """As PyTorch's (``__signature__`` of the new form), the dispatching function shows the
    new form's parameters; a str or None first argument is the new form."""
    import inspect
    dm = acc.backends.device_module(dev)
    rec = dm.memory._record_memory_history
    assert inspect.signature(rec) == inspect.signature(dm.record_memory_history)
    rec("all", max_entries=2, device=0)
    memory.caching_allocator_delete(memory.caching_allocator_alloc(512, f"{dev}:0"))
    assert len(memory._snapshot(dev)["device_traces"][0]) == 2
    rec(None)


# ---------------------------------------------------------------------- trace entry fields

def test_trace_entries_carry_their_pool_id(dev: str) -> None:
    """PyTorch 2.14's trace entries have ``pool_id``: the private pool of the block or
    segment (``BlockPool::owner_MempoolId``), ``(0, 0)`` for the default pools, and for a
    ``snapshot`` entry the pool the snapshot was taken of; after ``user_metadata``, before
    ``frames``."""
    d = f"{dev}:0"
    memory.record_memory_history(device=d)
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, d):
        p = memory.caching_allocator_alloc(512, d)
    q = memory.caching_allocator_alloc(512, d)
    memory.caching_allocator_delete(p)
    dm = acc.backends.device_module(dev)
    dm.memory_snapshot(pool.id)
    dm.memory_snapshot()
    trace = memory._snapshot(dev)["device_traces"][0]
    assert [(e["action"], e["pool_id"]) for e in trace] == [
        ("segment_alloc", pool.id), ("alloc", pool.id), ("segment_alloc", (0, 0)),
        ("alloc", (0, 0)), ("free_requested", pool.id), ("free_completed", pool.id),
        ("snapshot", pool.id), ("snapshot", (0, 0))]
    assert list(trace[0])[-2:] == ["pool_id", "frames"]
    memory.caching_allocator_delete(q)
    memory.record_memory_history(None, device=d)


def test_oom_entry_carries_the_requests_pool(dev: str) -> None:
    d = f"{dev}:0"
    memory.record_memory_history(device=d)
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, d), pytest.raises(acc.OutOfMemoryError):
        memory.caching_allocator_alloc(1 << 40, d)
    (oom,) = [e for e in memory._snapshot(dev)["device_traces"][0] if e["action"] == "oom"]
    assert oom["pool_id"] == pool.id and "device_free" in oom and "addr" not in oom
    memory.record_memory_history(None, device=d)


@pytest.mark.parametrize("bad", [(1,), (1, 2, 3), (1.0, 2), "ab", 5])
def test_check_snapshot_checks_trace_pool_ids(bad: Any) -> None:
    from accelrt.memory._snapshot import check_snapshot
    entry = {"action": "alloc", "addr": 0, "size": 512, "stream": 0, "pool_id": bad}
    with pytest.raises(ValueError, match=r"\['pool_id'\]: expected a pair of ints"):
        check_snapshot({"segments": [], "device_traces": [[entry]]})
    entry["pool_id"] = (0, 1)
    check_snapshot({"segments": [], "device_traces": [[entry]]})
