"""Review of streams and events beyond the common calls, with hostile inputs and odd orders:
``Stream(stream_id=..., device_index=..., device_type=...)`` and ``ExternalStream`` with bad
handles, devices and extra arguments; ``__eq__``/``__hash__``/``__repr__``/``native_handle``
of open, closed, wrapped and viewed streams; copying and pickling streams and events (refused,
as torch 2.14 refuses ``torch.Stream``/``torch.Event``); ``Event.elapsed_time`` unrecorded,
without timing, across devices, reversed, on itself, before completion and after close;
``Event(blocking=True)``; interprocess events (``ipc_handle``/``from_ipc_handle``); a device
module's ``Stream.priority_range`` and its ``streams`` submodule."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from helpers.gates import Gate
from helpers.registry import module_backends

import accelrt as acc
from accelrt import backends
from accelrt.backends.cpu import CpuBackend

NAME = "rvse24"      # two simulated devices, each stream on a worker thread
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({NAME: lambda: CpuBackend(num_devices=2, async_streams=True,
                                                    name=NAME)})


# ---------------------------------------------------------------------- wrapping streams
@pytest.mark.parametrize("priority", [0.0, False, np.float64(0.0), "0"])
def test_wrap_rejects_a_priority_that_is_not_an_int(priority: Any) -> None:
    # torch.Stream(stream_id=..., priority=0.0): "argument 'priority' must be int, not float";
    # 0.0 == 0 and False == 0 must not slip through an equality check
    s = acc.Stream("cpu")
    with pytest.raises(TypeError, match=r"^priority must be an int, got"):
        acc.Stream(stream_id=s.stream_id, device_index=0, device_type="cpu", priority=priority)


def test_wrap_accepts_priority_zero_of_any_int_type() -> None:
    s = acc.Stream("cpu")
    for p in (0, np.int64(0)):
        w = acc.Stream(stream_id=s.stream_id, device_index=0, device_type="cpu", priority=p)
        assert w == s and w.priority == 0
    with pytest.raises(TypeError, match="do not also pass"):
        acc.Stream(stream_id=s.stream_id, device_index=0, device_type="cpu", priority=-1)


@pytest.mark.parametrize(("kw", "exc", "match"), [
    ({"stream_id": -1}, ValueError, "not a live stream"),
    ({"stream_id": 2 ** 80}, ValueError, "not a live stream"),
    ({"device_index": -1}, ValueError, "must not be negative"),
    ({"device_index": 2 ** 80}, IndexError, "out of index range"),
    ({"device_index": True}, TypeError, "device_index must be an int"),
    ({"device_type": "cpu:0"}, ValueError, "must not include an index"),
    ({"device_type": "CPU"}, acc.BackendUnavailableError, "did you mean 'cpu'"),
    ({"device_type": ""}, ValueError, "Device string must not be empty"),
    ({"device_type": acc.device("cpu")}, TypeError, "device_type must be a backend name"),
])
def test_wrap_hostile_arguments(kw: dict[str, Any], exc: type[Exception], match: str) -> None:
    s = acc.Stream("cpu")
    args: dict[str, Any] = {"stream_id": s.stream_id, "device_index": 0, "device_type": "cpu"}
    args.update(kw)
    with pytest.raises(exc, match=match):
        acc.Stream(**args)


def test_wrap_a_stream_of_another_device_is_refused() -> None:
    s = acc.Stream(f"{NAME}:1")
    with pytest.raises(ValueError, match="not a live stream"):
        acc.Stream(stream_id=s.stream_id + 1000, device_index=0, device_type=NAME)
    w = acc.Stream(stream_id=s.stream_id, device_index=1, device_type=NAME)
    assert w == s and hash(w) == hash(s) and w.device == s.device
    with pytest.raises(ValueError, match=r"accelrt\.cpu\.Stream wraps cpu streams"):
        acc.cpu.Stream(stream_id=s.stream_id, device_index=1, device_type=NAME)


def test_external_stream_hostile_arguments() -> None:
    s = acc.cpu.Stream()
    for bad in (1.0, True, "1", None, np.int64(s.cuda_stream)):
        with pytest.raises(TypeError, match="ExternalStream takes the stream handle as an int"):
            acc.cpu.ExternalStream(bad)
    for bad_handle in (-1, 2 ** 80, s.cuda_stream + 10 ** 6):
        with pytest.raises(ValueError, match="not a live stream"):
            acc.cpu.ExternalStream(bad_handle)
    with pytest.raises(ValueError, match="Expected a cpu device"):
        acc.cpu.ExternalStream(s.cuda_stream, f"{NAME}:0")
    with pytest.raises(IndexError):
        acc.cpu.ExternalStream(s.cuda_stream, 99)
    with pytest.raises(TypeError):
        acc.cpu.ExternalStream(s.cuda_stream, 0.0)  # type: ignore[arg-type]
    # the default stream's handle (0) wraps the default stream
    assert acc.cpu.ExternalStream(acc.cpu.default_stream().cuda_stream) == acc.cpu.default_stream()


def test_external_stream_negative_device_means_the_current_one() -> None:
    # torch.cuda.ExternalStream(ptr, device) runs under torch.cuda.device(device), a no-op for
    # a negative index, as acc.cpu.Stream(-1) already reads it
    s = acc.cpu.Stream()
    for current in (-1, -5, acc.cpu.device(-1)):
        x = acc.cpu.ExternalStream(s.cuda_stream, current)
        assert x == s and x.device_index == acc.cpu.current_device()


def test_external_stream_is_non_owning_and_current_in_with() -> None:
    s = acc.cpu.Stream(priority=-1)
    x = acc.cpu.ExternalStream(stream_ptr=s.cuda_stream)
    assert x == s and hash(x) == hash(s) and isinstance(x, acc.cpu.Stream)
    assert x.native_handle == x.cuda_stream == x.stream_id == s.stream_id
    assert x.priority == 0   # documented: 0 for wrapped streams
    with x:
        assert acc.cpu.current_stream() == s
    x.close()
    x.close()
    assert x.is_closed and not s.is_closed and s.query()   # the stream itself lives on
    assert x != s and x == x
    assert repr(x).startswith("<accelrt.cpu.ExternalStream device=cpu:0 stream_id=0x")
    assert repr(x).endswith(" closed>")


# ---------------------------------------------------------------------- identity
def test_eq_hash_repr_of_open_closed_and_viewed_streams() -> None:
    s = acc.Stream("cpu")
    d = {s: 1}
    view = acc.cpu.Stream(stream_id=s.stream_id, device_index=0, device_type="cpu")
    assert view == s and s == view and hash(view) == hash(s)
    assert (s == 5) is False and (s != "x") is True
    with pytest.raises(TypeError):
        _ = s < s  # type: ignore[operator]
    s.close()
    assert d[s] == 1 and s in d              # the hash survives close()
    assert s == s and s != view and view != s
    assert repr(s).endswith(" closed>") and "stream_id=0x" in repr(s)
    assert s.device == acc.device("cpu:0")   # fields that do not touch the handle still work
    for read in (lambda: s.stream_id, lambda: s.native_handle, s.query, s.synchronize):
        with pytest.raises(acc.ClosedError):
            read()


def test_current_stream_view_equals_generic_current_stream() -> None:
    generic, view = acc.current_stream("cpu"), acc.cpu.current_stream()
    assert generic == view and hash(generic) == hash(view)
    assert view.native_handle == generic.native_handle


# ---------------------------------------------------------------------- copy and pickle
def _objects() -> list[Any]:
    s = acc.cpu.Stream()
    return [acc.Stream("cpu"), s, acc.cpu.ExternalStream(s.cuda_stream), acc.Event("cpu"),
            acc.cpu.Event(), acc.current_stream("cpu")]


@pytest.mark.parametrize("how", [copy.copy, copy.deepcopy, pickle.dumps,
                                 lambda o: o.__reduce_ex__(2)])
def test_streams_and_events_refuse_copy_and_pickle(how: Callable[[Any], Any]) -> None:
    # torch 2.14 (CPU build): copy.copy/deepcopy/pickle.dumps of torch.Stream and torch.Event
    # raise TypeError "cannot pickle 'torch.Stream' object"
    for o in _objects():
        with pytest.raises(TypeError, match="cannot be pickled"):
            how(o)


# ---------------------------------------------------------------------- elapsed_time
def _timed(device: str = "cpu", stream: acc.Stream | None = None) -> acc.Event:
    e = acc.Event(device, enable_timing=True)
    e.record(stream)
    return e


def test_elapsed_time_orders_of_checks() -> None:
    a, b = acc.Event("cpu", enable_timing=True), acc.Event("cpu", enable_timing=True)
    with pytest.raises(ValueError, match="must be recorded"):
        a.elapsed_time(b)
    a.record()
    with pytest.raises(ValueError, match="must be recorded"):
        a.elapsed_time(b)
    with pytest.raises(ValueError, match="must be recorded"):
        b.elapsed_time(a)
    plain = acc.Event("cpu")   # unrecorded and untimed: the timing message comes first
    with pytest.raises(ValueError, match="enable_timing=True"):
        a.elapsed_time(plain)
    b.record()
    b.synchronize()
    forward, backward = a.elapsed_time(b), b.elapsed_time(a)
    assert isinstance(forward, float) and forward >= 0.0 and backward == -forward
    assert a.elapsed_time(a) == 0.0
    for bad in (None, 1.0, acc.Stream("cpu")):
        with pytest.raises(TypeError, match="elapsed_time\\(\\) takes an accelrt.Event"):
            a.elapsed_time(bad)  # type: ignore[arg-type]
    b.close()
    with pytest.raises(acc.ClosedError):
        a.elapsed_time(b)
    with pytest.raises(acc.ClosedError):
        b.elapsed_time(a)


def test_elapsed_time_across_devices_backends_and_classes() -> None:
    a0 = _timed(f"{NAME}:0", acc.Stream(f"{NAME}:0"))
    a1 = _timed(f"{NAME}:1", acc.Stream(f"{NAME}:1"))
    a0.synchronize()
    a1.synchronize()
    with pytest.raises(RuntimeError, match="same device") as info:
        a0.elapsed_time(a1)
    assert isinstance(info.value, ValueError)
    c = _timed("cpu")
    c.synchronize()
    with pytest.raises(RuntimeError, match="does not match other's device type"):
        c.elapsed_time(a0)
    d = acc.cpu.Event(enable_timing=True)   # a device module's event and a generic one
    d.record()
    d.synchronize()
    assert c.elapsed_time(d) >= 0.0 and d.elapsed_time(c) <= 0.0


def test_elapsed_time_before_completion_and_after_rerecord() -> None:
    s = acc.Stream(f"{NAME}:0")
    a = _timed(f"{NAME}:0", s)
    with Gate() as gate:
        backends.get_backend(NAME).launch_host_func(0, gate, s.stream_id)
        b = _timed(f"{NAME}:0", s)
        with pytest.raises(RuntimeError, match="must be completed"):
            a.elapsed_time(b)
        gate.open()
        b.synchronize()
    first = a.elapsed_time(b)
    assert first >= 0.0
    a.record(s)          # a re-record moves the start after the end
    a.synchronize()
    assert a.elapsed_time(b) <= 0.0


# ---------------------------------------------------------------------- blocking, ipc
def test_blocking_event_flags_and_results() -> None:
    e = acc.Event("cpu", blocking=True)
    for bad in (1, None, np.bool_(True)):
        with pytest.raises(TypeError, match="blocking must be a bool"):
            acc.Event("cpu", blocking=bad)  # type: ignore[arg-type]
    assert e.query()       # never recorded: complete
    e.synchronize()
    e.record()
    e.synchronize()
    assert e.query() and e.event_id != 0


def test_interprocess_events_hostile_handles_and_orders() -> None:
    timed = acc.Event("cpu", interprocess=True, enable_timing=True)   # lazy, as in CUDA:
    with pytest.raises(ValueError, match="cannot have enable_timing=True"):
        timed.record()                                                # created on first use
    with pytest.raises(ValueError, match="cannot have enable_timing=True"):
        timed.ipc_handle()
    with pytest.raises(RuntimeError, match="needs an event made with interprocess=True"):
        acc.Event("cpu").ipc_handle()
    e = acc.Event("cpu", interprocess=True)
    h = e.ipc_handle()            # before any record: the event is created, as in CUDA
    assert isinstance(h, bytes) and e.event_id != 0
    e.record()
    opened = acc.cpu.Event.from_ipc_handle(0, e.ipc_handle())
    assert type(opened) is acc.cpu.Event and not opened.enable_timing
    opened.synchronize()
    assert opened.query() and opened.device == acc.device("cpu:0")
    for bad in (bytearray(h), memoryview(h), h.hex(), None):
        with pytest.raises(TypeError, match="handle must be bytes"):
            acc.Event.from_ipc_handle("cpu", bad)  # type: ignore[arg-type]
    for junk in (b"", b"garbage", h[:-1], h + b"\0"):
        with pytest.raises(ValueError):
            acc.Event.from_ipc_handle("cpu", junk)
    with pytest.raises(IndexError):
        acc.Event.from_ipc_handle("cpu:99", h)
    with pytest.raises(ValueError, match="Expected a cpu device"):
        acc.cpu.Event.from_ipc_handle(f"{NAME}:0", h)
    e.close()
    with pytest.raises(acc.ClosedError):
        e.ipc_handle()


# ---------------------------------------------------------------------- module extras
def test_priority_range_and_streams_submodule() -> None:
    least, greatest = acc.cpu.Stream.priority_range()
    assert greatest <= 0 <= least
    assert acc.cpu.Stream().priority_range() == (least, greatest)
    assert not hasattr(acc.Stream, "priority_range")   # torch.Stream has none either
    for p in (greatest, least, np.int32(greatest)):
        assert acc.cpu.Stream(priority=p).priority == p
    with pytest.raises(ValueError, match="out of range"):
        acc.cpu.Stream(priority=greatest - 1)
    with pytest.raises(ValueError, match="out of range"):
        acc.cpu.Stream(priority=least + 1)
    mod = acc.cpu.streams
    assert sorted(mod.__all__) == ["Event", "ExternalStream", "Stream"]
    assert mod.Stream is acc.cpu.Stream and mod.ExternalStream is acc.cpu.ExternalStream
    assert mod.Event is acc.cpu.Event
