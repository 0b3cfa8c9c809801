"""Explicit lifetimes: ``close()`` and ``with`` on streams, events, graphs and arrays.

Semantics (cuda.core's ``Stream.close``, ``Event.close``, ``Buffer.close(stream=None)``):
``close()`` gives the resource back now instead of when the object is collected, is
idempotent, never loses queued work, never destroys what accelrt does not own, and any later
use raises :class:`accelrt.ClosedError`. Every test runs on every backend (cpu synchronous,
cpu asynchronous, OpenCL, CUDA where present); ordering is checked with gates, never sleeps.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from helpers.gates import Gate, open_when_blocked
from helpers.params import backend_params
from helpers.registry import module_backends

import accelrt as acc
from accelrt._stream_core import _POOL_MAX
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import leak_check


class _Uncounted(CpuBackend):
    """A backend that does not count its handles (``live_handles()`` is None, the base's
    answer), as the cuda backend: the tests must not read counts from it."""

    def live_handles(self) -> None:  # type: ignore[override]
        return None


# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    "cpuclose": lambda: CpuBackend(num_devices=2, async_streams=True, name="cpuclose"),
    "cpuuncounted": lambda: _Uncounted(num_devices=2, async_streams=True, name="cpuuncounted"),
})

_NAMES = ["cpu", "cpuclose", "cpuuncounted", "opencl", "cuda"]


@pytest.fixture(params=backend_params(_NAMES, {"cpuclose": "cpu-async"},
                                      own=["cpuclose", "cpuuncounted"]))
def dev(request: pytest.FixtureRequest) -> Iterator[str]:
    """Device 0 of each backend, made the current accelerator."""
    name: str = request.param
    acc.set_current_accelerator(name)
    acc.synchronize(f"{name}:0")
    yield f"{name}:0"
    acc.synchronize(f"{name}:0")


def _async(dev: str) -> bool:
    b = acc.Stream(dev)._b
    return bool(b.get_device_properties(0).get("async_streams", b.name != "cpu"))


def _needs_async(dev: str) -> None:
    if not _async(dev):
        pytest.skip("ordering needs asynchronous streams")


def _host(stream: acc.Stream, fn: object) -> None:
    stream._b.launch_host_func(stream.device_index, fn, stream.stream_id)  # type: ignore[arg-type]


def _needs_host_funcs(dev: str) -> None:
    s = acc.Stream(dev)
    try:
        _host(s, lambda: None)
    except NotImplementedError:
        pytest.skip("the backend has no host functions")
    s.synchronize()
    s.close()


def _at_once(worker: Callable[[int], None], n: int = 4) -> list[BaseException]:
    """Run ``worker(0)`` ... ``worker(n - 1)`` in ``n`` threads that start together (at a
    barrier); what they raised."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(k: int) -> None:
        try:
            barrier.wait()
            worker(k)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


# ---------------------------------------------------------------------- streams

def test_stream_close_is_idempotent_and_every_use_raises(dev: str) -> None:
    s = acc.Stream(dev)
    assert not s.is_closed
    s.close()
    s.close()
    assert s.is_closed and "closed" in repr(s)
    other = acc.Stream(dev)
    e = acc.Event(dev)
    a = acc.zeros(4, device=dev)
    for use in (s.query, s.synchronize, s.record_event, lambda: s.stream_id,
                lambda: s.wait_event(e), lambda: s.wait_stream(other),
                lambda: other.wait_stream(s), lambda: acc.set_stream(s), s.__enter__,
                lambda: e.record(s), lambda: e.wait(s), lambda: a.record_stream(s),
                lambda: acc.memory.caching_allocator_alloc(16, dev, stream=s),
                lambda: acc.comm.scatter(a, devices=[dev], streams=[s])):
        with pytest.raises(acc.ClosedError, match="was closed"):
            use()
    assert acc.current_stream(dev) != s   # set_stream refused before changing anything
    other.close()
    e.close()
    a.close()


def test_closed_error_is_in_the_error_tree() -> None:
    assert issubclass(acc.ClosedError, acc.AcceleratorError)
    assert issubclass(acc.ClosedError, ValueError)


