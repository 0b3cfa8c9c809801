"""Small torch-parity fixes of the runtime left open by session 26's reviews. Each test failed
before its change. The torch expectations were observed by running torch 2.14.1 (a CUDA build
on a machine without a GPU, so the CPU side and the argument parser run) and are written here
as literals (CI has no torch).
"""

from __future__ import annotations

import importlib.util
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt import _backend, backends
from accelrt.backends.cpu import CpuBackend
from accelrt.random import Generator

NAME = "rvp26w"      # two simulated devices; a CpuBackend registered under another name
_backends = module_backends({NAME: lambda: CpuBackend(num_devices=2, name=NAME)})

ASYNC = "rvp26wa"    # one with asynchronous streams (their errors are kept)
HAVE_TORCH = importlib.util.find_spec("torch") is not None


class _Index:
    """An object with ``__index__`` only (not a numpy integer)."""

    def __index__(self) -> int:
        return 1


# ---------------------------------------------------------------------- (1) device forms

def test_numpy_integers_and_bytes_are_devices_where_torch_parser_reads_them() -> None:
    # observed on torch 2.14.1: torch.device(np.int64(0)) and np.int32/np.uint8 are
    # device(type='cuda', index=N) (the accelerator's index), torch.device("cpu", np.int64(0))
    # is cpu:0, torch.device(b"cpu:0") is cpu:0; torch.Stream/torch.Event/torch.Generator/
    # torch.empty(device=np.int64(0)) reach CUDA (read as cuda:0) and (device=b"cpu") make
    # cpu objects. accelrt refused them all ("expected a device, int, str or None") except
    # in acc.random.Generator.
    acc.set_current_accelerator(NAME)
    one = acc.device(NAME, 1)
    assert acc.device(np.int64(1)) == acc.device(np.uint8(1)) == one
    assert acc.device(NAME, np.int32(1)) == acc.device(f"{NAME}:1".encode()) == one
    assert acc.device(NAME.encode()) == acc.device(NAME)
    for dev in (np.int64(1), np.int32(1), f"{NAME}:1".encode()):
        with acc.Stream(device=dev) as s:
            assert s.device == one
        s.close()
        ev = acc.Event(device=dev)       # (torch.Event keeps the type only, until a record)
        assert ev.device == acc.device(NAME)
        ev.record(acc.current_stream(f"{NAME}:1"))
        assert ev.device == one
        ev.close()
        x = acc.empty(2, device=dev)
        assert x.device == one and x.to(np.int64(0)).device == acc.device(NAME, 0)
        assert Generator(dev).device == one


def test_numpy_integers_stay_refused_where_torch_reads_them_as_the_current_device() -> None:
    # observed on torch 2.14.1: torch.accelerator's/torch.cuda's _get_device_index(np.int64(1),
    # optional=False) (set_device_index, torch.cuda.set_device) raises ValueError "Expected a
    # torch.device with a specified index or an integer, but got:1" (bytes too); with
    # optional=True (current_stream, synchronize, the statistics, torch.cuda.Stream's device
    # context) it returns the current device index, ignoring the argument. accelrt keeps
    # refusing them there (TypeError, also that ValueError; docs/differences.md).
    acc.set_current_accelerator(NAME)
    for dev in (np.int64(1), f"{NAME}:1".encode()):
        for call in (acc.set_device_index, acc.current_stream, acc.synchronize,
                     acc.memory_stats, acc.cpu.Stream, acc.cpu.current_stream):
            with pytest.raises(TypeError, match="^expected a device, int, str or None") as info:
                call(dev)
            assert isinstance(info.value, ValueError)
    assert acc.current_device_index() == 0


def test_device_index_takes_index_objects_and_refuses_bytes_as_torch_does() -> None:
    # observed on torch 2.14.1: torch.accelerator.device_index's pybind call
    # (_accelerator_exchangeDevice) takes np.int64(0) and an object with __index__ (they reach
    # CUDA) and refuses b"0" ("incompatible function arguments", a TypeError); accelrt's
    # device_index already did so: kept, pinned here beside the normaliser's forms
    acc.set_current_accelerator(NAME)
    for dev in (np.int64(1), _Index()):
        with acc.device_index(dev):     # type: ignore[arg-type]
            assert acc.current_device_index() == 1
    with pytest.raises(TypeError, match="device_index\\(\\) takes an int or None, got bytes"):
        acc.device_index(b"1")          # type: ignore[arg-type]


def test_other_index_objects_bools_and_floats_stay_refused_as_torch_refuses_them() -> None:
    # observed on torch 2.14.1: an object with __index__ only, True, np.bool_(False), a 0-d
    # numpy array and 0.0 raise TypeError in torch.device ("received an invalid combination
    # of arguments"), torch.Stream/torch.Event/torch.Generator ("argument 'device' must be
    # torch.device, not Idx"); np.int64(-1) raises RuntimeError "Device index must not be
    # negative". acc.random.Generator took the __index__ object as an index.
    acc.set_current_accelerator(NAME)
    for bad in (_Index(), True, np.bool_(False), np.array(0), 0.0):
        for make in (acc.device, acc.Stream, acc.Event, Generator, acc.current_stream,
                     acc.set_device_index):
            with pytest.raises(TypeError):
                make(bad)
    for make in (acc.device, acc.Stream, Generator):
        with pytest.raises(ValueError, match="Device index must not be negative"):
            make(np.int64(-1))
    with pytest.raises(IndexError):
        acc.Stream(np.int64(2))
    with pytest.raises(TypeError, match="device index must be an int or None, got numpy.bool"):
        acc.device(NAME, np.bool_(True))
    with pytest.raises(RuntimeError, match="Invalid device string"):   # torch's words
        acc.device(b"cpu:x")
    with pytest.raises(UnicodeDecodeError):                  # torch: the same error
        acc.device(b"\xff")


