"""Review by tests (s25): what a hostile third-party backend returns is checked where the core
keeps it (``accelrt._checked``): ``event_create``, ``event_from_ipc_handle``, ``vm_reserve``,
``vm_granularity``, ``mempool_alloc_async``, ``host_malloc``, ``graph_capture_end``,
``graph_instantiate``, ``event_ipc_handle``, ``ipc_mem_handle``, ``ipc_open_mem_handle``,
``default_stream`` and ``stream_priority_range``, as ``malloc`` and ``stream_create`` were.
A wrong type, a negative value, ``0`` where ``0`` means failure and a handle the core holds
already each raise ``DeviceError`` naming the backend and the call, and leave the caller's
state (the allocator's statistics and segments, the event, the graph) as it was.
"""

from __future__ import annotations

import gc
import pickle
import re
import uuid
from collections.abc import Callable, Iterator
from multiprocessing.reduction import ForkingPickler
from typing import Any

import pytest

from helpers.registry import malloc_async

import accelrt as acc
import accelrt.multiprocessing as amp
from accelrt.backends.cpu import CpuBackend
from accelrt.memory import _config
from accelrt.memory._allocator import get_allocator
from accelrt.memory._host import HostCachingAllocator
from accelrt.testing import SimulatedBackend

#: Bad results: a wrong type, a float, a negative int, a value past 2**64.
BAD = [("s", "'s'"), (4096.5, "4096.5"), (-8, "-8"), (1 << 64, hex(1 << 64)), (None, "None"),
       (True, "True")]


@pytest.fixture
def reg() -> Iterator[Callable[..., str]]:
    """register(base_class, **methods) under a fresh name: a hostile subclass; unregistered
    at the end."""
    names: list[str] = []

    def add(base: type[Any], kwargs: dict[str, Any] | None = None, **methods: Any) -> str:
        name = "hostile_" + uuid.uuid4().hex[:8]
        cls = type("Hostile", (base,), methods)
        acc.backends.register(name, lambda: cls(name=name, **(kwargs or {})))
        names.append(name)
        return name

    yield add
    for n in names:
        acc.backends.unregister(n)


def _returning(value: Any, op: str) -> Callable[..., Any]:
    """A backend operation that returns ``value`` (called: ``value(self, *args)``)."""
    def method(self: Any, *args: Any) -> Any:
        return value(self, *args) if callable(value) else value
    method.__name__ = op
    return method


# ---------------------------------------------------------------------- events

@pytest.mark.parametrize(("value", "shown"), [*BAD, (0, "0x0")])
def test_bad_event_handle_is_refused_and_the_event_stays_unrecorded(
        reg: Any, value: Any, shown: str) -> None:
    name = reg(SimulatedBackend, event_create=_returning(value, "event_create"))
    e = acc.Event(f"{name}:0")
    with pytest.raises(acc.DeviceError, match=rf"the {name} backend's event_create\(0, "
                                              rf"False, False, False\) returned {shown}") as info:
        e.record()
    assert "not an event handle" in str(info.value)
    assert e.event_id == 0 and e.query()          # nothing recorded: still "complete"
    e.close()


def _same_handle(self: Any, *args: Any) -> int:
    """``event_create`` of a backend whose every event gets the handle 5 (fine once the last
    one was destroyed; broken while it lives)."""
    with self._lock:
        self._events[5] = None
    return 5


def test_event_handle_of_a_live_event_is_refused(reg: Any) -> None:
    name = reg(SimulatedBackend, event_create=_same_handle)
    a, b = acc.Event(f"{name}:0"), acc.Event(f"{name}:0")
    a.record()
    with pytest.raises(acc.DeviceError, match=f"{name} backend's event_create.*returned 0x5, "
                                              "the handle of an event that is still live"):
        b.record()
    assert b.event_id == 0 and a.event_id == 5
    s = acc.Stream(f"{name}:0")
    with pytest.raises(acc.DeviceError, match="event_create.*still live"):
        s.wait_stream(acc.current_stream(f"{name}:0"))    # a temporary event: checked too
    a.synchronize()                               # the live event is untouched
    a.close()                                     # the handle is free again: taken
    b.record()
    assert b.event_id == 5
    b.close()
    s.close()


def test_a_destroyed_event_handle_may_come_back(reg: Any) -> None:
    """A backend that gives a destroyed event's handle to its next event is fine."""
    name = reg(SimulatedBackend, event_create=_same_handle)
    for _ in range(3):
        e = acc.Event(f"{name}:0")
        e.record()
        assert e.event_id == 5
        e.close()
    e = acc.Event(f"{name}:0")
    e.record()
    del e
    gc.collect()
    acc.Event(f"{name}:0").record()               # the collected one gave it back too