def test_stream_close_returns_the_handle_to_the_pool_now(dev: str) -> None:
    s = acc.Stream(dev)
    handle = s.stream_id
    s.close()
    again = acc.Stream(dev)   # the pool is LIFO: the handle just given back serves it
    assert again.stream_id == handle and again.query()
    again.close()


def test_a_closed_stream_equals_only_itself_after_its_handle_is_reused(dev: str) -> None:
    s = acc.Stream(dev)
    key = hash(s)
    found = {s: "s"}
    handle, index, name = s.stream_id, s.device_index, s.device_type
    s.close()
    t = acc.Stream(dev)                    # the pool is LIFO: t reuses s's handle
    assert t.stream_id == handle
    assert s != t and t != s and not (s == t)  # noqa: SIM201 - tests __eq__ itself
    assert s == s and t == t               # noqa: PLR0124 - an object equals itself
    assert hash(s) == key and found[s] == "s" and t not in found   # the hash did not change
    assert len({s, t}) == 2
    wrapped = acc.Stream(stream_id=handle, device_index=index, device_type=name)
    assert wrapped == t and hash(wrapped) == hash(t)   # open objects: by handle
    assert wrapped != s and s != wrapped
    wrapped.close()                        # a closed wrapper: only itself, not its stream
    assert wrapped != t and wrapped == wrapped  # noqa: PLR0124
    t.close()
    assert s != t                          # two closed objects of one handle differ


def test_a_view_of_a_closed_stream_equals_only_itself(dev: str) -> None:
    name = dev.split(":")[0]
    mod = {"cpu": acc.cpu, "opencl": acc.opencl, "cuda": acc.cuda}.get(name)
    if mod is None:
        pytest.skip("no device module for this test backend")
    s = acc.Stream(dev)
    view = mod.Stream._view(s)             # what mod.current_stream() returns in 'with s:'
    assert view == s and not view.is_closed
    s.close()
    t = acc.Stream(dev)
    assert t.stream_id == view._handle     # t reuses the handle the view stands for
    assert view.is_closed and view != t and t != view and view != s
    t.close()


def test_stream_close_with_a_full_pool_destroys_the_handle(dev: str) -> None:
    b = acc.Stream(dev)._b
    live = b.live_handles
    if live() is None:   # the base's answer (cuda): the backend does not count its handles
        pytest.skip("the backend has no live_handles() count")
    hold = [acc.Stream(dev) for _ in range(_POOL_MAX + 1)]   # the pool is now empty
    s = hold.pop()
    for t in hold:
        t.close()                                           # the pool is now full
    before = live()["streams"]
    s.close()
    assert live()["streams"] == before - 1


def test_closing_a_borrowed_stream_destroys_nothing(dev: str) -> None:
    owner = acc.Stream(dev)
    b = owner._b
    wrapped = acc.Stream(stream_id=owner.stream_id, device_index=0, device_type=b.name)
    wrapped.close()
    assert wrapped.is_closed and not owner.is_closed
    assert b.stream_is_valid(0, owner.stream_id)
    owner.synchronize()
    # the default stream object current_stream() shares is never closed
    default = acc.current_stream(dev)
    default.close()
    assert not default.is_closed and acc.current_stream(dev).query()
    # a fresh object wrapping the default stream closes, the default stream does not
    d2 = acc.Stream(stream_id=default.stream_id, device_index=0, device_type=b.name)
    d2.close()
    acc.current_stream(dev).synchronize()
    owner.close()


def test_a_current_stream_cannot_be_closed(dev: str) -> None:
    s = acc.Stream(dev)
    with s:
        with pytest.raises(acc.AcceleratorError, match="current stream"):
            s.close()
    prev = acc.current_stream(dev)
    acc.set_stream(s)
    with pytest.raises(acc.AcceleratorError, match="set_stream"):
        s.close()
    acc.set_stream(prev)
    s.close()
    # contextlib.closing is the block form (with stream: keeps PyTorch's meaning)
    with contextlib.closing(acc.Stream(dev)) as t:
        t.synchronize()
    assert t.is_closed


def test_another_threads_with_block_keeps_the_stream_open(dev: str) -> None:
    s = acc.Stream(dev)
    inside, leave = threading.Event(), threading.Event()

    def user() -> None:
        with s:
            inside.set()
            leave.wait()

    t = threading.Thread(target=user)
    t.start()
    inside.wait()
    try:
        with pytest.raises(acc.AcceleratorError, match="current stream"):
            s.close()
    finally:
        leave.set()
        t.join()
    s.close()


