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
    memory.memory_snapshot()                       # the segments alone record one too
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