def test_allocator_events_are_checked(reg: Any) -> None:
    """The caching allocator's events of record_stream: refused before any is kept; the free
    completes without waiting for an event (the allocator stays consistent)."""
    name = reg(SimulatedBackend, event_create=_returning(-1, "event_create"))
    a = get_allocator(acc.backends.get_backend(name), 0)
    s = acc.Stream(f"{name}:0")
    p = a.malloc(512, 0)
    a.record_stream(p, s.stream_id)
    with pytest.raises(acc.DeviceError, match=rf"{name} backend's event_create\(0, False, "
                                              r"False, False\) returned -1, not an event"):
        a.free(p)
    assert a.memory_allocated() == 0
    assert a.malloc(512, 0) == p                  # cached at once: no event to wait for
    a.free(p)
    a.empty_cache()
    s.close()


def test_host_pool_events_and_host_malloc_are_checked() -> None:
    class Hostile(SimulatedBackend):
        results: list[Any] = []

        def host_malloc(self, size: int) -> Any:
            return self.results.pop(0) if self.results else super().host_malloc(size)

        def event_create(self, *args: Any) -> Any:
            return "ev"

    b = Hostile(name="hostilehost")
    pool = HostCachingAllocator(b)
    for bad, shown in [("p", "'p'"), (-1, "-1"), (1.5, "1.5")]:
        Hostile.results.append(bad)
        with pytest.raises(acc.DeviceError, match=rf"hostilehost backend's host_malloc\(\d+\) "
                                                  rf"returned {shown}, not an address"):
            pool.malloc(100)
        assert pool.stats()["allocations.current"] == 0 and pool.stats()["num_host_alloc"] == 0
    p = pool.malloc(100)
    Hostile.results.append(p)                     # the address of a live block
    with pytest.raises(acc.DeviceError, match="host_malloc.*not freed"):
        pool.malloc(5000)
    Hostile.results.append(0)                     # out of memory, twice: the pool's own error
    Hostile.results.append(0)
    with pytest.raises(acc.OutOfMemoryError):
        pool.malloc(1 << 20)
    pool.record_event(p, type("S", (), {"_index": 0, "_handle": 7})())
    with pytest.raises(acc.DeviceError, match="event_create.*'ev', not an event handle"):
        pool.free(p)
    pool.empty_cache()


# ---------------------------------------------------------------------- virtual memory

@pytest.fixture
def expandable() -> Iterator[None]:
    saved = _config.get_config()
    _config._reset_for_tests(_config.parse_config("expandable_segments:True", saved))
    try:
        yield
    finally:
        _config._reset_for_tests(saved)


@pytest.mark.parametrize(("value", "shown"), [*BAD, (0, "0x0")])
def test_bad_reservation_is_refused_and_nothing_is_recorded(reg: Any, expandable: None,
                                                            value: Any, shown: str) -> None:
    name = reg(SimulatedBackend, vm_reserve=_returning(value, "vm_reserve"))
    dev = f"{name}:0"
    with pytest.raises(acc.DeviceError, match=rf"{name} backend's vm_reserve\(0, \d+\) "
                                              rf"returned {shown}, not an address"):
        acc.empty(1024, device=dev)
    assert acc.memory.memory_reserved(dev) == 0 and acc.memory.memory_allocated(dev) == 0
    assert acc.memory.memory_stats(dev).get("num_alloc_retries", 0) == 0


def test_overlapping_reservation_is_refused(reg: Any, expandable: None) -> None:
    given: list[int] = []

    def reserve(self: Any, index: int, size: int) -> int:
        if not given:
            given.append(SimulatedBackend.vm_reserve(self, index, size))
        return given[0]                           # every reservation at the first one's base

    name = reg(SimulatedBackend, vm_reserve=reserve)
    dev = f"{name}:0"
    a = acc.empty(1024, device=dev)               # the small pool's reservation
    reserved = acc.memory.memory_reserved(dev)
    with pytest.raises(acc.DeviceError, match=f"{name} backend's vm_reserve.*{given[0]:#x}, "
                                              "an address range that overlaps"):
        acc.empty(4 << 20, device=dev, dtype="uint8")    # the large pool's: a new one
    assert acc.memory.memory_reserved(dev) == reserved
    assert acc.memory.memory_allocated(dev) == 1024 * 4
    del a
    acc.backends.device_module(name).empty_cache()
    assert acc.memory.memory_reserved(dev) == 0


@pytest.mark.parametrize(("value", "words"), [(0, "0 must be > 0"), (3 << 20, "power of two"),
                                              ("2MiB", "not a size")])
def test_bad_granularity_is_refused(reg: Any, expandable: None, value: Any,
                                   words: str) -> None:
    name = reg(SimulatedBackend, vm_granularity=_returning(value, "vm_granularity"))
    dev = f"{name}:0"
    with pytest.raises(acc.DeviceError, match=f"{name} backend's vm_granularity.*{words}"):
        acc.empty(1024, device=dev)
    assert acc.memory.memory_reserved(dev) == 0