@pytest.mark.parametrize("pool_full", [False, True], ids=["pooled", "destroyed"])
def test_closing_a_stream_with_queued_work_keeps_it(dev: str, pool_full: bool) -> None:
    """The work queued before close() still runs, in order, and synchronizing the device
    waits for it (the gate opens only once the synchronize blocks)."""
    _needs_async(dev)
    _needs_host_funcs(dev)
    hold = [acc.Stream(dev) for _ in range(_POOL_MAX + 1)] if pool_full else []
    s = hold.pop() if pool_full else acc.Stream(dev)
    for t in hold:
        t.close()
    ran: list[int] = []
    gate = Gate()
    with gate:
        _host(s, gate)
        _host(s, lambda: ran.append(1))
        _host(s, lambda: ran.append(2))
        s.close()
        assert ran == []
        with open_when_blocked(gate):
            acc.synchronize(dev)
    assert ran == [1, 2]


def test_a_reused_pooled_handle_runs_after_the_closed_streams_work(dev: str) -> None:
    _needs_async(dev)
    _needs_host_funcs(dev)
    s = acc.Stream(dev)
    ran: list[str] = []
    gate = Gate()
    with gate:
        _host(s, gate)
        _host(s, lambda: ran.append("old"))
        s.close()
        again = acc.Stream(dev)            # the same handle, from the pool
        _host(again, lambda: ran.append("new"))
        with open_when_blocked(gate):
            again.synchronize()
    assert ran == ["old", "new"]
    again.close()


def test_device_specific_streams_inherit_close(dev: str) -> None:
    name = dev.split(":")[0]
    mod = {"cpu": acc.cpu, "cpuclose": None, "cpuuncounted": None, "opencl": acc.opencl, "cuda": acc.cuda}[name]
    if mod is None:
        pytest.skip("no device module for the async test backend")
    s = mod.Stream()
    s.close()
    with pytest.raises(acc.ClosedError):
        s.is_capturing()
    assert "closed" in repr(s) and isinstance(s, acc.Stream)
    owned = acc.Stream(dev)
    view = mod.Stream._view(owned)  # what mod.current_stream() returns inside 'with owned:'
    owned.close()
    with pytest.raises(acc.ClosedError):
        view.synchronize()
    v = mod.current_stream()        # a view of the (open) default stream
    v.close()
    mod.current_stream().synchronize()
    e = mod.Event()
    with e as same:
        assert same is e
        e.record()
    with pytest.raises(acc.ClosedError):
        e.query()


def test_streams_close_from_many_threads(dev: str) -> None:
    """Threads making and closing streams at once never share a live handle."""
    seen: list[set[int]] = [set() for _ in range(4)]

    def worker(k: int) -> None:
        for _ in range(50):
            mine = [acc.Stream(dev) for _ in range(3)]
            ids = {m.stream_id for m in mine}
            assert len(ids) == 3
            seen[k] |= ids
            for m in mine:
                m.synchronize()
                m.close()
                m.close()

    with leak_check():
        errors = _at_once(worker)
    assert not errors, errors


# ---------------------------------------------------------------------- events

def test_event_close_destroys_the_handle_and_every_use_raises(dev: str) -> None:
    e = acc.Event(dev, enable_timing=True)
    e.record()
    b = acc.current_stream(dev)._b
    counts = b.live_handles()   # None where the backend does not count (cuda)
    e.close()
    e.close()
    if counts is not None:
        after = b.live_handles()
        assert after is not None and after["events"] == counts["events"] - 1
    assert e.is_closed and repr(e).endswith("closed>")
    other = acc.Event(dev, enable_timing=True)
    other.record()
    s = acc.Stream(dev)
    for use in (e.record, e.query, e.synchronize, e.wait, lambda: e.event_id,
                lambda: e.elapsed_time(other), lambda: other.elapsed_time(e),
                lambda: s.wait_event(e), lambda: s.record_event(e), e.ipc_handle,
                e.__enter__):
        with pytest.raises(acc.ClosedError, match="was closed"):
            use()
    never = acc.Event(dev)     # never recorded: nothing to destroy, still closed after
    never.close()
    with pytest.raises(acc.ClosedError):
        never.query()
    other.close()
    s.close()


