"""accelrt.Event: lazy creation, record/query/synchronize/wait, elapsed_time messages."""

from __future__ import annotations

import dataclasses
import gc
import pickle
import uuid
from typing import Any

import pytest
from helpers import register_toy
from helpers.registry import module_backends

import accelrt as acc
from accelrt import _backend
from accelrt.backends import Capabilities
from accelrt.backends.cpu import CpuBackend
from accelrt.testing import SimulatedBackend


def test_fresh_event_is_complete_and_has_no_handle(backend: str) -> None:
    e = acc.Event()
    assert e.event_id == 0
    assert e.query() is True
    e.synchronize()  # no-op
    e.wait()         # no-op
    assert e.event_id == 0
    assert e.device == acc.device(backend)  # no index until the first record, as torch.Event
    e.record()
    assert e.device == acc.device(backend, acc.current_device_index())


def test_record_creates_lazily_then_reuses(backend: str) -> None:
    e = acc.Event()
    e.record()
    h = e.event_id
    assert h != 0
    e.record(acc.Stream())
    assert e.event_id == h
    e.synchronize()
    assert e.query() is True


def test_record_on_current_stream_by_default() -> None:
    name, toy = register_toy()
    s = acc.Stream(f"{name}:0")
    e = acc.Event(f"{name}:0")
    with s:
        e.record()
    assert toy.last_record(e.event_id) == (0, s.stream_id)
    e.record()
    assert toy.last_record(e.event_id) == (0, 0)  # the default stream again


def test_query_and_synchronize_follow_pending_work() -> None:
    name, toy = register_toy()
    s = acc.Stream(f"{name}:0")
    toy.launch_work(s.stream_id)
    e = s.record_event()
    assert e.query() is False
    e.synchronize()
    assert e.query() is True
    assert toy.calls(0)["event_synchronize"] == 1


def test_record_on_other_device_is_value_error() -> None:
    name, _ = register_toy()
    e = acc.Event(f"{name}:0")
    e.record(acc.Stream(f"{name}:0"))   # the first record binds it (as torch.Event)
    with pytest.raises(ValueError, match="does not match recording stream's device"):
        e.record(acc.Stream(f"{name}:1"))
    with pytest.raises(ValueError, match="does not match recording stream's device"):
        e.record(acc.Stream("cpu:0"))
    with pytest.raises(TypeError, match="accelrt.Stream or None"):
        e.record("cpu:0")  # type: ignore[arg-type]


