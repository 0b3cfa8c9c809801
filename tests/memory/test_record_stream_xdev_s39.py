"""``record_stream`` with a stream of another device of the array's backend (issue 39).

PyTorch 2.15's ``Tensor.record_stream`` -> ``CUDACachingAllocator::recordStream`` keeps the
``CUDAStream`` (device + stream) in ``block->stream_uses``; at the free, ``insert_events``
sets that stream's device, takes an event of that device's pool, records it on the stream and
queues it under the stream; ``process_events`` / ``synchronize_and_free_events`` query and
synchronize it. accelrt refused such a stream (``ValueError: the stream is on cpu:1 but the
array is on cpu:0``). Here device 1's stream is held back by a gate (a host function waiting
on a ``threading.Event``) so its work is pending when the array of device 0 is freed: the block
must not be reused (a new allocation of the same size on device 0 gets another address) until
the gate opens and the event on device 1 completes, then it is. Calls that must wait for
device 1 are checked with ``open_when_blocked`` (the gate opens only once the call blocks).
"""

from __future__ import annotations

import gc
import itertools
import threading
from collections.abc import Iterator

import pytest
from helpers.gates import Gate, open_when_blocked
from helpers.registry import malloc_async_backend, module_backends
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import accelrt as acc
from accelrt import backends, memory
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._allocator import DeviceCachingAllocator
from accelrt.memory._registry import get_allocator

NAME = "xdevrec"
D0, D1 = f"{NAME}:0", f"{NAME}:1"
_backends = module_backends({
    NAME: lambda: CpuBackend(num_devices=2, async_streams=True, name=NAME),
})
_names = itertools.count()


@pytest.fixture
def alloc() -> Iterator[DeviceCachingAllocator]:
    """Device 0's caching allocator, its cache emptied after the test."""
    a = get_allocator(backends.get_backend(NAME), 0)
    yield a
    acc.synchronize(D1)
    acc.synchronize(D0)
    a.empty_cache()


def _gate(stream: acc.Stream) -> Gate:
    """Hold ``stream``'s later work back until the gate opens."""
    gate = Gate()
    stream._b.launch_host_func(stream.device_index, gate, stream.stream_id)
    return gate