def test_event_with_returns_it_and_closes_on_exit(dev: str) -> None:
    with acc.Event(dev) as e:
        assert isinstance(e, acc.Event)
        e.record()
        e.synchronize()
    assert e.is_closed
    with pytest.raises(RuntimeError, match="boom"), acc.Event(dev) as e2:
        raise RuntimeError("boom")
    assert e2.is_closed


def test_closing_an_event_keeps_the_waits_queued_on_it(dev: str) -> None:
    """A stream made to wait for an event still waits after the event is closed."""
    _needs_async(dev)
    _needs_host_funcs(dev)
    s1, s2 = acc.Stream(dev), acc.Stream(dev)
    order: list[str] = []
    gate = Gate()
    with gate:
        _host(s1, gate)
        _host(s1, lambda: order.append("s1"))
        with acc.Event(dev) as e:
            e.record(s1)
            s2.wait_event(e)
        _host(s2, lambda: order.append("s2"))
        assert order == []
        with open_when_blocked(gate):
            s2.synchronize()
    assert order == ["s1", "s2"]
    s1.close()
    s2.close()


def test_events_close_from_many_threads(dev: str) -> None:
    s = acc.Stream(dev)

    def worker(k: int) -> None:
        for _ in range(50):
            with acc.Event(dev) as e:
                e.record(s)
                e.synchronize()

    with leak_check():
        errors = _at_once(worker)
    assert not errors, errors
    s.close()


# ---------------------------------------------------------------------- graphs

def _graphs(dev: str) -> None:
    b = acc.current_stream(dev)._b
    if not b.graph_supported(0):
        pytest.skip("the backend cannot capture graphs")


def test_graph_closing_closes_it_and_releases_its_pool(dev: str) -> None:
    _graphs(dev)
    x = acc.zeros(4, device=dev)
    before = acc.memory.memory_reserved(dev)
    with contextlib.closing(acc.Graph()) as g:
        with acc.graph(g):
            y = acc.full(4, 1.0, device=dev)   # from the graph's private pool
            _ = x.copy_(y)
        g.replay()
        acc.synchronize(dev)
    assert g.is_closed and "closed" in repr(g)
    assert x.tolist() == [1.0] * 4
    del y
    acc.memory.empty_cache()
    assert acc.memory.memory_reserved(dev) <= before
    for use in (g.replay, g.reset, g.pool, g.capture_begin, g.capture_end,
                lambda: acc.graph(g)):
        with pytest.raises(acc.ClosedError, match="was closed"):
            use()
    g.close()
    x.close()


def test_graph_close_during_capture_is_refused_and_with_ends_it(dev: str) -> None:
    _graphs(dev)
    x = acc.zeros(4, device=dev)
    s = acc.Stream(dev)
    g = acc.Graph()
    with s:
        g.capture_begin()
        _ = x.fill_(3.0)
        with pytest.raises(RuntimeError, match="capture_end"):
            g.close()
        g.capture_end()
    g.close()
    # an error inside 'with stream, Graph()' (which captures): the capture still ends, the
    # error propagates, and the graph is not closed (contextlib.closing closes)
    g2 = acc.Graph()
    with pytest.raises(KeyError), s, g2:
        _ = x.fill_(4.0)
        raise KeyError("in capture")
    assert not g2.is_closed and not s._b.stream_is_capturing(0, s.stream_id)
    g2.close()
    s.close()
    x.close()


# ---------------------------------------------------------------------- arrays

def test_array_close_frees_now_and_every_use_raises(dev: str) -> None:
    base = acc.memory.memory_allocated(dev)
    a = acc.full((16, 4), 2.0, device=dev)
    assert acc.memory.memory_allocated(dev) > base
    a.close()
    assert acc.memory.memory_allocated(dev) == base
    a.close()
    assert a.is_closed and a.shape == (16, 4) and "closed" in repr(a)
    b = acc.zeros((16, 4), device=dev)
    for use in (a.numpy, a.tolist, lambda: a.fill_(1.0), lambda: a.copy_(b),
                lambda: b.copy_(a), a.data_ptr, lambda: a.nbytes, lambda: a.to("cpu"),
                lambda: np.asarray(a), a.__dlpack__, lambda: a.record_stream(acc.Stream(dev)),
                a.__enter__):
        with pytest.raises(acc.ClosedError, match="was closed"):
            use()
    b.close()