def test_wait_makes_stream_wait_and_checks_types() -> None:
    waits: list[tuple[int, int, int]] = []

    class Waits(SimulatedBackend):
        def stream_wait_event(self, index: int, stream: Any, event: Any) -> None:
            waits.append((index, stream, event))
            super().stream_wait_event(index, stream, event)

    name, _ = register_toy(cls=Waits)
    e = acc.Event(f"{name}:0")
    e.record()
    other = acc.Stream(f"{name}:1")
    e.wait(other)  # cross-device wait within a backend is allowed
    assert waits == [(1, other.stream_id, e.event_id)]
    e.wait()  # current stream of the current device of that backend
    assert waits[-1] == (0, 0, e.event_id)
    with pytest.raises(TypeError, match="accelrt.Stream or None"):
        e.wait(1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot wait"):
        e.wait(acc.Stream("cpu"))


def test_elapsed_time_measures_ms() -> None:
    a = acc.Event("cpu", enable_timing=True)
    b = acc.Event("cpu", enable_timing=True)
    a.record()
    b.record()
    b.synchronize()
    t = a.elapsed_time(b)
    assert isinstance(t, float) and t >= 0.0
    assert b.elapsed_time(a) <= 0.0


def test_elapsed_time_needs_timing_with_pytorch_message() -> None:
    a = acc.Event("cpu", enable_timing=True)
    b = acc.Event("cpu")
    a.record()
    b.record()
    with pytest.raises(ValueError, match=r"Both events must be created with argument "
                                         r"'enable_timing=True'\."):
        a.elapsed_time(b)
    with pytest.raises(ValueError, match="enable_timing=True"):
        b.elapsed_time(a)


def test_elapsed_time_needs_records_with_pytorch_message() -> None:
    a = acc.Event("cpu", enable_timing=True)
    b = acc.Event("cpu", enable_timing=True)
    with pytest.raises(ValueError, match=r"Both events must be recorded before calculating "
                                         r"elapsed time\."):
        a.elapsed_time(b)
    a.record()
    with pytest.raises(ValueError, match="must be recorded"):
        a.elapsed_time(b)


def test_elapsed_time_needs_completion() -> None:
    name, toy = register_toy()
    s = acc.Stream(f"{name}:0")
    a = acc.Event(f"{name}:0", enable_timing=True)
    b = acc.Event(f"{name}:0", enable_timing=True)
    a.record(s)
    toy.launch_work(s.stream_id)
    b.record(s)
    with pytest.raises(RuntimeError, match="Both events must be completed"):
        a.elapsed_time(b)
    b.synchronize()
    assert a.elapsed_time(b) >= 0.0


def test_elapsed_time_bad_partners() -> None:
    name, _ = register_toy()
    a = acc.Event(f"{name}:0", enable_timing=True)
    with pytest.raises(TypeError, match="accelrt.Event"):
        a.elapsed_time(1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="does not match other's device type"):
        a.elapsed_time(acc.Event("cpu", enable_timing=True))
    b = acc.Event(f"{name}:1", enable_timing=True)
    a.record()
    b.record(acc.current_stream(f"{name}:1"))   # (record() is device 0's current stream)
    with pytest.raises(ValueError, match="same device"):
        a.elapsed_time(b)


def test_flags_must_be_bool() -> None:
    with pytest.raises(TypeError, match="enable_timing must be a bool"):
        acc.Event("cpu", enable_timing=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="blocking must be a bool"):
        acc.Event("cpu", blocking="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="interprocess must be a bool"):
        acc.Event("cpu", interprocess=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        acc.Event("cpu", True)  # type: ignore[misc]  # flags are keyword-only
    assert acc.Event("cpu", enable_timing=True, blocking=True).enable_timing is True


def test_bad_devices() -> None:
    with pytest.raises(IndexError):
        acc.Event("cpu:1000")
    with pytest.raises(TypeError):
        acc.Event([0])  # type: ignore[arg-type]
    with pytest.raises(acc.BackendUnavailableError, match="Unknown backend"):
        acc.Event("nosuchdev")


def test_ipc_handle_requires_interprocess_flag() -> None:
    with pytest.raises(RuntimeError, match="interprocess=True"):
        acc.Event("cpu").ipc_handle()
    with pytest.raises(TypeError, match="bytes"):
        acc.Event.from_ipc_handle("cpu", "abc")  # type: ignore[arg-type]


def test_event_destroyed_when_collected_only_if_created() -> None:
    name, toy = register_toy()
    e = acc.Event(f"{name}:0")
    del e
    gc.collect()
    assert toy.calls(0)["event_destroy"] == 0
    e = acc.Event(f"{name}:0")
    e.record()
    del e
    gc.collect()
    assert toy.calls(0)["event_destroy"] == 1 and toy.live_handles()["events"] == 0


def test_repr_and_pickle() -> None:
    e = acc.Event("cpu:0", enable_timing=True)
    assert repr(e) == "<accelrt.Event uninitialized>"
    e.record()
    assert repr(e) == f"<accelrt.Event {e.event_id:#x}>"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(e)


def test_event_on_second_device_of_multi_device_backend() -> None:
    acc.backends.register("cpu4", lambda: CpuBackend(num_devices=4, name="cpu4"), replace=True)
    s = acc.Stream("cpu4:3")
    e = acc.Event("cpu4:3", enable_timing=True)
    e.record(s)
    e.synchronize()
    assert e.device == acc.device("cpu4", 3) and e.query()


def test_record_in_a_new_thread_initialises_device_there() -> None:
    from helpers import run_in_thread
    name, toy = register_toy()
    e = acc.Event(f"{name}:0")
    e.record()
    n = toy.calls(0)["init_device"]
    run_in_thread(e.record)
    assert toy.calls(0)["init_device"] == n + 1


# ---------------------------------------------------------------------- interprocess events

def test_interprocess_event_refused_at_construction_where_unsupported() -> None:
    name, toy = register_toy()  # the Backend default: no interprocess events
    with pytest.raises(ValueError, match=f"{name} backend cannot share events"):
        acc.Event(f"{name}:0", interprocess=True)
    assert toy.calls(0)["event_create"] == 0


def test_interprocess_event_on_a_backend_that_supports_it() -> None:

    class IpcToy(SimulatedBackend):
        name = "ipctoy"

        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.opened: dict[int, int] = {}   # opened event -> the event its handle named

        def capabilities(self, index: int) -> Capabilities:
            return dataclasses.replace(super().capabilities(index), interprocess_events=True)

        def event_ipc_handle(self, index: int, event: int) -> bytes:
            return event.to_bytes(8, "little")

        def event_from_ipc_handle(self, index: int, handle: bytes) -> int:
            # an event of its own for the opened handle, as another process would have (the
            # same live handle for two events is a broken backend's, refused by the core)
            opened = self.event_create(index, False, False, False)
            self.opened[opened] = int.from_bytes(handle, "little")
            return opened

    toy = IpcToy(device_count=2)
    acc.backends.register("ipctoy", lambda: toy, replace=True)
    try:
        e = acc.Event("ipctoy:1", interprocess=True)
        e.record(acc.current_stream("ipctoy:1"))   # binds it to device 1 (as torch.Event)
        handle = e.ipc_handle()
        assert e.event_id != 0 and handle == e.event_id.to_bytes(8, "little")
        opened = acc.Event.from_ipc_handle("ipctoy:1", handle)
        assert toy.opened[opened.event_id] == e.event_id
        assert opened.device == acc.device("ipctoy", 1)
        opened.close()
    finally:
        with _backend._lock:  # no public unregister: forget the test backend
            _backend._factories.pop("ipctoy", None)
            _backend._instances.pop("ipctoy", None)


def test_cuda_backend_declares_interprocess_events() -> None:
    from accelrt.backends.cuda import CudaBackend
    unstarted = object.__new__(CudaBackend)  # the answer needs no context: device attributes
    unstarted._caps = {}
    unstarted.get_device_properties = lambda index: {"attributes": {}}  # type: ignore[method-assign]

    def no_context(index: int) -> None:
        raise AssertionError("capabilities() must not create a device context")

    unstarted._use = no_context  # type: ignore[method-assign]
    assert unstarted.supports_interprocess_events(0) is True


def test_device_module_event_opens_an_ipc_handle() -> None:
    """``acc.cpu.Event`` / ``acc.cuda.Event`` take ``enable_timing`` first (torch.cuda.Event's
    signature): ``from_ipc_handle`` on them once passed the device there (TypeError, found on
    a GPU when a CUDA event was unpickled in another process)."""
    e = acc.cpu.Event(interprocess=True)
    e.record()
    opened = acc.cpu.Event.from_ipc_handle("cpu", e.ipc_handle())
    assert type(opened) is acc.cpu.Event and opened.query()


_EXT = "evext"
# closed (worker thread stopped) and unregistered after the module
_backends = module_backends(
    {_EXT: lambda: CpuBackend(num_devices=1, async_streams=True, name=_EXT)})


def test_external_event_is_a_record_node_of_a_capture() -> None:
    # torch.cuda.Event(enable_timing, blocking, interprocess, external): inside a capture an
    # external event is recorded at every replay and stays usable outside the capture
    from helpers.gates import Gate

    m = acc.backends.device_module(_EXT)
    b = _backend.get_backend(_EXT)
    s, side = m.Stream(0), m.Stream(0)
    ext, internal = m.Event(False, False, False, True), m.Event()
    g = m.Graph()
    with Gate() as gate:
        with m.graph(g, stream=s):
            b.launch_host_func(0, gate, s.stream_id)
            ext.record()
            internal.record()
            assert ext.query() is True   # a record node: not one of the capture's events
            with pytest.raises(acc.DeviceError, match="open graph capture"):
                internal.query()
            ext.wait(side)               # an external event never joins a stream to it
            assert not side.is_capturing()
        assert ext.query() is True       # captured, not run
        with s:
            g.replay()
        assert ext.query() is False      # the replay recorded it behind the closed gate
        gate.open()
        ext.synchronize()
        assert ext.query() is True
    with pytest.raises(TypeError, match="external must be a bool"):
        m.Event(external=1)  # type: ignore[arg-type]


def test_external_event_is_an_ordinary_event_outside_a_capture() -> None:
    name, _toy = register_toy()
    m = acc.backends.device_module(name)
    s = m.Stream(0)
    e = m.Event(external=True)
    e.record(s)
    e.wait(m.Stream(0))
    e.synchronize()
    assert e.query() is True
    assert acc.cpu.Event(external=False).query() is True


def test_query_reads_the_streams_idle_hint() -> None:
    """``Event.query()`` of a recorded event answers True without the backend's
    ``event_query`` while the backend's ``streams_idle`` hint holds (every operation completed
    when its call returned), and asks the backend otherwise, and always for an interprocess
    event (another process may record it)."""
    asked: list[int] = []

    class Counting(CpuBackend):
        def event_query(self, index: int, event: Any) -> bool:
            asked.append(event)
            return super().event_query(index, event)

    name = "qhint_" + uuid.uuid4().hex[:8]
    acc.backends.register(name, lambda: Counting(num_devices=1, async_streams=False, name=name))
    b = None
    try:
        b = acc.backends.get_backend(name)
        e = acc.Event(f"{name}:0")
        e.record()
        assert b.streams_idle and e.query() is True and asked == []
        ipc = acc.Event(f"{name}:0", interprocess=True)
        ipc.record()
        assert ipc.query() is True and asked == [ipc.event_id]
        b.streams_idle = False   # (False is always correct: the core asks)
        assert e.query() is True and asked == [ipc.event_id, e.event_id]
    finally:
        acc.backends.unregister(name)
        if b is not None:
            b.close()

    # a backend whose work stays pending (the hint False) is asked: its answer stands
    toy, _inst = register_toy()
    pending = acc.Event(f"{toy}:0")
    pending.record(acc.Stream(f"{toy}:0"))
    assert pending.query() is False