# ---------------------------------------------------------------------- stream-ordered pool

@pytest.fixture
def async_pool() -> Iterator[None]:
    with malloc_async():
        yield


@pytest.mark.parametrize(("value", "shown"), BAD)
def test_bad_stream_ordered_allocation_is_refused(reg: Any, async_pool: None, value: Any,
                                                  shown: str) -> None:
    name = reg(CpuBackend, mempool_alloc_async=_returning(value, "mempool_alloc_async"))
    dev = f"{name}:0"
    with pytest.raises(acc.DeviceError, match=rf"{name} backend's mempool_alloc_async\(0, "
                                              rf"1024, 0\) returned {shown}, not an address"):
        acc.empty(256, device=dev)
    assert acc.memory.memory_allocated(dev) == 0


def test_stream_ordered_address_in_use_is_refused(reg: Any, async_pool: None) -> None:
    first: list[int] = []

    def alloc(self: Any, index: int, size: int, stream: int) -> int:
        if not first:
            first.append(CpuBackend.mempool_alloc_async(self, index, size, stream))
        return first[0]

    name = reg(CpuBackend, mempool_alloc_async=alloc)
    dev = f"{name}:0"
    a = acc.empty(256, device=dev)
    with pytest.raises(acc.DeviceError, match=f"mempool_alloc_async.*{first[0]:#x}.*not freed"):
        acc.empty(256, device=dev)
    assert acc.memory.memory_allocated(dev) == 1024
    del a
    acc.backends.device_module(name).synchronize()
    acc.backends.device_module(name).empty_cache()


# ---------------------------------------------------------------------- graphs

@pytest.mark.parametrize(("value", "shown"), [*BAD, (0, "0x0")])
def test_bad_graph_handle_is_refused_and_the_pool_released(reg: Any, value: Any,
                                                           shown: str) -> None:
    bad = [value]

    def end(self: Any, index: int, stream: int) -> Any:
        h = CpuBackend.graph_capture_end(self, index, stream)
        if not bad:
            return h
        self.graph_destroy(index, h)
        return bad.pop()                          # once

    name = reg(CpuBackend, graph_capture_end=end)
    mod = acc.backends.device_module(name)
    g = mod.Graph()
    x = acc.zeros(4, device=f"{name}:0")
    with pytest.raises(acc.DeviceError, match=rf"{name} backend's graph_capture_end\(0, \d+\) "
                                              rf"returned {shown}, not a graph handle"):
        with mod.graph(g):
            x.fill_(1.0)
    assert not mod.is_current_stream_capturing()
    g.reset()                                     # what the failed capture kept goes
    with mod.graph(g):                            # and the graph captures again
        x.fill_(1.0)
    g.replay()
    mod.synchronize()
    assert x.tolist() == [1.0] * 4
    g.reset()


def test_graph_handle_of_a_live_graph_is_refused(reg: Any) -> None:
    first: list[int] = []

    def end(self: Any, index: int, stream: int) -> int:
        h = CpuBackend.graph_capture_end(self, index, stream)
        if first:
            self.graph_destroy(index, h)
            return first[0]
        first.append(h)
        return h

    name = reg(CpuBackend, graph_capture_end=end)
    mod = acc.backends.device_module(name)
    x = acc.zeros(4, device=f"{name}:0")
    kept, other = mod.Graph(), mod.Graph()
    with mod.graph(kept):
        x.fill_(1.0)
    with pytest.raises(acc.DeviceError, match=f"graph_capture_end.*{first[0]:#x}.*still live"):
        with mod.graph(other):
            x.fill_(2.0)
    other.reset()
    kept.replay()                                 # the live graph is untouched
    mod.synchronize()
    assert x.tolist() == [1.0] * 4
    kept.reset()


@pytest.mark.parametrize(("value", "shown"), BAD)
def test_bad_executable_graph_id_is_refused(reg: Any, value: Any, shown: str) -> None:
    name = reg(CpuBackend, graph_instantiate=_returning(value, "graph_instantiate"))
    mod = acc.backends.device_module(name)
    g = mod.Graph(keep_graph=True)
    x = acc.zeros(4, device=f"{name}:0")
    with mod.graph(g):
        x.fill_(1.0)
    with pytest.raises(acc.DeviceError, match=rf"graph_instantiate\(0, \d+\) returned "
                                              rf"{shown}, not an executable graph id"):
        g.instantiate()
    g.reset()


# ---------------------------------------------------------------------- interprocess