# ---------------------------------------------------------------------- (2) backend names

def test_a_cpu_backend_registered_under_another_name_names_itself_in_its_errors() -> None:
    # the cpu backend's stream/event errors said "cpu:" whatever name it was registered
    # under (cpu/_backend.py's _stream, _event, _check_not_capturing, stream_destroy, the
    # kept errors of its work and the event timestamps in cpu/_streams.py)
    b: Any = _backend.get_backend(NAME)
    with pytest.raises(ValueError, match=rf"^stream handle 999 is not a live stream of {NAME}:1;"):
        b.stream_synchronize(1, 999)
    with pytest.raises(ValueError, match=rf"^event handle 999 is not a live event of {NAME}:1;"):
        b.event_query(1, 999)
    with pytest.raises(ValueError, match=rf"^the default stream of {NAME}:0 cannot be destroyed"):
        b.stream_destroy(0, 0)
    start, end = b.event_create(0, False, False, False), b.event_create(0, False, False, False)
    try:
        b.event_record(0, start, 0)
        b.event_record(0, end, 0)
        with pytest.raises(acc.DeviceError, match=rf"^{NAME}: event {start} was created without"):
            b.event_elapsed_time(0, start, end)
    finally:
        b.event_destroy(0, start)
        b.event_destroy(0, end)
    s = b.stream_create(0, 0)
    try:
        b.graph_capture_begin(0, s)
        with pytest.raises(acc.DeviceError,
                           match=rf"^{NAME}: stream_destroy is not permitted while stream {s} "
                                 rf"of {NAME}:0 is capturing"):
            b.stream_destroy(0, s)
        b.graph_destroy(0, b.graph_capture_end(0, s))

        def fail() -> None:
            raise KeyError("boom")

        with pytest.raises(acc.DeviceError,    # synchronous streams: at once
                           match=rf"^{NAME}: work on stream {s} of {NAME}:0 failed: KeyError"):
            b.launch_host_func(0, fail, s)
    finally:
        b.stream_destroy(0, s)
    backends.register(ASYNC, lambda: CpuBackend(num_devices=1, async_streams=True, name=ASYNC),
                      replace=True)
    try:
        a: Any = _backend.get_backend(ASYNC)
        s = a.stream_create(0, 0)
        a.launch_host_func(0, fail, s)                # kept, raised by the next wait
        with pytest.raises(acc.DeviceError,
                           match=rf"^{ASYNC}: work on stream {s} of {ASYNC}:0 failed: KeyError"):
            a.stream_synchronize(0, s)
        a.stream_destroy(0, s)
    finally:
        backends.unregister(ASYNC)


@pytest.mark.skipif(backends.unavailable_reason("opencl") is not None,
                    reason="no OpenCL platform here")
def test_an_opencl_backend_registered_under_another_name_names_itself() -> None:
    from accelrt.backends.opencl import OpenCLBackend
    name = "rvp26wcl"
    b = OpenCLBackend(name=name)
    try:
        with pytest.raises(ValueError, match=rf"^stream handle 999 is not a live stream of {name}:0;"):
            b.stream_synchronize(0, 999)
        with pytest.raises(ValueError, match=rf"^event handle 999 is not a live event of {name}:0;"):
            b.event_query(0, 999)
        with pytest.raises(ValueError, match=rf"^the default stream of {name}:0 cannot be"):
            b.stream_destroy(0, 0)
        ev = b.event_create(0, False, False, False)
        b.event_record(0, ev, 0)
        with pytest.raises(acc.DeviceError, match=rf"^{name}: event {ev} was created without"):
            b.event_elapsed_time(0, ev, ev)
        b.event_destroy(0, ev)
    finally:
        b.close()


# ---------------------------------------------------------------------- (3) from_torch device

def test_from_torch_device_reads_an_object_of_torch_device_shape_without_torch() -> None:
    # torch.device("cpu") has .type == "cpu" and .index None, torch.device("cpu", 1) index 1
    # (observed on torch 2.14.1); from_torch(t, device=torch.device("cpu")) raised TypeError
    # "expected a device, int, str or None, got torch.device"
    from accelrt.interop.torch import _device_arg
    assert _device_arg(SimpleNamespace(type="cpu", index=None)) == acc.device("cpu")
    assert _device_arg(SimpleNamespace(type=NAME, index=1)) == acc.device(NAME, 1)
    for other in (None, 0, "cpu:0", acc.device("cpu"), SimpleNamespace(type="cpu", index=True),
                  SimpleNamespace(type=1, index=0), SimpleNamespace(kind="cpu")):
        assert _device_arg(other) is other


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (an optional extra)")
def test_from_torch_takes_a_torch_device() -> None:
    import torch

    from accelrt.interop.torch import from_torch
    t = torch.arange(4, dtype=torch.float32)
    a = from_torch(t, device=torch.device("cpu"))
    assert a.device == acc.device("cpu", 0) and a.numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert from_torch(t, device=torch.device("cpu", 0)).device == acc.device("cpu", 0)
    with pytest.raises(acc.BackendUnavailableError):
        from_torch(t, device=torch.device("meta"))
