"""Review of ``record_stream`` with a stream of another device (issue 39, second review).

* ``empty_cache`` (``synchronize_and_free_events``) whose wait for an event raises (a host
  function's error kept by the stream, here on device 1) left every event it had already
  waited for in the queue: the next ``empty_cache`` gave those events back to the pool a second
  time (one event then served two frees) and counted their blocks down again (``event_count``
  -1: the block never merged, its segment was never released).
* The ``cudaMallocAsync`` allocator's ``record_stream(ptr, stream, device)`` took any
  ``device`` (``"1"``, ``5``) and reported a bad stream handle of ``name:5``, where the caching
  allocator's refuses it with a ``TypeError`` / ``ValueError`` naming the device index.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from helpers.registry import malloc_async_backend

import accelrt as acc
from accelrt import backends, memory
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._registry import get_allocator
from accelrt.testing import SimulatedBackend

_names = itertools.count()


@pytest.fixture
def sim() -> Iterator[SimulatedBackend]:
    """A two-device simulated backend whose work runs only when waited for."""
    name = f"rev2sim{next(_names)}"
    b = SimulatedBackend(device_count=2, auto_complete=False, name=name)
    backends.register(name, lambda: b)
    try:
        yield b
    finally:
        b.complete_all()
        get_allocator(b, 0).empty_cache()
        backends.unregister(name)
        b.close()


def _fail() -> None:
    raise RuntimeError("the host function failed")


@pytest.mark.parametrize("device", [1, 0], ids=["other-device", "own-device"])
def test_a_failed_wait_in_empty_cache_keeps_the_pending_frees_consistent(
        sim: SimulatedBackend, device: int) -> None:
    a = get_allocator(sim, 0)
    assert isinstance(a, DeviceCachingAllocator)
    s = sim.stream_create(device, 0)
    p1, p2 = a.malloc(4096, 0), a.malloc(4096, 0)
    a.record_stream(p1, s, device)
    a.record_stream(p2, s, device)
    a.free(p1)                              # event 1 on s
    sim.launch_host_func(device, _fail, s)  # runs (and fails) between the two events
    a.free(p2)                              # event 2 on s
    with pytest.raises(acc.DeviceError, match="the host function failed"):
        a.empty_cache()                     # waits for event 1, then event 2 raises
    frees = a._stream_frees
    # event 1's free completed and left the queue; event 2 (whose wait raised) is still queued
    assert [blk.addr for q in frees.events.values() for _, blk in q] == [p2]
    a.empty_cache()                         # the error was raised once: this one completes
    pool = frees.event_pools[device]
    assert len(pool) == len(set(pool)) == 2  # each event back in the pool once
    assert all(blk.event_count == 0 for blk in a._blocks.values())
    assert not frees.events
    assert a.memory_reserved() == 0         # the segment was released
    stats = a.stats()
    assert stats["active_bytes.all.current"] == 0
    assert stats["allocated_bytes.all.current"] == 0
    sim.stream_destroy(device, s)


def test_a_failed_wait_of_one_pool_keeps_the_other_pools_frees_queued(
        sim: SimulatedBackend) -> None:
    """``empty_cache`` of a private pool (``synchronize_and_free`` of its blocks only) whose
    wait raises: its frees waited for are done, the other pools' stay queued in record
    order."""
    a = get_allocator(sim, 0)
    assert isinstance(a, DeviceCachingAllocator)
    s = sim.stream_create(1, 0)
    pid = (0, 987)
    p_default = a.malloc(4096, 0)
    a.begin_allocate_to_pool(pid)
    p_first, p_last = a.malloc(4096, 0), a.malloc(4096, 0)
    a.end_allocate_to_pool(pid)
    for p in (p_default, p_first, p_last):
        a.record_stream(p, s, 1)
    a.free(p_first)                         # event 1: the private pool's
    a.free(p_default)                       # event 2: the default pool's
    sim.launch_host_func(1, _fail, s)
    a.free(p_last)                          # event 3: the private pool's, its wait raises
    a.release_pool(pid)
    with pytest.raises(acc.DeviceError, match="the host function failed"):
        a.empty_cache(pid)
    q = a._stream_frees.events[(1, s)]
    assert [blk.addr for _, blk in q] == [p_default, p_last]   # record order kept
    a.empty_cache()
    assert not a._stream_frees.events
    pool = a._stream_frees.event_pools[1]
    assert len(pool) == len(set(pool)) == 3
    assert all(blk.event_count == 0 for blk in a._blocks.values())
    assert a.memory_reserved() == 0
    sim.stream_destroy(1, s)


def test_malloc_async_record_stream_checks_the_device_index() -> None:
    name = f"rev2async{next(_names)}"
    with malloc_async_backend(name, lambda: CpuBackend(num_devices=2, name=name)):
        s1 = acc.Stream(f"{name}:1")
        x = acc.zeros(64, device=f"{name}:0")
        alloc, p = x._mem.alloc, x.data_ptr()
        # (the compiled build refuses the argument type with mypyc's message first)
        with pytest.raises(TypeError, match="device index must be an int, got str|"
                                            "int or None object expected; got str"):
            alloc.record_stream(p, s1.stream_id, "1")
        if not memory.compiled:   # (the compiled build reads a bool as the int it is)
            with pytest.raises(TypeError, match="device index must be an int, got bool"):
                alloc.record_stream(p, s1.stream_id, True)
        with pytest.raises(ValueError, match=f"device index 5 is out of range: {name} has 2"):
            alloc.record_stream(p, s1.stream_id, 5)
        with pytest.raises(ValueError, match=f"device index -1 is out of range: {name} has 2"):
            alloc.record_stream(p, s1.stream_id, -1)
        assert alloc._live[p].recorded == []
        alloc.record_stream(p, s1.stream_id, 1)
        assert alloc._live[p].recorded == [(1, s1.stream_id)]
        x.close()
        s1.close()
        acc.synchronize(f"{name}:1")
        acc.synchronize(f"{name}:0")