@pytest.mark.parametrize(("value", "shown"), [(b"", "b''"), ("h", "'h'"), (7, "0x7")])
def test_bad_event_ipc_handle_is_refused(reg: Any, value: Any, shown: str) -> None:
    name = reg(CpuBackend, event_ipc_handle=_returning(value, "event_ipc_handle"))
    e = acc.Event(f"{name}:0", interprocess=True)
    with pytest.raises(acc.DeviceError, match=rf"event_ipc_handle\(0, \d+\) returned {shown}, "
                                              r"not an interprocess handle"):
        e.ipc_handle()
    e.close()


def test_opened_event_handle_is_checked(reg: Any) -> None:
    name = reg(CpuBackend, event_from_ipc_handle=_returning(0, "event_from_ipc_handle"))
    e = acc.Event(f"{name}:0", interprocess=True)
    e.record()
    handle = e.ipc_handle()
    # the handle's repr, not a pattern of it: random bytes with a quote print as b"..."
    with pytest.raises(acc.DeviceError, match=re.escape(f"event_from_ipc_handle(0, {handle!r}) "
                                                        "returned 0x0, not an event handle")):
        acc.Event.from_ipc_handle(f"{name}:0", handle)
    e.close()


@pytest.mark.parametrize(("method", "value", "words"), [
    ("ipc_mem_handle", b"", "ipc_mem_handle.*returned b'', not an interprocess handle"),
    ("ipc_mem_handle", "seg", "ipc_mem_handle.*returned 'seg', not an interprocess handle"),
    ("ipc_open_mem_handle", 4096, r"ipc_open_mem_handle.*returned 0x1000, not a \(pointer, "),
    ("ipc_open_mem_handle", (0, 64), "ipc_open_mem_handle.*returned 0x0, not an address"),
    ("ipc_open_mem_handle", (4096, -1), "ipc_open_mem_handle.*returned -1, not a size"),
])
def test_bad_interprocess_memory_results_are_refused(reg: Any, method: str, value: Any,
                                                     words: str) -> None:
    name = reg(CpuBackend, {"shared_memory": True}, **{method: _returning(value, method)})
    a = acc.full((16,), 3.0, device=f"{name}:0")
    with pytest.raises(acc.DeviceError, match=words):
        pickle.loads(ForkingPickler.dumps(a))
    del a
    gc.collect()
    amp.ipc_collect()


# ---------------------------------------------------------------------- streams

@pytest.mark.parametrize(("value", "shown"), BAD)
def test_bad_default_stream_is_refused(reg: Any, value: Any, shown: str) -> None:
    name = reg(SimulatedBackend, default_stream=_returning(value, "default_stream"))
    with pytest.raises(acc.DeviceError, match=rf"{name} backend's default_stream\(0\) returned "
                                              rf"{shown}, not a stream handle"):
        acc.current_stream(f"{name}:0")


@pytest.mark.parametrize("value", [(0,), ("0", "-1"), None, [0, -1]])
def test_bad_priority_range_is_refused(reg: Any, value: Any) -> None:
    name = reg(SimulatedBackend, stream_priority_range=_returning(value,
                                                                  "stream_priority_range"))
    with pytest.raises(acc.DeviceError, match=r"stream_priority_range\(0\) returned .*not a "
                                              r"\(least, greatest\) pair of ints"):
        acc.Stream(f"{name}:0")


@pytest.mark.parametrize(("value", "shown"), [(-5, "-5"), (1 << 64, hex(1 << 64))])
def test_stream_handle_out_of_range_is_refused(reg: Any, value: Any, shown: str) -> None:
    def create(self: Any, index: int, priority: int) -> Any:
        return value

    name = reg(SimulatedBackend, stream_create=create)
    with pytest.raises(acc.DeviceError, match=rf"stream_create\(0, 0\) returned {shown}, not a "
                                              r"stream handle"):
        acc.Stream(f"{name}:0")


def test_a_mapping_opened_with_a_bad_size_is_closed(reg: Any) -> None:
    """A backend that maps the segment but answers a bad size: the mapping it made at the good
    address is closed again when the result is refused (it stayed open for good)."""
    closed: list[tuple[int, int]] = []

    def open_handle(self: Any, index: int, handle: bytes) -> Any:
        base, _ = CpuBackend.ipc_open_mem_handle(self, index, handle)
        return (base, -1)

    def close_handle(self: Any, index: int, base: int) -> None:
        closed.append((index, base))
        CpuBackend.ipc_close_mem_handle(self, index, base)

    name = reg(CpuBackend, {"shared_memory": True}, ipc_open_mem_handle=open_handle,
               ipc_close_mem_handle=close_handle)
    a = acc.full((16,), 3.0, device=f"{name}:0")
    with pytest.raises(acc.DeviceError, match="ipc_open_mem_handle.*returned -1, not a size"):
        pickle.loads(ForkingPickler.dumps(a))
    assert len(closed) == 1 and closed[0][0] == 0 and closed[0][1] != 0
    del a
    gc.collect()
    amp.ipc_collect()