def test_array_with_returns_it_and_closes(dev: str) -> None:
    base = acc.memory.memory_allocated(dev)
    with acc.zeros(8, device=dev) as a:
        assert isinstance(a, acc.Array)
        assert a.fill_(1.0).tolist() == [1.0] * 8
    assert a.is_closed and acc.memory.memory_allocated(dev) == base


def test_a_numpy_view_keeps_closed_memory_until_it_goes() -> None:
    base = acc.memory.memory_allocated("cpu:0")
    a = acc.full(8, 5, dtype="int32", device="cpu:0")
    view = a.numpy()
    a.close()
    assert acc.memory.memory_allocated("cpu:0") > base   # shared: not freed under the view
    assert view.tolist() == [5] * 8
    del view
    assert acc.memory.memory_allocated("cpu:0") == base


def test_closing_borrowed_memory_lets_its_owner_go() -> None:
    host = np.arange(4.0)
    a = acc.asarray(host, device="cpu:0")
    assert a.data_ptr() == host.ctypes.data
    import sys
    refs = sys.getrefcount(host)
    a.close()
    assert sys.getrefcount(host) < refs


@pytest.mark.parametrize("how", ["record_stream", "close_stream", "drop"])
def test_array_close_is_stream_ordered_like_dropping_it(dev: str, how: str) -> None:
    """The block of a closed array whose memory another stream still uses is not handed out
    again until that stream's queued work is done, exactly as when it is dropped."""
    _needs_async(dev)
    _needs_host_funcs(dev)
    other = acc.Stream(dev)
    base = acc.memory.memory_allocated(dev)
    a = acc.zeros(1024, device=dev)
    ptr = a.data_ptr()
    gate = Gate()
    with gate:
        _host(other, gate)
        if how == "record_stream":
            a.record_stream(other)
            a.close()
        elif how == "close_stream":
            a.close(stream=other)
        else:
            a.record_stream(other)
            del a
        assert acc.memory.memory_allocated(dev) == base   # counted as freed at once
        b = acc.empty(1024, device=dev)     # same size, current stream: must not reuse yet
        assert b.data_ptr() != ptr
        b.close()
    other.synchronize()
    c = acc.empty(1024, device=dev)         # the event completed: now it may be reused
    c.close()
    other.close()


def test_array_close_on_its_own_stream_reuses_at_once(dev: str) -> None:
    """Same-stream reuse is safe in stream order: the next allocation on the stream gets the
    closed block even while earlier work on it is still queued."""
    a = acc.zeros(1024, device=dev)
    ptr = a.data_ptr()
    _ = a.fill_(1.0)
    a.close()
    b = acc.empty(1024, device=dev)
    assert b.data_ptr() == ptr
    b.close()


def test_arrays_close_from_many_threads(dev: str) -> None:
    def worker(k: int) -> None:
        for i in range(50):
            with acc.full(64, float(i), device=dev) as a:
                assert a.tolist()[0] == float(i)

    with leak_check():
        errors = _at_once(worker)
    assert not errors, errors


def test_closing_one_object_from_many_threads_releases_it_once(dev: str) -> None:
    """Racing close() calls give a stream's handle back once and destroy an event once."""
    from accelrt import _stream
    errors: list[BaseException] = []
    with leak_check():
        for _ in range(20):
            s = acc.Stream(dev)
            e = s.record_event()
            a = acc.zeros(64, device=dev)

            def closer(k: int) -> None:
                s.close()
                e.close()
                a.close()

            errors += _at_once(closer)
            free = _stream._pools[s._b][0].free0
            assert len(free) == len(set(free)), "a handle was pooled twice"
    assert not errors, errors


def test_a_capturing_stream_cannot_be_closed(dev: str) -> None:
    _graphs(dev)
    x = acc.zeros(4, device=dev)
    s = acc.Stream(dev)
    g = acc.Graph()
    with s:
        g.capture_begin()
        _ = x.fill_(1.0)
    with pytest.raises(acc.AcceleratorError, match="captures"):
        s.close()
    with s:
        g.capture_end()
    s.close()
    g.close()
    x.close()
