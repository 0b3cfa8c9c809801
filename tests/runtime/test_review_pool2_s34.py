"""Review of the held-handle tables, the unifying free stream and replaced instances (session
34, second round).

1. ``_checked.held()`` made a device's table under a non-reentrant lock: a finaliser run by a
   collection there (an allocation's free, ordering raw streams through a temporary event)
   that needed the table of a device not made yet took the lock again: a deadlock.
2. The stream-ordered allocator's free of an allocation with recorded streams
   (``_free_unified``) gave its unifying stream back to a full pool (``_POOL_MAX`` ignored);
   and it made the device's pool (and its default stream object) under the allocator's lock,
   taking the pools' lock there: a thread holding the pools' lock whose collection frees an
   allocation (waiting for the allocator's lock) deadlocked with it.
3. ``Array.record_stream`` with a stream of the instance that replaced the array's backend
   under its name said "the stream is on racex:0 but the array is on racex:0".
4. ``Event.record()`` without a stream, for an event of a replaced instance, stored the old
   instance's default stream in the name's table of default streams, replacing the
   registered instance's.

The hangs run in subprocesses with a timeout; the orders between threads are set with events.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from helpers.registry import malloc_async_backend

import accelrt as acc
from accelrt import _stream, _stream_core, backends, memory
from accelrt.backends.cpu import CpuBackend

_names = itertools.count()


def _run(code: str) -> str:
    """``code`` in a fresh interpreter under ``backend:cudaMallocAsync``; its output."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=60,
                          env=dict(os.environ, ACCELRT_ALLOC_CONF="backend:cudaMallocAsync"))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# ------------------------------------------------------------------ 1. the held tables' lock

def test_a_finaliser_needing_a_new_held_table_inside_the_tables_lock() -> None:
    # before: a hang (the finaliser's held(plain, 0) took the non-reentrant lock again)
    out = _run("""
        import gc
        import accelrt as acc
        from accelrt import _checked, backends, memory
        from accelrt.backends.cpu import CpuBackend

        class Hashing(CpuBackend):
            # a full collection at the second hash once armed: held()'s lookup of the
            # instance is the first, its insert in the table under the lock the second
            armed = 0

            def __hash__(self):
                n = type(self).armed
                if n:
                    type(self).armed = n - 1
                    if n == 1:
                        gc.collect()
                return object.__hash__(self)

        inside = []

        class Cycle:
            # only a collection frees it (it refers to itself), and the array it holds
            def __init__(self, held):
                self.me, self.held = self, held

            def __del__(self):
                lock = _checked._lock
                inside.append(lock._is_owned() if hasattr(lock, "_is_owned")
                              else lock.locked())

        backends.register("hashing", lambda: Hashing(name="hashing"))
        backends.register("plain", lambda: CpuBackend(name="plain"))
        hb, pb = backends.get_backend("hashing"), backends.get_backend("plain")
        s = acc.Stream("plain:0")
        x = acc.zeros(16, device="plain:0")
        x.record_stream(s)       # its free orders streams through a temporary event
        assert pb not in _checked._held and hb not in _checked._held
        Cycle(x)
        del x
        gc.disable()
        Hashing.armed = 2
        _checked.temporary_event(hb, 0, 5)   # the first table of hashing: x freed inside
        print(inside, memory.memory_allocated("plain:0"), pb in _checked._held)
    """)
    assert out.split() == ["[True]", "0", "True"]


# ------------------------------------------------------------------ 2. the unifying stream

@pytest.fixture
def pooled() -> Iterator[str]:
    """A fresh cpu backend under backend:cudaMallocAsync."""
    name = f"unify{next(_names)}"
    with malloc_async_backend(name, lambda: CpuBackend(name=name)):
        yield name


@pytest.mark.parametrize("pool_max", [0, 1])
def test_the_unifying_stream_respects_the_pool_size(monkeypatch: pytest.MonkeyPatch,
                                                    pooled: str, pool_max: int) -> None:
    # before: given back with free0.append whatever the pool size (a list longer than it)
    monkeypatch.setattr(_stream_core, "_POOL_MAX", pool_max)
    b = backends.get_backend(pooled)
    s = acc.Stream(pooled)
    pool = _stream._pools[b][0]
    for _ in range(3):   # fill the free list to its size
        acc.Stream(pooled).close()
    assert len(pool.free0) == pool_max
    live = b.live_handles()["streams"]
    for _ in range(2):
        x = acc.zeros(16, device=pooled)
        x.record_stream(s)
        x.close()                       # freed on a unifying stream of the pool
        assert len(pool.free0) == pool_max
        assert b.live_handles()["streams"] == live
    assert memory.memory_allocated(f"{pooled}:0") == 0
    s.close()


LOCK_ORDER = '''
import threading
import accelrt as acc
from accelrt import _stream, _stream_core, backends, memory
from accelrt.backends.cpu import CpuBackend

in_a, b_holds = threading.Event(), threading.Event()


class Hooked(CpuBackend):
    hooked = None    # the method that, once set, stops thread A inside it (see below)

    def _stop(self, method):
        if type(self).hooked == method and threading.current_thread().name == "A":
            in_a.set()         # thread A holds the allocator's lock here
            b_holds.wait()     # until thread B holds the pools' lock

    def stream_priority_range(self, index):
        self._stop("stream_priority_range")
        return super().stream_priority_range(index)

    def default_stream(self, index):
        self._stop("default_stream")
        return super().default_stream(index)


backends.register("plain", lambda: Hooked(name="plain"))
b = backends.get_backend("plain")
w1, w2 = (acc.Stream(stream_id=b.stream_create(0, 0), device_index=0, device_type="plain")
          for _ in range(2))
with w1:   # (neither the device's pool nor its default stream object is made)
    x1 = acc.zeros(16, device="plain:0")
    x2 = acc.zeros(16, device="plain:0")
x1.record_stream(w2)   # x1's free waits for w2 on a unifying stream of the pool
Hooked.hooked = HOOKED


def a():
    try:
        x1.close()     # the allocator's lock, then (before) the pools' lock
    finally:
        in_a.set()


def c():
    in_a.wait()
    with _stream._pools_lock:
        b_holds.set()
        x2.close()     # as a finaliser run by a collection here would: the allocator's lock


threads = [threading.Thread(target=a, name="A"), threading.Thread(target=c, name="B")]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(memory.memory_allocated("plain:0"))
'''


