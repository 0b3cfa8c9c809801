"""PyTorch's Event semantics (issue 10 §2): an event has no device until its first record,
the first record binds it to the stream's device, later records on another device raise
PyTorch's RuntimeError, unrecorded events are complete, and reprs follow torch.cuda's."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from helpers import register_toy
from helpers.registry import module_backends

import accelrt as acc
from accelrt import backends
from accelrt.backends.cpu import CpuBackend

# two simulated cpu devices, with synchronous and with asynchronous (worker thread) streams;
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    "evsync": lambda: CpuBackend(num_devices=2, async_streams=False, name="evsync"),
    "evasync": lambda: CpuBackend(num_devices=2, async_streams=True, name="evasync"),
})


@pytest.fixture(params=["evsync", "evasync"])
def two(request: pytest.FixtureRequest) -> Iterator[str]:
    """A two-device cpu backend (sync or async streams), current, with device 0 current."""
    name: str = request.param
    acc.set_current_accelerator(name)
    acc.set_device_index(0)
    yield name
    acc.synchronize(f"{name}:0")
    acc.synchronize(f"{name}:1")


def test_unrecorded_event_has_no_device(two: str) -> None:
    # torch.Event: only the device's type is kept until the first record (device(type=...)),
    # whatever index it was made with; torch.cuda.Event (a device module's) answers None
    e = acc.Event()
    assert e.device == acc.device(two) and e.device.index is None
    assert acc.Event(two).device == acc.device(two)
    assert acc.Event(acc.device(two)).device == acc.device(two)
    assert acc.Event(f"{two}:1").device == acc.device(two)
    assert acc.Event(1).device == acc.device(two)
    e = acc.Event(f"{two}:1")
    e.record(acc.current_stream(f"{two}:0"))   # the index it was made with is not kept
    assert e.device == acc.device(two, 0)


def test_device_module_event_device_is_none_until_recorded() -> None:
    # torch.cuda.Event().device is None until the first record (CUDAEvent::device()); a device
    # module's device= (accelrt's keyword) names the device at once
    assert acc.cpu.Event().device is None and acc.cpu.Event(True).device is None
    assert acc.cpu.Event(device=0).device == acc.device("cpu", 0)
    e = acc.cpu.Event()
    e.record()
    assert e.device == acc.device("cpu", acc.cpu.current_device())


def test_event_made_on_device0_recorded_on_device1_belongs_to_device1(two: str) -> None:
    e = acc.Event(enable_timing=True)
    s1 = acc.Stream(f"{two}:1")
    e.record(s1)
    assert e.device == acc.device(two, 1)
    e.synchronize()
    assert e.query()
    # the binding sticks. A later record() without a stream records on the current stream of
    # the current device, as PyTorch does (THPEvent_record, torch.cuda.Event.record): device 0
    # here, which the event refuses with PyTorch's message; on device 1 it records.
    with pytest.raises(RuntimeError, match="Event device 1 does not match recording stream's "
                                           "device 0"):
        e.record()
    with acc.device_index(1):
        e.record()
    assert e.device == acc.device(two, 1)
    end = acc.Event(enable_timing=True)
    end.record(acc.current_stream(f"{two}:1"))   # the same stream: ordered after e
    end.synchronize()
    assert end.device == acc.device(two, 1)
    assert e.query() and e.elapsed_time(end) >= 0.0


def test_record_on_another_device_later_raises_pytorch_runtime_error(two: str) -> None:
    e = acc.Event()
    e.record(acc.Stream(f"{two}:1"))
    with pytest.raises(RuntimeError, match=r"^Event device 1 does not match recording "
                                           r"stream's device 0\.") as info:
        e.record(acc.Stream(f"{two}:0"))
    assert isinstance(info.value, ValueError)  # old `except ValueError` users keep working
    assert e.device == acc.device(two, 1)


def test_record_on_another_backend_raises_pytorch_device_type_message(two: str) -> None:
    e = acc.Event()
    with pytest.raises(RuntimeError, match=rf"^Event device type {two} does not match "
                                           r"recording stream's device type cpu\."):
        e.record(acc.Stream("cpu:0"))
    assert e.device.index is None and e.event_id == 0


def test_event_records_on_the_stream_of_the_device_it_binds_to() -> None:
    # today's bug: the event was made on device 0 and recorded device 0's stream silently
    name, toy = register_toy()
    acc.set_current_accelerator(name)
    acc.set_device_index(0)
    e = acc.Event()
    s1 = acc.Stream(f"{name}:1")
    toy.launch_work(s1.stream_id, 1)
    e.record(s1)
    assert toy.last_record(e.event_id) == (1, s1.stream_id)
    assert e.query() is False
    e.synchronize()
    assert e.query() is True


def test_record_without_stream_binds_to_current_device(two: str) -> None:
    acc.set_device_index(1)
    e = acc.Event()
    e.record()
    assert e.device == acc.device(two, 1)


def test_async_event_on_device1_waits_for_gated_work() -> None:
    acc.set_current_accelerator("evasync")
    acc.set_device_index(0)
    b = backends.get_backend("evasync")
    s1 = acc.Stream("evasync:1")
    gate = threading.Event()
    b.launch_host_func(1, gate.wait, s1.stream_id)
    e = acc.Event()
    e.record(s1)
    assert e.device == acc.device("evasync", 1)
    assert e.query() is False           # recorded behind the gated work of device 1's stream
    gate.set()
    e.synchronize()
    assert e.query() is True


def test_unrecorded_event_operations_as_pytorch(two: str) -> None:
    e = acc.Event(enable_timing=True)
    assert e.query() is True
    e.synchronize()                    # no-op
    e.wait()                           # no-op
    acc.Stream(f"{two}:1").wait_event(e)
    assert e.device.index is None and e.event_id == 0
    other = acc.Event(enable_timing=True)
    other.record()
    with pytest.raises(ValueError, match=r"Both events must be recorded before calculating "
                                         r"elapsed time\."):
        e.elapsed_time(other)


def test_elapsed_time_across_devices_is_runtime_error(two: str) -> None:
    a = acc.Event(enable_timing=True)
    b = acc.Event(enable_timing=True)
    a.record(acc.Stream(f"{two}:0"))
    b.record(acc.Stream(f"{two}:1"))
    b.synchronize()
    with pytest.raises(RuntimeError, match="same device"):
        a.elapsed_time(b)
    with pytest.raises(RuntimeError, match="does not match other's device type"):
        a.elapsed_time(acc.Event("cpu", enable_timing=True))


def test_reprs_follow_pytorch(two: str) -> None:
    e = acc.Event()
    assert repr(e) == "<accelrt.Event uninitialized>"
    e.record(acc.Stream(f"{two}:1"))
    assert repr(e) == f"<accelrt.Event {e.event_id:#x}>"
    s = acc.Stream(f"{two}:1")
    assert repr(s) == f"<accelrt.Stream device={two}:1 stream_id={s.stream_id:#x}>"


def test_device_module_types_print_as_their_module() -> None:
    e = acc.cpu.Event()
    assert type(e).__module__ == "accelrt.cpu"
    assert repr(e) == "<accelrt.cpu.Event uninitialized>"
    e.record()
    assert repr(e) == f"<accelrt.cpu.Event {e.event_id:#x}>"
    s = acc.cpu.Stream()
    assert repr(s).startswith("<accelrt.cpu.Stream device=cpu:0 stream_id=0x")

    class CudaLikeStream(acc.Stream):   # as torch.cuda.Stream: the handle is cuda_stream
        __slots__ = ()

        @property
        def cuda_stream(self) -> int:
            return self.stream_id

    c = CudaLikeStream("cpu:0")
    assert repr(c) == (f"<{__name__}.test_device_module_types_print_as_their_module.<locals>."
                       f"CudaLikeStream device=cpu:0 cuda_stream={c.stream_id:#x}>")

    class MyEvent(acc.Event):
        __slots__ = ()

    assert repr(MyEvent("cpu")) == (f"<{__name__}.test_device_module_types_print_as_their_module"
                                    ".<locals>.MyEvent uninitialized>")


def test_binding_on_every_backend(backend: str) -> None:
    # each available backend (cpu, opencl where PoCL is present, cuda where a GPU is)
    other = "evsync" if backend != "evsync" else "cpu"
    e = acc.Event(enable_timing=True)
    assert e.device.index is None and repr(e) == "<accelrt.Event uninitialized>"
    n = acc.device_count()
    s = acc.Stream(f"{backend}:{n - 1}")
    e.record(s)
    assert e.device == acc.device(backend, n - 1)
    assert repr(e) == f"<accelrt.Event {e.event_id:#x}>"
    end = acc.Event(enable_timing=True)
    end.record(s)
    end.synchronize()
    assert e.query() and e.elapsed_time(end) >= 0.0
    with pytest.raises(RuntimeError, match=rf"^Event device type {backend} does not match "
                                           rf"recording stream's device type {other}\."):
        e.record(acc.Stream(f"{other}:0"))
    if n > 1:
        with pytest.raises(RuntimeError, match=rf"^Event device {n - 1} does not match "
                                               r"recording stream's device 0\."):
            e.record(acc.Stream(f"{backend}:0"))
