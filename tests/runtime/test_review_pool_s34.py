"""Review of the stream pools and events (session 34).

1. A stream's finaliser (or an allocation's free) run by a collection inside a region of the
   same thread that holds ``_stream._pools_lock`` took that lock again: with the pool full,
   ``_give_back`` called ``_stream._pool()``, which locked a non-reentrant lock, a deadlock.
   The hangs are tested in subprocesses with a timeout; the collection runs where a backend's
   ``stream_priority_range`` runs (the core calls it while it makes a device's pool).
2. A full pool that ``_forget_backend`` dropped was made again for the old instance (kept
   alive for ever) when a stream of it was collected.
3. An event or a stream of an instance that ``register(name, ..., replace=True)`` replaced,
   used with one of the new instance, was refused with "device type racex does not match
   ... device type racex": the message now says which one the name no longer names.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Iterator

import pytest

import accelrt as acc
from accelrt import _stream_core, backends
from accelrt._errors import AcceleratorValueError
from accelrt.backends.cpu import CpuBackend

# a cpu backend that runs a full collection where the core makes one of its device pools
COLLECTING = '''
import gc
import accelrt as acc
from accelrt import _stream_core, backends
from accelrt._errors import AcceleratorValueError
from accelrt.backends.cpu import CpuBackend


class Collecting(CpuBackend):
    def stream_priority_range(self, index):
        gc.collect()   # as any allocation there may
        return super().stream_priority_range(index)


class Cycle:
    """An object only a collection frees (it refers to itself), holding ``held``."""

    def __init__(self, held):
        self.me, self.held = self, held


backends.register("gcdev", lambda: Collecting(name="gcdev"))
'''


def _run(code: str, **env: str) -> str:
    proc = subprocess.run([sys.executable, "-c", COLLECTING + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **env))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_stream_collected_while_a_pool_is_made_gives_its_handle_to_a_full_pool() -> None:
    # before: _give_back -> _pool() -> _pools_lock, held by the _pool() call collecting: a hang
    out = _run("""
        _stream_core._POOL_MAX = 1
        b = backends.get_backend("cpu")
        a, s = acc.Stream("cpu"), acc.Stream("cpu")
        a.close()                        # the pool is full
        live = b.live_handles()["streams"]
        Cycle(s)
        del s
        gc.disable()
        acc.Stream("gcdev")              # its pool is made here: the collection finalises s
        print(b.live_handles()["streams"] == live - 1)
    """)
    assert out.split() == ["True"]


def test_an_allocation_freed_by_a_collection_while_a_pool_is_made() -> None:
    # the stream-ordered allocator frees through a stream of the device's pool (_pool())
    out = _run("""
        from accelrt import memory
        assert memory.get_allocator_backend("cpu") == "cudaMallocAsync"
        s = acc.Stream("cpu:0")
        x = acc.zeros(16, device="cpu:0")
        x.record_stream(s)               # its free waits for s on a stream of the pool
        Cycle(x)
        del x
        gc.disable()
        acc.Stream("gcdev")              # the collection frees x inside _pool()
        print(memory.memory_allocated("cpu:0"))
    """, ACCELRT_ALLOC_CONF="backend:cudaMallocAsync")
    assert out.split() == ["0"]


def test_finalisers_that_free_on_a_pool_run_inside_a_region_holding_the_pools_lock() -> None:
    # an allocation's free on a stream of the pool of plain:0, run by a finaliser where this
    # thread holds the lock. (The pool was first made by that free, under the allocator's
    # lock, a deadlock with another thread: record_stream makes it now, test_review_pool2_s34.)
    out = _run("""
        from accelrt import _stream, memory
        backends.register("plain", lambda: CpuBackend(name="plain"))
        b = backends.get_backend("plain")
        h = b.stream_create(0, 0)                  # a stream accelrt does not own
        wrapped = acc.Stream(stream_id=h, device_index=0, device_type="plain")
        x = acc.zeros(16, device="plain:0")
        assert b not in _stream._pools
        x.record_stream(wrapped)                   # makes the pool of plain:0
        assert 0 in _stream._pools[b]
        with _stream._pools_lock:
            del x                                  # its free takes a stream of it
        print(memory.memory_allocated("plain:0"), 0 in _stream._pools[b])
        b.stream_destroy(0, h)
    """, ACCELRT_ALLOC_CONF="backend:cudaMallocAsync")
    assert out.split() == ["0", "True"]


@pytest.mark.parametrize("pool_max", [0, 1])
def test_a_stream_of_a_replaced_backend_given_back_to_a_full_pool(
        monkeypatch: pytest.MonkeyPatch, pool_max: int) -> None:
    # before: the full pool's _give_back made a pool of the old instance again (_pool()), which
    # kept that instance alive, and destroyed the handle through that new pool
    monkeypatch.setattr(_stream_core, "_POOL_MAX", pool_max)
    backends.register("poolx", lambda: CpuBackend(name="poolx"))
    s = acc.Stream("poolx")
    old = s._b
    live = old.live_handles()["streams"]
    backends.register("poolx", lambda: CpuBackend(name="poolx"), replace=True)
    s.close()                            # a full free list of a dropped pool (pool_max 0)
    assert old.live_handles()["streams"] == live - 1
    gone = weakref.ref(old)
    del s, old
    gc.collect()
    assert gone() is None


# ---------------------------------------------------------------- two instances, one name

@pytest.fixture
def two_instances() -> Iterator[tuple[acc.Event, acc.Stream, acc.Event, acc.Stream]]:
    """An event and a stream of a backend ``racex``, and an event and a stream of the
    instance that replaced it under that name (closed after the test)."""
    backends.register("racex", lambda: CpuBackend(name="racex"))
    e1, s1 = acc.Event("racex", enable_timing=True), acc.Stream("racex")
    backends.register("racex", lambda: CpuBackend(name="racex"), replace=True)
    e2, s2 = acc.Event("racex", enable_timing=True), acc.Stream("racex")
    yield e1, s1, e2, s2
    for x in (e1, s1, e2, s2):
        x.close()


PREFIX = "Event device type racex does not match {} device type racex. "
WHY = ("The {} and the {} are of two different backend instances registered under that one "
       "name (register('racex', ..., replace=True) or unregister('racex') came in between): "
       "the {} is of an instance that 'racex' no longer names. Make the {} again.")


def _says(exc: pytest.ExceptionInfo[BaseException], where: str, a: str, b: str,
          stale: str) -> None:
    assert str(exc.value) == PREFIX.format(where) + WHY.format(a, b, stale, stale)


def test_recording_an_event_of_a_replaced_instance_says_so(two_instances) -> None:
    e1, s1, e2, s2 = two_instances
    with pytest.raises(AcceleratorValueError) as exc:   # the class it had
        e1.record(s2)
    _says(exc, "recording stream's", "event", "stream", "event")
    with pytest.raises(AcceleratorValueError) as exc:
        s2.record_event(e1)
    _says(exc, "recording stream's", "event", "stream", "event")
    with pytest.raises(AcceleratorValueError) as exc:
        e2.record(s1)
    _says(exc, "recording stream's", "event", "stream", "stream")


def test_waiting_across_two_instances_of_one_name_says_which_is_replaced(two_instances) -> None:
    e1, s1, e2, s2 = two_instances
    with pytest.raises(AcceleratorValueError) as exc:
        e1.wait(s2)
    _says(exc, "blocking stream's", "event", "stream", "event")
    with pytest.raises(AcceleratorValueError) as exc:
        s1.wait_event(e2)
    _says(exc, "blocking stream's", "event", "stream", "stream")
    with pytest.raises(AcceleratorValueError) as exc:
        s2.wait_stream(s1)
    _says(exc, "blocking stream's", "stream to wait for", "waiting stream",
          "stream to wait for")
    with pytest.raises(AcceleratorValueError) as exc:
        s1.wait_stream(s2)
    _says(exc, "blocking stream's", "stream to wait for", "waiting stream", "waiting stream")


def test_elapsed_time_across_two_instances_of_one_name(two_instances) -> None:
    e1, s1, e2, s2 = two_instances
    e1.record(s1)
    e2.record(s2)
    with pytest.raises(AcceleratorValueError) as exc:
        e1.elapsed_time(e2)
    _says(exc, "other's", "event", "end event", "event")


def test_neither_instance_registered_now(two_instances) -> None:
    e1, s1, e2, s2 = two_instances
    backends.unregister("racex")
    with pytest.raises(AcceleratorValueError,
                       match=r"came in between\): neither is of the instance that 'racex' "
                             r"names now\. Make both again\.$"):
        e1.record(s2)


def test_two_backends_keep_pytorchs_message() -> None:
    backends.register("racey", lambda: CpuBackend(name="racey"))
    with pytest.raises(AcceleratorValueError) as exc:
        acc.Event("racey").record(acc.Stream("cpu"))
    assert str(exc.value) == ("Event device type racey does not match recording stream's "
                              "device type cpu.")