@pytest.mark.parametrize("hooked", ["stream_priority_range", "default_stream"])
def test_no_pools_lock_under_the_allocators_lock(hooked: str) -> None:
    # before: a hang; thread A made the device's pool (stream_priority_range) or its default
    # stream object (default_stream, for the new unifying stream) under the allocator's lock,
    # then waited for the pools' lock that B holds while B waits for the allocator's lock
    out = _run(LOCK_ORDER.replace("HOOKED", repr(hooked)))
    assert out.split() == ["0"]


def test_the_free_of_an_instance_the_name_no_longer_names(pooled: str) -> None:
    # its pool was dropped: the free synchronizes instead of making the pool again (which
    # would keep the old instance alive)
    s = acc.Stream(pooled)
    x = acc.zeros(16, device=pooled)
    x.record_stream(s)
    old, alloc = s._b, x._mem.alloc
    backends.register(pooled, lambda: CpuBackend(name=pooled), replace=True)
    assert old not in _stream._pools
    streams = old.live_handles()["streams"]
    x.close()
    assert old not in _stream._pools
    assert old.live_handles()["streams"] == streams   # no unifying stream made
    assert alloc._used == 0 and not alloc._live
    s.close()


# ------------------------------------------------------------------ 3, 4. replaced instances

@pytest.fixture
def replaced() -> Iterator[str]:
    """A backend name whose first instance was replaced (register(..., replace=True))."""
    name = f"racez{next(_names)}"
    backends.register(name, lambda: CpuBackend(name=name))
    yield name
    backends.unregister(name)


def test_record_stream_across_two_instances_of_one_name_says_which_is_replaced(
        replaced: str) -> None:
    x1, s1 = acc.zeros(4, device=replaced), acc.Stream(replaced)
    backends.register(replaced, lambda: CpuBackend(name=replaced), replace=True)
    x2, s2 = acc.zeros(4, device=replaced), acc.Stream(replaced)
    why = (f"record_stream(): the stream is on {replaced}:0 but the array is on {replaced}:0. "
           f"The array and the stream are of two different backend instances registered under "
           f"that one name (register({replaced!r}, ..., replace=True) or "
           f"unregister({replaced!r}) came in between): the {{0}} is of an instance that "
           f"{replaced!r} no longer names. Make the {{0}} again.")
    with pytest.raises(ValueError) as exc:
        x1.record_stream(s2)
    assert str(exc.value) == why.format("array")
    with pytest.raises(ValueError) as exc:
        x2.record_stream(s1)
    assert str(exc.value) == why.format("stream")
    for s in (s1, s2):
        s.close()


def test_record_stream_of_another_backend_keeps_its_message() -> None:
    # A stream of another device of the same backend is recorded since s39 (as torch's
    # recordStream takes a CUDAStream of any device: tests/memory/test_record_stream_xdev_s39.py);
    # one of another backend is still refused, with this message.
    name = f"twodev{next(_names)}"
    backends.register(name, lambda: CpuBackend(num_devices=2, name=name))
    x, s = acc.zeros(4, device=f"{name}:0"), acc.Stream(f"{name}:1")
    x.record_stream(s)
    assert x._mem.alloc._blocks[x.data_ptr()].stream_uses == {(1, s.stream_id)}
    other = acc.Stream("cpu:0")
    with pytest.raises(ValueError) as exc:
        x.record_stream(other)
    assert str(exc.value) == (f"record_stream(): the stream is on cpu:0 but the array is "
                              f"on {name}:0; pass a stream of the array's backend (any of its "
                              f"devices)")
    s.close()
    other.close()
    del x
    backends.unregister(name)


def test_recording_an_event_of_a_replaced_instance_keeps_the_default_stream_table(
        replaced: str) -> None:
    e1 = acc.Event(replaced)
    old = e1._b
    backends.register(replaced, lambda: CpuBackend(name=replaced), replace=True)
    new = backends.get_backend(replaced)
    d = acc.current_stream(replaced)       # the registered instance's, stored in the table
    assert d._b is new and _stream_core._default_of(replaced, 0) is d
    for _ in range(2):
        e1.record()                        # on a default stream of the old instance
        assert _stream_core._default_of(replaced, 0) is d
        assert acc.current_stream(replaced) is d
    e1.synchronize()
    assert e1._b is old
    e2 = acc.Event(replaced)
    e2.record()                            # the table's stream: the registered instance's
    assert _stream_core._default_of(replaced, 0) is d
    for e in (e1, e2):
        e.close()


def test_an_old_instances_default_stream_first_made_is_not_stored(replaced: str) -> None:
    # the old instance's default stream was never made: neither is the new one's
    e1 = acc.Event(replaced)
    backends.register(replaced, lambda: CpuBackend(name=replaced), replace=True)
    e1.record()
    assert _stream_core._default_of(replaced, 0) is None
    new = backends.get_backend(replaced)
    assert acc.current_stream(replaced)._b is new
    e1.close()
