"""Review of this round's event paths (``Event.record``/``Event.wait`` in the compiled core,
``Stream.wait_stream`` through ``_wait_raw``, ``Stream.record_event`` through ``Event._on``,
``Event(device)`` without a second parse) against PyTorch's semantics (torch.cuda.Stream /
Event: ``wait_stream(s)`` is ``wait_event(s.record_event())``, ``record_event()`` makes a
default ``Event()``, ``Event.wait()`` waits on the current stream of the current device) and
with hostile inputs: wrong types, closed streams and views, other backends and devices,
backends that fail in the middle, asynchronous streams gated by host functions, graph
capture, device-module classes and ``ExternalStream``."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import register_toy
from helpers.gates import Gate
from helpers.registry import module_backends

import accelrt as acc
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend

ASYNC = "rvasync"
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({ASYNC: lambda: CpuBackend(num_devices=2, async_streams=True,
                                                     name=ASYNC)})


@pytest.fixture
def toy() -> Iterator[str]:
    """A fresh two-device simulated backend, current, device 0 current."""
    name, _ = register_toy(num_devices=2)
    acc.set_current_accelerator(name)
    acc.set_device_index(0)
    yield name
    for index in range(2):
        acc.synchronize(f"{name}:{index}")


@pytest.fixture
def two() -> Iterator[str]:
    """The asynchronous two-device cpu backend, current, device 0 current."""
    acc.set_current_accelerator(ASYNC)
    acc.set_device_index(0)
    yield ASYNC
    for index in range(2):
        acc.synchronize(f"{ASYNC}:{index}")


def _host(stream: acc.Stream, fn: object) -> None:
    """Queue host function ``fn`` on ``stream``."""
    stream._b.launch_host_func(stream.device_index, fn, stream.stream_id)


# ---------------------------------------------------------------------- views of closed streams

def _closed_view(name: str) -> tuple[acc.Stream, acc.Stream]:
    """A device module's view of an owned stream (``acc.<mod>.current_stream()`` inside
    ``with s:``), then ``s`` closed: the view reports ``is_closed``."""
    mod = acc.backends.device_module(name)
    s = acc.Stream(f"{name}:0")
    with s:
        view = mod.current_stream()
    assert view is not s and view == s
    s.close()
    assert view.is_closed
    return s, view


def test_view_of_a_closed_stream_refuses_record_wait_and_enter(toy: str) -> None:
    # regression: Event.record/Event.wait (and so wait_event) and ``with view:`` checked only
    # the view's own flag, so they queued work on a handle given back to the pool (maybe
    # serving another stream), while query()/synchronize()/wait_stream()/record_event() of
    # the same view raised ClosedError
    _, view = _closed_view(toy)
    e = acc.Event(toy)
    with pytest.raises(acc.ClosedError):
        e.record(view)
    assert e.event_id == 0 and e.device.index is None   # nothing recorded, not bound
    done = acc.current_stream(toy).record_event()
    with pytest.raises(acc.ClosedError):
        done.wait(view)
    with pytest.raises(acc.ClosedError):
        view.wait_event(done)
    with pytest.raises(acc.ClosedError):
        view.__enter__()
    assert acc.current_stream(toy) != view   # nothing was made current
    for op in (view.query, view.synchronize, view.record_event,
               lambda: view.wait_stream(acc.current_stream(toy)),
               lambda: acc.current_stream(toy).wait_stream(view), lambda: acc.set_stream(view)):
        with pytest.raises(acc.ClosedError):
            op()


def test_view_of_an_open_stream_records_and_waits(toy: str) -> None:
    mod = acc.backends.device_module(toy)
    s = acc.Stream(f"{toy}:1")
    with s:
        view = mod.current_stream()
    e = acc.Event()
    e.record(view)
    assert e.device == acc.device(toy, 1)
    e.wait(view)
    view.wait_event(e)
    with view:
        assert acc.current_stream(f"{toy}:1") == s
    s.close()


# ---------------------------------------------------------------------- wrong arguments

@pytest.mark.parametrize("bad", [None, 0, "cpu:0", 1.5, object()])
def test_stream_and_event_methods_refuse_wrong_types(toy: str, bad: object) -> None:
    s, e, other = acc.Stream(toy), acc.Event(toy), acc.Event(toy)
    stream_arg = r"takes an accelrt\.Stream or None, got "
    cases: list[tuple[Any, object, str]] = [
        (s.wait_stream, bad, r"wait_stream\(\) takes an accelrt\.Stream, got "),
        (s.wait_stream, other, r"wait_stream\(\) takes an accelrt\.Stream, got Event$"),
        (e.record, other, r"record\(\) " + stream_arg + "Event$"),
        (e.wait, other, r"wait\(\) " + stream_arg + "Event$"),
        (s.wait_event, s, r"wait_event\(\) takes an accelrt\.Event, got Stream$"),
        (s.wait_event, bad, r"wait_event\(\) takes an accelrt\.Event, got "),
        (s.record_event, s, r"record_event\(\) takes an accelrt\.Event or None, got Stream$")]
    if bad is not None:   # (None is a valid stream for these)
        cases += [(e.record, bad, r"record\(\) " + stream_arg),
                  (e.wait, bad, r"wait\(\) " + stream_arg),
                  (s.record_event, bad, r"record_event\(\) takes an accelrt\.Event or None, ")]
    for method, arg, message in cases:
        with pytest.raises(TypeError, match="^" + message):
            method(arg)
    assert e.event_id == 0 and e.device.index is None   # a refused record neither binds nor creates
    s.close()


def test_closed_objects_raise_closed_error_before_any_backend_call(toy: str) -> None:
    b = acc.backends.get_backend(toy)
    assert isinstance(b, SimulatedBackend)
    s, other = acc.Stream(toy), acc.Stream(toy)
    e = acc.Event(toy)
    e.record(other)
    s.close()
    before = dict(b.calls(0))
    for op in (lambda: s.wait_stream(other), lambda: other.wait_stream(s), s.record_event,
               lambda: e.record(s), lambda: e.wait(s), lambda: s.wait_event(e)):
        with pytest.raises(acc.ClosedError, match="was closed"):
            op()
    closed = acc.Event(toy)
    closed.record(other)
    closed.close()
    after_record = dict(b.calls(0))
    for op in (closed.record, closed.wait, lambda: other.wait_event(closed),
               lambda: other.record_event(closed)):
        with pytest.raises(acc.ClosedError, match="was closed"):
            op()
    assert dict(b.calls(0)) == after_record
    assert before["event_record"] + 1 == after_record["event_record"]
    other.close()


# ---------------------------------------------------------------------- backends and devices

def test_cross_backend_operations_raise_pytorch_runtime_errors(toy: str, two: str) -> None:
    mine, theirs = acc.Stream(f"{toy}:0"), acc.Stream(f"{two}:1")
    for op in (lambda: mine.wait_stream(theirs), lambda: theirs.wait_stream(mine)):
        with pytest.raises(RuntimeError, match="does not match blocking stream's device type"):
            op()
    e = acc.Event(toy)
    with pytest.raises(RuntimeError, match=rf"^Event device type {toy} does not match recording "
                                           rf"stream's device type {two}\.$"):
        e.record(theirs)
    with pytest.raises(ValueError, match="does not match recording stream's device type"):
        theirs.record_event(e)
    assert e.device.index is None and e.event_id == 0
    e.record(mine)
    with pytest.raises(RuntimeError, match=rf"^Event device type {toy} does not match blocking "
                                           rf"stream's device type {two}\."):
        e.wait(theirs)
    with pytest.raises(ValueError, match="does not match blocking stream's device type"):
        theirs.wait_event(e)


def test_record_event_binds_to_the_stream_device_as_pytorch(toy: str) -> None:
    s1 = acc.Stream(f"{toy}:1")
    e = s1.record_event()          # torch: Event() then record(s1): bound to device 1
    assert e.device == acc.device(toy, 1)
    assert e.enable_timing is False and type(e) is acc.Event
    unbound = acc.Event(toy)       # "toy": no index, bound at the first record
    assert s1.record_event(unbound) is unbound and unbound.device == acc.device(toy, 1)
    with pytest.raises(RuntimeError, match=r"^Event device 1 does not match recording stream's "
                                           r"device 0\."):
        acc.Stream(f"{toy}:0").record_event(unbound)
    # torch.Event keeps only the device's type: an index given binds nothing (nor does an
    # indexed device string seen before, cached by the device parser)
    made = acc.Event(f"{toy}:0")
    assert made.device == acc.device(toy) and made.event_id == 0
    assert s1.record_event(made) is made and made.device == acc.device(toy, 1)
    assert acc.Event(f"{toy}:1").device == acc.device(toy)
    assert acc.Event(acc.device(toy, 1)).device == acc.device(toy)
    assert acc.Event(acc.device(toy)).device.index is None
    s1.close()


def test_wait_stream_across_devices_and_on_itself_is_counted_once(toy: str) -> None:
    b = acc.backends.get_backend(toy)
    assert isinstance(b, SimulatedBackend)
    s0, s1 = acc.Stream(f"{toy}:0"), acc.Stream(f"{toy}:1")
    c0, c1 = dict(b.calls(0)), dict(b.calls(1))
    s0.wait_stream(s1)   # event of device 1 recorded on s1, waited on by s0 (device 0)
    d0, d1 = b.calls(0), b.calls(1)
    assert d1["event_create"] - c1["event_create"] == 1
    assert d1["event_destroy"] - c1["event_destroy"] == 1
    assert d1["event_record"] - c1["event_record"] == 1
    assert d0["stream_wait_event"] - c0["stream_wait_event"] == 1
    same = dict(b.calls(0))
    s0.wait_stream(s0)   # a stream after its own work: nothing to do
    s0.wait_stream(acc.Stream(stream_id=s0.stream_id, device_index=0, device_type=toy))
    assert dict(b.calls(0)) == same
    s0.close()
    s1.close()


class _FailingWait(SimulatedBackend):
    """A simulated backend whose ``stream_wait_event`` (or ``event_record``) raises."""

    fail = "stream_wait_event"

    def stream_wait_event(self, index: int, stream: object, event: object) -> None:
        if self.fail == "stream_wait_event":
            raise RuntimeError("injected stream_wait_event failure")
        super().stream_wait_event(index, stream, event)  # type: ignore[arg-type]

    def event_record(self, index: int, event: object, stream: object) -> None:
        if self.fail == "event_record":
            raise RuntimeError("injected event_record failure")
        super().event_record(index, event, stream)  # type: ignore[arg-type]


@pytest.mark.parametrize("fail", ["stream_wait_event", "event_record"])
def test_wait_stream_destroys_its_event_when_the_backend_raises(fail: str) -> None:
    name, b = register_toy(num_devices=2, cls=_FailingWait)
    assert isinstance(b, _FailingWait)
    b.fail = fail
    s0, s1 = acc.Stream(f"{name}:0"), acc.Stream(f"{name}:1")
    for waiter, waited in ((s0, s1), (s1, s0), (s0, acc.Stream(f"{name}:0"))):
        with pytest.raises(RuntimeError, match=f"injected {fail} failure"):
            waiter.wait_stream(waited)
    created = sum(b.calls(i)["event_create"] for i in range(2))
    destroyed = sum(b.calls(i)["event_destroy"] for i in range(2))
    assert created == destroyed == 3
    b.fail = ""
    s0.wait_stream(s1)
    assert sum(b.calls(i)["event_create"] for i in range(2)) == \
        sum(b.calls(i)["event_destroy"] for i in range(2)) == 4
    s0.close()
    s1.close()


# ---------------------------------------------------------------------- ordering (async streams)

def test_wait_stream_orders_later_work_after_gated_work(two: str) -> None:
    for waiter_device, waited_device in ((0, 0), (0, 1), (1, 0)):
        waited = acc.Stream(f"{two}:{waited_device}")
        waiter = acc.Stream(f"{two}:{waiter_device}")
        order: list[str] = []
        with Gate() as gate:
            _host(waited, gate)
            _host(waited, lambda: order.append("waited"))
            waiter.wait_stream(waited)
            _host(waiter, lambda: order.append("waiter"))
            assert not waiter.query()       # behind the gated work of the other stream
            gate.open()
            waiter.synchronize()
        assert order == ["waited", "waiter"]
        waited.synchronize()
        waited.close()
        waiter.close()


@pytest.mark.parametrize("flags", [None, {}, {"enable_timing": True}, {"blocking": True},
                                   {"interprocess": True}])
def test_record_event_and_event_wait_order_async_work(two: str, flags: dict[str, bool] | None,
                                                      ) -> None:
    s1 = acc.Stream(f"{two}:1")
    order: list[str] = []
    with Gate() as gate:
        _host(s1, gate)
        _host(s1, lambda: order.append("recorded"))
        # None: record_event() makes the event (as torch: a default Event()); else an event
        # made without a device index, with these flags, bound by this record
        e = s1.record_event(None if flags is None else acc.Event(two, **flags))
        assert e.device == acc.device(two, 1)
        assert not e.query()
        acc.set_device_index(0)
        waiter = acc.current_stream()   # Event.wait(): the current stream of the current device
        e.wait()
        _host(waiter, lambda: order.append("after wait"))
        assert not waiter.query()
        gate.open()
        waiter.synchronize()
    assert order == ["recorded", "after wait"] and e.query()
    s1.close()


def test_an_event_recorded_in_one_thread_is_waited_for_in_another(two: str) -> None:
    s = acc.Stream(f"{two}:1")
    recorded = threading.Event()
    seen: dict[str, object] = {}
    order: list[str] = []

    def other() -> None:
        recorded.wait()
        seen["stream"] = acc.current_stream(f"{two}:1")   # this thread's own: the default
        seen["event"].wait(seen["stream"])  # type: ignore[attr-defined]
        _host(seen["stream"], lambda: order.append("other"))  # type: ignore[arg-type]

    with Gate() as gate:
        acc.set_stream(s)
        _host(s, gate)
        _host(s, lambda: order.append("mine"))
        seen["event"] = acc.Event(f"{two}:1")
        seen["event"].record()  # type: ignore[attr-defined]
        t = threading.Thread(target=other)
        t.start()
        recorded.set()
        t.join(30)
        assert not t.is_alive()
        assert seen["stream"] != s
        gate.open()
        acc.synchronize(f"{two}:1")
    assert order == ["mine", "other"]
    acc.set_stream(acc.current_stream(f"{two}:0"))   # s is no longer device 1's current
    acc.set_stream(seen["stream"])  # type: ignore[arg-type]
    s.close()


# ---------------------------------------------------------------------- graphs, module classes

def test_wait_stream_forks_and_joins_a_capture() -> None:
    x = acc.zeros(4, device="cpu")
    y = acc.zeros(4, device="cpu")
    side = acc.Stream("cpu")
    g = acc.cpu.Graph()
    with acc.cpu.graph(g):
        capture = acc.current_stream("cpu")
        _ = x.fill_(1.0)
        side.wait_stream(capture)          # fork: side joins the capture
        assert side.is_capturing()
        with side:
            _ = y.fill_(2.0)
        capture.wait_stream(side)          # join
    assert not side.is_capturing()
    x.fill_(0.0)
    y.fill_(0.0)
    acc.synchronize("cpu")
    g.replay()
    acc.synchronize("cpu")
    assert x.numpy().tolist() == [1.0] * 4 and y.numpy().tolist() == [2.0] * 4
    g.reset()
    side.close()


def test_device_module_classes_and_external_streams(toy: str) -> None:
    mod = acc.backends.device_module(toy)
    s = mod.Stream(1)
    e = s.record_event()
    assert type(e) is mod.Event and e.device == acc.device(toy, 1)
    plain = acc.Stream(f"{toy}:1").record_event()
    assert type(plain) is acc.Event
    ext = mod.ExternalStream(s.cuda_stream, device=1)
    assert ext == s
    ext.wait_stream(s)                   # the same stream: nothing to wait for
    acc.Stream(f"{toy}:0").wait_stream(ext)
    me = mod.Event()
    me.record(ext)
    assert me.device == acc.device(toy, 1)
    ext.wait_event(acc.Event(f"{toy}:1"))   # never recorded: a no-op, as in PyTorch
    ext.close()
    assert not s.is_closed
    s.record_event(me)
    s.close()