def _reuses(ptr: int, nbytes: int) -> bool:
    """A new allocation of ``nbytes`` on device 0 gets ``ptr`` (the freed block is reused)."""
    probe = acc.empty(nbytes // 4, device=D0)
    try:
        return probe.data_ptr() == ptr
    finally:
        probe.close()


def test_the_block_waits_for_the_other_devices_stream(alloc: DeviceCachingAllocator) -> None:
    s1 = acc.Stream(D1)
    x = acc.zeros(256, device=D0)
    ptr, n = x.data_ptr(), x.nbytes
    with _gate(s1) as gate:
        x.record_stream(s1)
        del x                                   # free requested; its event waits on device 1
        frees = alloc._stream_frees
        assert list(frees.events) == [(1, s1.stream_id)]
        for _ in range(3):
            assert not _reuses(ptr, n)          # the event on device 1 has not completed
        stats = memory.memory_stats(D0)
        assert stats["allocated_bytes.all.current"] == 0
        assert stats["active_bytes.all.current"] == n   # pending: still active, as torch
        seg = [b for s in alloc.snapshot_segments() for b in s["blocks"]
               if b["address"] == ptr]
        assert [b["state"] for b in seg] == ["active_pending_free"]
        gate.open()
        s1.synchronize()
        assert _reuses(ptr, n)                  # the event completed: reused
    assert not frees.events
    assert len(frees.event_pools[1]) == 1       # the event of device 1 went back to its pool
    assert memory.memory_stats(D0)["active_bytes.all.current"] == 0
    s1.close()


def test_close_with_a_stream_of_the_other_device_waits_for_it(
        alloc: DeviceCachingAllocator) -> None:
    s1 = acc.Stream(D1)
    x = acc.zeros(300, device=D0)
    ptr, n = x.data_ptr(), x.nbytes
    with _gate(s1) as gate:
        x.close(stream=s1)
        assert not _reuses(ptr, n)
        gate.open()
        s1.synchronize()
        assert _reuses(ptr, n)
    s1.close()


def test_the_same_device_and_allocation_stream_stay_bare_handles(
        alloc: DeviceCachingAllocator) -> None:
    x = acc.zeros(64, device=D0)
    s0, s1 = acc.Stream(D0), acc.Stream(D1)
    x.record_stream(acc.current_stream(D0))     # its allocation stream: ignored
    blk = alloc._blocks[x.data_ptr()]
    assert blk.stream_uses is None
    x.record_stream(s0)
    x.record_stream(s1)
    x.record_stream(acc.current_stream(D1))     # device 1's default stream: handle 0, recorded
    assert blk.stream_uses == {s0.stream_id, (1, s1.stream_id), (1, 0)}
    x.close()
    acc.synchronize(D1)
    s0.close()
    s1.close()


def test_bad_streams_keep_their_errors(alloc: DeviceCachingAllocator) -> None:
    x = acc.zeros(4, device=D0)
    other = acc.Stream("cpu:0")
    with pytest.raises(ValueError, match=r"stream is on cpu:0 but the array is on xdevrec:0; "
                                         r"pass a stream of the array's backend"):
        x.record_stream(other)
    with pytest.raises(ValueError, match="stream is on cpu:0"):
        x.close(stream=other)
    assert not x.is_closed
    for bad in (None, 1, D1, acc.Event(D1)):
        with pytest.raises(TypeError, match="accelrt.Stream"):
            x.record_stream(bad)  # type: ignore[arg-type]
    p, h = x.data_ptr(), acc.Stream(D1)
    with pytest.raises(ValueError, match="device index 2 is out of range: xdevrec has 2"):
        alloc.record_stream(p, h.stream_id, 2)
    # (the compiled build's allocator refuses the argument type with mypyc's message first)
    with pytest.raises(TypeError, match="device index must be an int, got str|"
                                        "int or None object expected; got str"):
        alloc.record_stream(p, h.stream_id, "1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="987654 is not a live stream handle of xdevrec:1"):
        alloc.record_stream(p, 987654, 1)
    assert alloc._blocks[p].stream_uses is None
    other.close()
    h.close()
    x.close()


def test_a_destroyed_stream_of_the_other_device_synchronizes_that_device(
        alloc: DeviceCachingAllocator) -> None:
    b = backends.get_backend(NAME)
    h = b.stream_create(1, 0)
    p = alloc.malloc(4096, 0)
    with Gate() as gate:                        # opened at the end whatever happens
        b.launch_host_func(1, gate, h)
        alloc.record_stream(p, h, 1)
        b.stream_destroy(1, h)                  # its queued work (the gate) still runs
        with open_when_blocked(gate):
            alloc.free(p)                       # cannot record: waits for device 1 instead
            assert gate.event.is_set()
    assert not alloc._stream_frees.events       # the free completed at once
    assert alloc.malloc(4096, 0) == p
    alloc.free(p)


def test_empty_cache_synchronizes_the_event_on_the_other_device(
        alloc: DeviceCachingAllocator) -> None:
    s1 = acc.Stream(D1)
    x = acc.zeros(1 << 20, device=D0)
    with _gate(s1) as gate:
        x.record_stream(s1)
        del x
        syncs = memory.memory_stats(D0)["num_sync_all_streams"]
        with open_when_blocked(gate):
            alloc.empty_cache()
            assert gate.event.is_set()          # it waited for device 1's event
    assert memory.memory_reserved(D0) == 0
    assert memory.memory_stats(D0)["num_sync_all_streams"] == syncs + 1
    s1.close()


def test_a_free_queued_by_a_finalizer_settles_with_the_other_devices_event(
        alloc: DeviceCachingAllocator) -> None:
    s1 = acc.Stream(D1)
    x = acc.zeros(128, device=D0)
    ptr, n = x.data_ptr(), x.nbytes
    x.record_stream(s1)
    mem = x._mem
    with _gate(s1) as gate:
        with alloc._lock:                       # as if the GC ran the finalizer in here
            del x
            mem.__del__()                       # queued: the lock is held
            mem.alloc = None
        assert memory.memory_allocated(D0) == 0     # the getter completed the queued free
        assert list(alloc._stream_frees.events) == [(1, s1.stream_id)]
        assert not _reuses(ptr, n)
        gate.open()
        s1.synchronize()
        assert _reuses(ptr, n)
    s1.close()


def test_a_free_during_a_capture_records_the_other_devices_event_after_it(
        alloc: DeviceCachingAllocator, monkeypatch: pytest.MonkeyPatch) -> None:
    from accelrt import _device
    monkeypatch.setattr(_device, "_current_backend", backends.get_backend(NAME))
    monkeypatch.setattr(_device, "_current_name", NAME)
    s1, side = acc.Stream(D1), acc.Stream(D0)
    x, y = acc.zeros(64, device=D0), acc.zeros(8, device=D0)
    ptr, n = x.data_ptr(), x.nbytes
    g = acc.Graph()
    with _gate(s1) as gate:
        x.record_stream(s1)
        with side, g:
            _ = y.fill_(1.0)
            del x                               # deferred until the capture ends
            assert len(alloc._stream_frees.deferred) == 1
            assert not alloc._stream_frees.events
        assert not _reuses(ptr, n)              # events recorded (on device 1) at this malloc
        assert list(alloc._stream_frees.events) == [(1, s1.stream_id)]
        gate.open()
        s1.synchronize()
        assert _reuses(ptr, n)
    g.reset()
    y.close()
    s1.close()
    side.close()


def test_a_private_pool_waits_for_the_other_device_when_emptied(
        alloc: DeviceCachingAllocator) -> None:
    s1 = acc.Stream(D1)
    pool = memory.MemPool()
    with memory.use_mem_pool(pool, device=D0):
        x = acc.zeros(256, device=D0)
    y = acc.zeros(256, device=D0)               # the default pool's, also on device 1
    pid = pool.id
    with _gate(s1) as gate:
        x.record_stream(s1)
        y.record_stream(s1)
        del x, y
        assert [s["segment_pool_id"] for s in alloc.snapshot_segments(pid)] == [pid]
        with open_when_blocked(gate):
            del pool                            # ~MemPool: empty_cache(pool id)
            gc.collect()
            memory.memory_reserved(D0)          # a drain point: the pool's events synchronized
            assert gate.event.is_set()
        assert alloc.snapshot_segments(pid) == []
        # the default pool's free was left to its event (process_events at a malloc)
        assert sum(len(q) for q in alloc._stream_frees.events.values()) == 1
    s1.synchronize()
    s1.close()


def test_uncached_requests_wait_for_the_other_devices_stream(
        alloc: DeviceCachingAllocator) -> None:
    s1 = acc.Stream(D1)
    alloc.set_caching(False)
    try:
        x = acc.zeros(256, device=D0)
        with _gate(s1) as gate:
            x.record_stream(s1)
            with open_when_blocked(gate):
                x.close()                       # the uncached free waits for device 1's stream
                assert gate.event.is_set()
    finally:
        alloc.set_caching(True)
    s1.close()


def test_malloc_async_unifying_stream_waits_for_the_other_device() -> None:
    name = f"xdevasync{next(_names)}"
    with malloc_async_backend(name, lambda: CpuBackend(num_devices=2, async_streams=True,
                                                       name=name)):
        s1 = acc.Stream(f"{name}:1")
        x = acc.zeros(256, device=f"{name}:0")
        with _gate(s1) as gate:
            x.record_stream(s1)
            assert x._mem.alloc._live[x.data_ptr()].recorded == [(1, s1.stream_id)]
            x.close()                           # freed on a stream that waits for device 1
            with open_when_blocked(gate):
                acc.synchronize(f"{name}:0")
                assert gate.event.is_set()
        s1.close()
        acc.synchronize(f"{name}:1")


# ---------------------------------------------------------------------- property

#: the streams a block may be recorded on: device 0's allocation stream (ignored), a side
#: stream of device 0, a stream of device 1 and device 1's default stream (handle 0, as the
#: allocation stream's: a use of another device, never mistaken for it)
_KEYS = ("alloc0", "side0", "side1", "default1")
#: allocations, uses and frees weighted over the gates' changes, so that most sequences free
#: a block recorded on a gated stream
_ops = st.lists(st.one_of(
    st.tuples(st.just("malloc")),
    st.tuples(st.just("record"), st.integers(0, 7), st.sampled_from(_KEYS)),
    st.tuples(st.just("record"), st.integers(0, 7), st.sampled_from(_KEYS)),
    st.tuples(st.just("free"), st.integers(0, 7)),
    st.tuples(st.just("close_gate"), st.sampled_from(_KEYS[1:])),
    st.tuples(st.just("open_gate"), st.sampled_from(_KEYS[1:])),
), max_size=30)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(closed=st.sets(st.sampled_from(_KEYS[1:])), ops=_ops)
@example(closed={"side0", "side1", "default1"},   # the cases a random run may miss
         ops=[("malloc",), ("record", 0, "side1"), ("record", 0, "alloc0"), ("free", 0),
              ("malloc",), ("record", 0, "default1"), ("record", 0, "side0"), ("free", 0),
              ("malloc",), ("open_gate", "side0"), ("open_gate", "default1"),
              ("open_gate", "side1"), ("free", 0)])
def test_pending_frees_match_a_model(alloc: DeviceCachingAllocator, closed: set[str],
                                     ops: list[tuple[object, ...]]) -> None:
    """Mixed uses of device 0's and device 1's streams, gated at random: after each step (and
    process_events) a freed block is still active exactly while a stream it was recorded on
    had its gate closed at the free and has not been opened since."""
    b = backends.get_backend(NAME)
    s = {"alloc0": (0, 0), "side0": (0, b.stream_create(0, 0)),
         "side1": (1, b.stream_create(1, 0)), "default1": (1, 0)}
    gates: dict[str, threading.Event] = {}
    live: list[tuple[int, set[str]]] = []      # (ptr, recorded keys)
    pending: list[set[str]] = []               # the closed gates each pending free waits for
    size = 512
    try:
        for op in [*(("close_gate", k) for k in sorted(closed)), *ops]:
            kind = op[0]
            if kind == "malloc":
                live.append((alloc.malloc(size, 0), set()))
            elif kind == "record" and live:
                ptr, keys = live[int(op[1]) % len(live)]   # type: ignore[call-overload]
                dev, h = s[str(op[2])]
                alloc.record_stream(ptr, h, dev)
                keys.add(str(op[2]))
            elif kind == "free" and live:
                ptr, keys = live.pop(int(op[1]) % len(live))   # type: ignore[call-overload]
                alloc.free(ptr)
                for k in keys - set(gates):     # ungated: its event completes now
                    b.stream_synchronize(*s[k])
                waits = (keys - {"alloc0"}) & set(gates)
                if waits:
                    pending.append(waits)
            elif kind == "close_gate" and op[1] not in gates:
                gate = gates[str(op[1])] = threading.Event()
                dev, h = s[str(op[1])]
                b.launch_host_func(dev, gate.wait, h)
            elif kind == "open_gate" and op[1] in gates:
                gates.pop(str(op[1])).set()
                b.stream_synchronize(*s[str(op[1])])
                pending = [w - {str(op[1])} for w in pending]
                pending = [w for w in pending if w]
            with alloc._lock:
                alloc._stream_frees.process()
            st_ = alloc.stats()
            assert st_["allocated_bytes.all.current"] == size * len(live)
            assert st_["active_bytes.all.current"] == size * (len(live) + len(pending))
    finally:
        for gate in gates.values():
            gate.set()
        for ptr, _ in live:
            alloc.free(ptr)
        b.synchronize(1)
        b.synchronize(0)
        alloc.empty_cache()
        b.stream_destroy(0, s["side0"][1])
        b.stream_destroy(1, s["side1"][1])
    assert alloc.memory_reserved() == 0


@pytest.mark.parametrize("device", [0, 1])
def test_an_uncached_free_after_its_recorded_stream_was_destroyed(
        alloc: DeviceCachingAllocator, device: int) -> None:
    # before: stream_synchronize on the destroyed handle raised ValueError from the free, and
    # the request (already forgotten) was never given back to the backend
    b = backends.get_backend(NAME)
    free_before = b.get_memory_info(0)[0]
    h = b.stream_create(device, 0)
    alloc.set_caching(False)
    try:
        p = alloc.malloc(4096, 0)
        with Gate() as gate:
            b.launch_host_func(device, gate, h)
            alloc.record_stream(p, h, device)
            b.stream_destroy(device, h)         # its queued work (the gate) still runs
            with open_when_blocked(gate):
                alloc.free(p)                   # waits for every stream of that device
                assert gate.event.is_set()
    finally:
        alloc.set_caching(True)
    assert len(alloc._uncached) == 0
    assert b.get_memory_info(0)[0] == free_before
