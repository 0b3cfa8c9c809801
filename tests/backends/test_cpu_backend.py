"""Tests of the cpu backend (accelrt.backends.cpu), on backend instances made here."""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accelrt as acc
from accelrt import _backend as registry
from accelrt import backends
from accelrt._errors import DeviceError
from accelrt.backends.cpu import CpuBackend, backend_class
from accelrt.backends.cpu._config import (
    ENV_DEVICES,
    ENV_MEMORY,
    ENV_STREAMS,
    config_error,
    parse_memory_size,
    physical_memory,
)

MiB = 1 << 20


def view(ptr: int, nbytes: int) -> np.ndarray:
    return np.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype=np.uint8)


@pytest.fixture
def sync_b():
    b = CpuBackend(num_devices=2, memory_limit="64MiB", async_streams=False)
    yield b
    b.close()


@pytest.fixture
def async_b():
    b = CpuBackend(num_devices=2, memory_limit="64MiB", async_streams=True)
    yield b
    b.close()


@pytest.fixture(params=[False, True], ids=["sync", "async"])
def b(request):
    backend = CpuBackend(num_devices=2, memory_limit="64MiB", async_streams=request.param)
    yield backend
    backend.close()


@pytest.fixture
def clean_env(monkeypatch):
    for var in (ENV_DEVICES, ENV_MEMORY, ENV_STREAMS):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


# ---------------------------------------------------------------------- registry, config

def test_registry_exports_cpu_backend():
    assert backend_class is CpuBackend
    inst = backends.get_backend("cpu")
    assert isinstance(inst, CpuBackend)
    assert inst.name == "cpu"
    assert inst.device_count() >= 1


def test_registered_variant_with_own_name():
    backends.register("cpuasynctest",
                      lambda: CpuBackend(async_streams=True, num_devices=2, name="cpuasynctest"),
                      replace=True)
    b = backends.get_backend("cpuasynctest")
    try:
        assert b.name == "cpuasynctest"
        assert CpuBackend.name == "cpu"
        assert b.device_count() == 2
        assert b.get_device_properties(0)["async_streams"] is True
    finally:
        b.close()
        registry._reset_for_tests("cpuasynctest")


@pytest.mark.parametrize("bad", [3, "", "Cpu", "a-b"])
def test_bad_instance_name(bad):
    with pytest.raises(TypeError if not isinstance(bad, str) else ValueError):
        CpuBackend(name=bad)


def test_env_configuration(clean_env):
    clean_env.setenv(ENV_DEVICES, "3")
    clean_env.setenv(ENV_MEMORY, "512MiB")
    clean_env.setenv(ENV_STREAMS, "async")
    b = CpuBackend()
    try:
        assert b.device_count() == 3
        assert b.get_memory_info(2) == (512 * MiB, 512 * MiB)
        assert b.get_device_properties(0)["async_streams"] is True
        assert CpuBackend.unavailable_reason() is None
    finally:
        b.close()


def test_defaults(clean_env):
    b = CpuBackend()
    assert b.device_count() == 1
    assert b.get_memory_info(0)[1] == physical_memory()
    assert b.get_device_properties(0)["async_streams"] is False


def test_kwargs_override_env(clean_env):
    clean_env.setenv(ENV_DEVICES, "nonsense")
    clean_env.setenv(ENV_MEMORY, "lots")
    clean_env.setenv(ENV_STREAMS, "maybe")
    b = CpuBackend(num_devices=2, memory_limit=1000, async_streams=False)
    assert b.device_count() == 2
    assert b.get_memory_info(1) == (1000, 1000)


@pytest.mark.parametrize("var,value", [
    (ENV_DEVICES, "two"), (ENV_DEVICES, "0"), (ENV_DEVICES, "-1"), (ENV_DEVICES, "1.5"),
    (ENV_MEMORY, "abc"), (ENV_MEMORY, "12XB"), (ENV_MEMORY, "0"), (ENV_MEMORY, "-5MiB"),
    (ENV_STREAMS, "parallel"),
])
def test_bad_env_values(clean_env, var, value):
    clean_env.setenv(var, value)
    reason = CpuBackend.unavailable_reason()
    assert reason is not None and var in reason and repr(value) in reason
    with pytest.raises(ValueError, match=var):
        CpuBackend()


def test_bad_env_makes_registry_report_unavailable(clean_env):
    clean_env.setenv(ENV_DEVICES, "zero")
    backends.register("cpubadenv", CpuBackend, replace=True)
    try:
        with pytest.raises(acc.BackendUnavailableError, match=ENV_DEVICES):
            backends.get_backend("cpubadenv")
    finally:
        registry._reset_for_tests("cpubadenv")


@pytest.mark.parametrize("kwargs,exc", [
    ({"num_devices": 0}, ValueError), ({"num_devices": "2"}, TypeError),
    ({"num_devices": True}, TypeError), ({"memory_limit": 0}, ValueError),
    ({"memory_limit": "big"}, ValueError), ({"memory_limit": 1.5}, TypeError),
    ({"async_streams": "yes"}, TypeError),
])
def test_bad_constructor_args(kwargs, exc):
    with pytest.raises(exc):
        CpuBackend(**kwargs)


@pytest.mark.parametrize("text,expected", [
    ("8GiB", 8 << 30), ("512MiB", 512 * MiB), ("1.5GB", 1_500_000_000), ("1000000", 10**6),
    ("2k", 2048), ("3 KB", 3000), ("1.5 tib", 3 << 39), ("10B", 10), (".5KiB", 512),
])
def test_parse_memory_size(text, expected):
    assert parse_memory_size(text) == expected


@given(st.integers(min_value=1, max_value=10**15),
       st.sampled_from(["", "B", "KB", "KiB", "MB", "MiB", "GB", "GiB"]))
@settings(max_examples=50, deadline=None)
def test_parse_memory_size_roundtrip(n, unit):
    scale = {"": 1, "B": 1, "KB": 1000, "KiB": 1024, "MB": 10**6, "MiB": 1 << 20,
             "GB": 10**9, "GiB": 1 << 30}[unit]
    assert parse_memory_size(f"{n}{unit}") == n * scale


def test_config_error_none_for_good_env():
    assert config_error({ENV_DEVICES: "4", ENV_MEMORY: "1GB", ENV_STREAMS: "ASYNC"}) is None


# ---------------------------------------------------------------------- properties

def test_device_properties(sync_b):
    props = sync_b.get_device_properties(1)
    assert props["total_memory"] == 64 * MiB
    assert isinstance(props["name"], str) and props["name"]
    assert props["multi_processor_count"] >= 1
    assert props["vm_supported"] is True
    assert "supported_dtypes" in sync_b.get_device_capability(0)
    assert sync_b.host_accessible(0)
    with pytest.raises(IndexError, match="out of range"):
        sync_b.get_device_properties(2)
    with pytest.raises(IndexError):
        sync_b.get_memory_info(-1)
    with pytest.raises(TypeError):
        sync_b.get_device_properties("0")


# ---------------------------------------------------------------------- memory

def test_malloc_free_and_budget(b):
    p = b.malloc(0, 10 * MiB)
    assert p != 0 and p % 64 == 0
    assert b.get_memory_info(0) == (54 * MiB, 64 * MiB)
    assert b.get_memory_info(1) == (64 * MiB, 64 * MiB)
    arr = view(p, 10 * MiB)
    arr[:] = 3
    assert int(arr.sum()) == 30 * MiB
    assert b.malloc(0, 60 * MiB) == 0           # over the budget: 0, no exception
    q = b.malloc(0, 54 * MiB)                   # exactly the rest fits
    assert q != 0 and b.get_memory_info(0)[0] == 0
    assert b.malloc(0, 1) == 0
    b.free(0, p)
    b.free(0, q)
    assert b.get_memory_info(0) == (64 * MiB, 64 * MiB)


def test_malloc_bad_inputs(sync_b):
    with pytest.raises(ValueError):
        sync_b.malloc(0, 0)
    with pytest.raises(ValueError):
        sync_b.malloc(0, -1)
    with pytest.raises(TypeError):
        sync_b.malloc(0, 1.0)
    with pytest.raises(TypeError):
        sync_b.malloc(0, True)
    with pytest.raises(IndexError):
        sync_b.malloc(5, 10)
    assert sync_b.malloc(0, np.int64(16)) != 0


def test_free_unknown_or_double(sync_b):
    p = sync_b.malloc(0, 100)
    with pytest.raises(ValueError, match="not returned by malloc"):
        sync_b.free(0, p + 8)
    with pytest.raises(ValueError):
        sync_b.free(1, p)                        # wrong device
    sync_b.free(0, p)
    with pytest.raises(ValueError, match="already freed"):
        sync_b.free(0, p)
    with pytest.raises(TypeError):
        sync_b.free(0, "p")


def test_host_malloc(sync_b):
    p = sync_b.host_malloc(1000)
    assert p % 64 == 0
    view(p, 1000)[:] = 1
    assert sync_b.get_memory_info(0)[0] == 64 * MiB     # not charged to a device
    sync_b.host_free(p)
    with pytest.raises(ValueError):
        sync_b.host_free(p)
    with pytest.raises(ValueError):
        sync_b.host_malloc(0)


def test_dlpack_style_numpy_view(sync_b):
    p = sync_b.malloc(0, 64)
    a = view(p, 64).view(np.float32)
    a[:] = np.arange(16, dtype=np.float32)
    out = np.empty(16, dtype=np.float32)
    sync_b.memcpy(0, out.ctypes.data, p, 64, "d2h", 0)
    np.testing.assert_array_equal(out, np.arange(16, dtype=np.float32))
    sync_b.free(0, p)


# ---------------------------------------------------------------------- virtual memory

def test_vm_map_unmap_budget(clean_env):
    b = CpuBackend(memory_limit="8MiB")
    g = b.vm_granularity(0)
    assert g == 2 * MiB and b.vm_supported(0)
    base = b.vm_reserve(0, 8 * g)                # 16 MiB of address space > budget: fine
    assert base % g == 0
    assert b.get_memory_info(0)[0] == 8 * MiB    # reserving uses no budget
    assert b.vm_map(0, base, 2 * g)
    assert b.get_memory_info(0)[0] == 4 * MiB
    v = view(base, 2 * g)
    v[:] = 9
    assert v[-1] == 9
    assert not b.vm_map(0, base + 2 * g, 4 * g)  # over the budget: False
    assert b.vm_map(0, base + 2 * g, 2 * g)
    assert b.get_memory_info(0)[0] == 0
    # copies into mapped memory are allowed, into unmapped memory not
    b.memset(0, base + 2 * g, 5, g, 0)
    assert view(base + 2 * g, 4)[0] == 5
    with pytest.raises(ValueError, match="not inside memory"):
        b.memset(0, base + 4 * g, 5, 16, 0)
    b.vm_unmap(0, base, 2 * g)
    assert b.get_memory_info(0)[0] == 4 * MiB
    assert b.vm_map(0, base, g)                  # remapped pages read as zeros
    assert view(base, 16).tolist() == [0] * 16
    with pytest.raises(ValueError, match="still mapped"):
        b.vm_release(0, base, 8 * g)
    b.vm_unmap(0, base, g)
    b.vm_unmap(0, base + 2 * g, 2 * g)
    b.vm_release(0, base, 8 * g)
    assert b.get_memory_info(0) == (8 * MiB, 8 * MiB)


def test_vm_bad_inputs(sync_b):
    g = sync_b.vm_granularity(0)
    with pytest.raises(ValueError, match="granularity"):
        sync_b.vm_reserve(0, g + 1)
    base = sync_b.vm_reserve(0, 2 * g)
    with pytest.raises(ValueError, match="granularity"):
        sync_b.vm_map(0, base + 4096, g)
    with pytest.raises(ValueError, match="reserved"):
        sync_b.vm_map(0, base + g, 2 * g)         # runs past the reservation
    with pytest.raises(ValueError, match="reserved"):
        sync_b.vm_map(1, base, g)                 # other device's reservation
    assert sync_b.vm_map(0, base, g)
    with pytest.raises(ValueError, match="already mapped"):
        sync_b.vm_map(0, base, g)
    with pytest.raises(ValueError, match="not mapped"):
        sync_b.vm_unmap(0, base, 2 * g)
    with pytest.raises(ValueError, match="exact base and size"):
        sync_b.vm_release(0, base, g)
    sync_b.vm_unmap(0, base, g)
    sync_b.vm_release(0, base, 2 * g)
    with pytest.raises(ValueError):
        sync_b.vm_release(0, base, 2 * g)
    with pytest.raises(ValueError):
        sync_b.free(0, base)                      # not a malloc pointer


# ---------------------------------------------------------------------- copies

@pytest.mark.parametrize("kind", ["h2d", "d2h", "d2d", "h2h"])
def test_memcpy_kinds(b, kind):
    s = b.stream_create(0, 0)
    src_host = np.arange(256, dtype=np.uint8)
    dst_host = np.zeros(256, dtype=np.uint8)
    d1, d2 = b.malloc(0, 256), b.malloc(0, 256)
    view(d1, 256)[:] = src_host
    src = {"h2d": src_host.ctypes.data, "d2h": d1, "d2d": d1, "h2h": src_host.ctypes.data}[kind]
    dst = {"h2d": d2, "d2h": dst_host.ctypes.data, "d2d": d2,
           "h2h": dst_host.ctypes.data}[kind]
    b.memcpy(0, dst, src, 256, kind, s)
    b.stream_synchronize(0, s)
    np.testing.assert_array_equal(view(dst, 256), src_host)
    b.free(0, d1)
    b.free(0, d2)


def test_memcpy_bad_inputs(sync_b):
    d = sync_b.malloc(0, 64)
    host = np.zeros(128, np.uint8)
    with pytest.raises(ValueError, match="kind"):
        sync_b.memcpy(0, d, host.ctypes.data, 8, "x2y", 0)
    with pytest.raises(ValueError, match="not inside memory"):
        sync_b.memcpy(0, d, host.ctypes.data, 128, "h2d", 0)      # past the allocation
    with pytest.raises(ValueError, match="not inside memory"):
        sync_b.memcpy(0, host.ctypes.data, d, 8, "h2d", 0)        # dst is not device memory
    with pytest.raises(ValueError, match="cpu:1"):
        sync_b.memcpy(1, host.ctypes.data, d, 8, "d2h", 0)        # d is on device 0
    with pytest.raises(ValueError):
        sync_b.memcpy(0, d, host.ctypes.data, -1, "h2d", 0)
    with pytest.raises(TypeError):
        sync_b.memcpy(0, d, host.ctypes.data, 8.0, "h2d", 0)
    with pytest.raises(TypeError):
        sync_b.memcpy(0, d, None, 8, "h2d", 0)
    with pytest.raises(ValueError, match="not a live stream"):
        sync_b.memcpy(0, d, host.ctypes.data, 8, "h2d", 12345)
    sync_b.memcpy(0, d, host.ctypes.data, 0, "h2d", 0)           # zero bytes: no-op


def test_memset_and_fill(b):
    p = b.malloc(1, 64)
    b.memset(1, p, 0xAB, 64, 0)
    b.synchronize(1)
    assert view(p, 64).tolist() == [0xAB] * 64
    for pattern in (b"\x01", b"\x01\x02", b"\x01\x02\x03\x04", bytes(range(8))):
        b.memset(1, p, 0, 64, 0)
        b.fill(1, p, pattern, 64 // len(pattern) - 1, 0)
        b.synchronize(1)
        expected = list(pattern) * (64 // len(pattern) - 1) + [0] * len(pattern)
        assert view(p, 64).tolist() == expected
    b.fill(1, p + 1, b"\xff\xee", 3, 0)           # unaligned destination works
    b.synchronize(1)
    assert view(p, 8).tolist()[1:7] == [0xFF, 0xEE] * 3
    b.free(1, p)


def test_memset_fill_bad_inputs(sync_b):
    p = sync_b.malloc(0, 64)
    with pytest.raises(ValueError, match="byte value"):
        sync_b.memset(0, p, 256, 8, 0)
    with pytest.raises(TypeError):
        sync_b.memset(0, p, 1.0, 8, 0)
    with pytest.raises(ValueError, match="1, 2, 4 or 8"):
        sync_b.fill(0, p, b"\x00\x01\x02", 2, 0)
    with pytest.raises(TypeError):
        sync_b.fill(0, p, 7, 2, 0)
    with pytest.raises(ValueError, match="not inside memory"):
        sync_b.fill(0, p, b"\x00\x00\x00\x00", 17, 0)


def test_peer_copies(b):
    assert all(b.can_access_peer(i, j) for i in range(2) for j in range(2))
    with pytest.raises(IndexError):
        b.can_access_peer(0, 2)
    src, dst = b.malloc(0, 128), b.malloc(1, 128)
    view(src, 128)[:] = np.arange(128, dtype=np.uint8)
    s = b.stream_create(0, 0)
    b.memcpy_peer(1, dst, 0, src, 128, s)
    b.stream_synchronize(0, s)
    assert view(dst, 128).tolist() == list(range(128))
    with pytest.raises(ValueError, match="cpu:0"):
        b.memcpy_peer(1, dst, 0, dst, 8, 0)       # dst pointer is not on device 0
    with pytest.raises(ValueError):
        b.memcpy_peer(1, dst, 0, src, 8, b.stream_create(1, 0))  # stream of the wrong device


# ---------------------------------------------------------------------- streams

def test_stream_handles(b):
    lo, hi = b.stream_priority_range(0)
    assert (lo, hi) == (0, -1)
    assert b.default_stream(0) == 0
    handles = {b.stream_create(i % 2, 0) for i in range(10)}
    assert len(handles) == 10 and 0 not in handles
    h = b.stream_create(1, -5)                    # priorities are clamped
    assert b.stream_is_valid(1, h) and not b.stream_is_valid(0, h)
    assert b.stream_is_valid(0, 0) and not b.stream_is_valid(3, 0)
    assert b.stream_query(1, h)
    b.stream_destroy(1, h)
    assert not b.stream_is_valid(1, h)
    with pytest.raises(ValueError):
        b.stream_destroy(1, h)
    with pytest.raises(ValueError):
        b.stream_query(1, h)
    with pytest.raises(ValueError, match="default stream"):
        b.stream_destroy(0, 0)
    with pytest.raises(TypeError):
        b.stream_create(0, 0.5)
    with pytest.raises(IndexError):
        b.stream_create(2, 0)


def test_sync_mode_runs_inline(sync_b):
    out = []
    s = sync_b.stream_create(0, 0)
    sync_b.launch_host_func(0, lambda: out.append(threading.get_ident()), s)
    assert out == [threading.get_ident()]
    assert sync_b.stream_query(0, s)
    with pytest.raises(DeviceError, match="ZeroDivisionError"):
        sync_b.launch_host_func(0, lambda: 1 / 0, s)
    with pytest.raises(TypeError):
        sync_b.launch_host_func(0, "not callable", s)


def test_async_ordering_with_wait_event(async_b):
    b = async_b
    s1, s2 = b.stream_create(0, 0), b.stream_create(0, 0)
    order = []
    gate = threading.Event()
    b.launch_host_func(0, lambda: (gate.wait(5), time.sleep(0.02), order.append("s1")), s1)
    e = b.event_create(0, False, False, False)
    b.event_record(0, e, s1)
    b.stream_wait_event(0, s2, e)
    b.launch_host_func(0, lambda: order.append("s2"), s2)
    assert not b.event_query(0, e)
    assert not b.stream_query(0, s1)
    assert not b.stream_query(0, s2)
    gate.set()
    b.stream_synchronize(0, s2)
    assert order == ["s1", "s2"]
    assert b.event_query(0, e) and b.stream_query(0, s1)


def test_async_wait_captures_record_at_wait_time(async_b):
    b = async_b
    s1, s2 = b.stream_create(0, 0), b.stream_create(1, 0)
    e = b.event_create(0, False, False, False)
    gate_a, gate_b = threading.Event(), threading.Event()
    b.launch_host_func(0, lambda: gate_a.wait(5), s1)
    b.event_record(0, e, s1)                   # record 1, pending behind gate_a
    b.stream_wait_event(1, s2, e)              # cross-device wait on record 1
    b.launch_host_func(0, lambda: gate_b.wait(5), s1)
    b.event_record(0, e, s1)                   # record 2 replaces record 1 for the event
    done = threading.Event()
    b.launch_host_func(1, done.set, s2)
    time.sleep(0.01)
    assert not done.is_set()                   # s2 really waits for record 1
    gate_a.set()
    assert done.wait(5)                        # ... but not for record 2
    assert not b.event_query(0, e)
    gate_b.set()
    b.event_synchronize(0, e)
    assert b.event_query(0, e)


def test_async_fifo_and_worker_threads(async_b):
    b = async_b
    s = b.stream_create(0, 0)
    out = []
    for i in range(50):
        b.launch_host_func(0, lambda i=i: out.append((i, threading.get_ident())), s)
    b.synchronize(0)
    assert [i for i, _ in out] == list(range(50))
    assert {t for _, t in out} != {threading.get_ident()}


def test_async_worker_exception_surfaces_once(async_b):
    b = async_b
    s = b.stream_create(0, 0)
    after = []

    def boom():
        raise KeyError("boom")

    b.launch_host_func(0, boom, s)
    b.launch_host_func(0, lambda: after.append(1), s)
    with pytest.raises(DeviceError, match="KeyError") as info:
        b.stream_synchronize(0, s)
    assert isinstance(info.value.__cause__, KeyError)
    assert after == [1]                         # later work still ran
    b.stream_synchronize(0, s)                  # cleared
    b.launch_host_func(0, boom, s)
    with pytest.raises(DeviceError):
        b.synchronize(0)
    b.synchronize(0)
    b.launch_host_func(0, boom, s)
    ran = threading.Event()
    b.launch_host_func(0, ran.set, s)
    assert ran.wait(5)
    with pytest.raises(DeviceError, match="KeyError"):
        b.stream_query(0, s)                    # a query raises it too
    b.stream_synchronize(0, s)
    assert b.stream_query(0, s)


def test_async_memory_copies_are_stream_ordered(async_b):
    b = async_b
    s = b.stream_create(0, 0)
    p = b.malloc(0, 1024)
    view(p, 1024)[:] = 0
    gate = threading.Event()
    b.launch_host_func(0, lambda: gate.wait(5), s)
    b.memset(0, p, 7, 1024, s)
    assert view(p, 4).tolist() == [0, 0, 0, 0]
    assert not b.stream_query(0, s)
    gate.set()
    b.stream_synchronize(0, s)
    assert view(p, 1024).tolist() == [7] * 1024
    b.free(0, p)


def test_async_free_waits_for_pending_work(async_b):
    b = async_b
    s = b.stream_create(0, 0)
    p = b.malloc(0, 4096)
    host = np.zeros(4096, np.uint8)
    b.launch_host_func(0, lambda: time.sleep(0.02), s)
    b.memset(0, p, 1, 4096, s)
    b.memcpy(0, host.ctypes.data, p, 4096, "d2h", s)
    b.free(0, p)                                # must not free under the pending copy
    assert host.tolist() == [1] * 4096


# ---------------------------------------------------------------------- events

def test_event_basics(b):
    e = b.event_create(0, True, False, False)
    assert e != 0
    assert b.event_query(0, e)                  # never recorded: complete
    with pytest.raises(DeviceError, match="never recorded"):
        b.event_elapsed_time(0, e, e)
    with pytest.raises(ValueError, match="interprocess"):
        b.event_create(0, True, False, True)    # timing + interprocess, as CUDA refuses
    with pytest.raises(ValueError, match="interprocess"):
        b.event_ipc_handle(0, e)
    with pytest.raises(ValueError, match="not a live event"):
        b.event_query(1, e)                     # event of device 0
    with pytest.raises(ValueError):
        b.event_record(0, e, 999)               # bad stream
    with pytest.raises(ValueError):
        b.event_record(1, e, 0)                 # event of another device
    b.event_destroy(0, e)
    with pytest.raises(ValueError, match="not a live event"):
        b.event_record(0, e, 0)
    with pytest.raises(ValueError):
        b.event_destroy(0, e)
    with pytest.raises(TypeError):
        b.event_query(0, "e")


def test_elapsed_time(b):
    s = b.stream_create(0, 0)
    start, end = b.event_create(0, True, False, False), b.event_create(0, True, False, False)
    b.event_record(0, start, s)
    b.launch_host_func(0, lambda: time.sleep(0.01), s)
    b.event_record(0, end, s)
    b.event_synchronize(0, end)
    ms = b.event_elapsed_time(0, start, end)
    assert isinstance(ms, float) and ms > 0
    b.event_record(0, end, s)                   # re-recording replaces the record
    b.event_synchronize(0, end)
    assert b.event_elapsed_time(0, start, end) >= ms
    assert b.event_elapsed_time(0, end, start) < 0
    plain = b.event_create(0, False, False, False)
    b.event_record(0, plain, s)
    with pytest.raises(DeviceError, match="enable_timing"):
        b.event_elapsed_time(0, start, plain)


def test_elapsed_time_incomplete_async(async_b):
    b = async_b
    s = b.stream_create(0, 0)
    start, end = b.event_create(0, True, False, False), b.event_create(0, True, False, False)
    gate = threading.Event()
    b.event_record(0, start, s)
    b.launch_host_func(0, lambda: gate.wait(5), s)
    b.event_record(0, end, s)
    with pytest.raises(DeviceError, match="not completed"):
        b.event_elapsed_time(0, start, end)
    gate.set()
    b.event_synchronize(0, end)
    assert b.event_elapsed_time(0, start, end) >= 0


def test_event_error_surfaces_on_event_sync(async_b):
    b = async_b
    s = b.stream_create(0, 0)
    e = b.event_create(0, False, False, False)
    b.launch_host_func(0, lambda: [][1], s)  # noqa: PLE0643 - the work must fail
    b.event_record(0, e, s)
    with pytest.raises(DeviceError, match="IndexError"):
        b.event_synchronize(0, e)
    b.event_synchronize(0, e)


# ---------------------------------------------------------------------- graphs

def test_graph_record_and_replay(b):
    assert b.graph_supported(0)
    s = b.stream_create(0, 0)
    p = b.malloc(0, 16)
    calls = []
    e = b.event_create(0, True, False, False)
    b.memset(0, p, 0, 16, 0)
    b.synchronize(0)
    b.graph_capture_begin(0, s)
    assert b.stream_is_capturing(0, s) and not b.stream_is_capturing(0, 0)
    b.launch_host_func(0, lambda: calls.append(view(p, 1)[0]), s)
    b.memset(0, p, 5, 16, s)
    b.event_record(0, e, s)
    b.launch_host_func(0, lambda: calls.append(view(p, 1)[0]), s)
    with pytest.raises(DeviceError, match="capturing"):
        b.stream_synchronize(0, s)
    with pytest.raises(DeviceError, match="capturing"):
        b.stream_query(0, s)
    with pytest.raises(DeviceError, match="capturing"):
        b.synchronize(0)
    with pytest.raises(DeviceError, match="capture"):
        b.event_query(0, e)
    assert calls == [] and view(p, 16).tolist() == [0] * 16   # recorded, not run
    g = b.graph_capture_end(0, s)
    assert not b.stream_is_capturing(0, s)
    assert calls == []
    for _ in range(3):
        b.memset(0, p, 0, 16, s)
        b.graph_replay(0, g, s)
    b.stream_synchronize(0, s)
    assert calls == [0, 5] * 3
    assert b.event_query(0, e)
    b.graph_replay(0, g, 0)                     # replay on another stream
    b.synchronize(0)
    assert len(calls) == 8
    b.graph_destroy(0, g)
    with pytest.raises(ValueError):
        b.graph_replay(0, g, s)
    with pytest.raises(ValueError):
        b.graph_destroy(0, g)


def test_graph_capture_errors(b):
    s = b.stream_create(0, 0)
    with pytest.raises(DeviceError, match="default stream"):
        b.graph_capture_begin(0, 0)
    with pytest.raises(DeviceError, match="not capturing"):
        b.graph_capture_end(0, s)
    b.graph_capture_begin(0, s)
    with pytest.raises(DeviceError, match="already capturing"):
        b.graph_capture_begin(0, s)
    with pytest.raises(DeviceError):
        b.stream_destroy(0, s)
    g = b.graph_capture_end(0, s)
    b.graph_replay(0, g, s)                     # an empty graph replays fine
    b.stream_synchronize(0, s)


def test_graph_fork_join_capture(b):
    origin, side = b.stream_create(0, 0), b.stream_create(0, 0)
    fork, join = b.event_create(0, False, False, False), b.event_create(0, False, False, False)
    out = []
    b.graph_capture_begin(0, origin)
    b.launch_host_func(0, lambda: out.append("a"), origin)
    b.event_record(0, fork, origin)
    b.stream_wait_event(0, side, fork)          # side joins the capture
    assert b.stream_is_capturing(0, side)
    b.launch_host_func(0, lambda: out.append("b"), side)
    b.event_record(0, join, side)
    b.stream_wait_event(0, origin, join)
    b.launch_host_func(0, lambda: out.append("c"), origin)
    g = b.graph_capture_end(0, origin)
    assert not b.stream_is_capturing(0, side)
    assert out == []
    b.graph_replay(0, g, origin)
    b.stream_synchronize(0, origin)
    assert out == ["a", "b", "c"]


def test_capture_waits_on_outside_event_at_replay(async_b):
    b = async_b
    s, other = b.stream_create(0, 0), b.stream_create(0, 0)
    e = b.event_create(0, False, False, False)
    out = []
    b.graph_capture_begin(0, s)
    b.stream_wait_event(0, s, e)
    b.launch_host_func(0, lambda: out.append("graph"), s)
    g = b.graph_capture_end(0, s)
    gate = threading.Event()
    b.launch_host_func(0, lambda: (gate.wait(5), out.append("other")), other)
    b.event_record(0, e, other)
    b.graph_replay(0, g, s)                     # waits for e's record made before replay
    time.sleep(0.01)
    assert out == []
    gate.set()
    b.stream_synchronize(0, s)
    assert out == ["other", "graph"]


# ---------------------------------------------------------------------- threads

def test_thread_safety(b):
    errors = []
    nbytes = 4096

    def worker(k: int) -> None:
        try:
            dev = k % 2
            s = b.stream_create(dev, 0)
            e = b.event_create(dev, True, False, False)
            host = np.full(nbytes, k, np.uint8)
            back = np.zeros(nbytes, np.uint8)
            for _ in range(20):
                p = b.malloc(dev, nbytes)
                assert p
                b.memcpy(dev, p, host.ctypes.data, nbytes, "h2d", s)
                b.memcpy(dev, back.ctypes.data, p, nbytes, "d2h", s)
                b.event_record(dev, e, s)
                b.event_synchronize(dev, e)
                assert back[0] == k and back[-1] == k
                b.free(dev, p)
            b.event_destroy(dev, e)
            b.stream_destroy(dev, s)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert b.get_memory_info(0)[0] == 64 * MiB and b.get_memory_info(1)[0] == 64 * MiB


def test_close_stops_workers():
    b = CpuBackend(async_streams=True)
    s = b.stream_create(0, 0)
    b.launch_host_func(0, lambda: None, s)
    b.launch_host_func(0, lambda: None, 0)
    # This backend's own workers (other tests may leave async backends with equal names).
    workers = [st.thread for st in (b._streams[s], b._default[0]) if st.thread is not None]
    assert len(workers) >= 2
    b.close()
    b.close()
    assert not any(t.is_alive() for t in workers)


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork")
def test_async_streams_work_in_a_forked_child():
    # worker threads do not survive fork(): the child must get new workers (and count work
    # that was in flight in the parent as done) instead of queueing forever
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import os
        import threading
        from accelrt.backends.cpu import CpuBackend
        b = CpuBackend(async_streams=True)
        s = b.stream_create(0, 0)
        started, gate = threading.Event(), threading.Event()
        b.launch_host_func(0, lambda: None, s)
        b.stream_synchronize(0, s)                 # s has a worker thread now
        b.launch_host_func(0, lambda: (started.set(), gate.wait()), s)
        b.launch_host_func(0, lambda: None, s)     # queued behind it
        started.wait()                             # the gate is in flight at fork time
        pid = os.fork()
        if pid == 0:
            ran = []
            b.launch_host_func(0, lambda: ran.append(1), s)
            b.stream_synchronize(0, s)
            b.launch_host_func(0, lambda: ran.append(2), 0)
            b.synchronize(0)
            os._exit(0 if ran == [1, 2] and b.stream_query(0, s) else 3)
        gate.set()
        b.stream_synchronize(0, s)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    out = subprocess.run(  # noqa: PLW1510
        [sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True,
        timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0"


def test_gc_finalizer_inside_backend_lock_does_not_deadlock():
    # a garbage collection can run inside any allocation, including the ones the backend
    # makes while holding its lock; an Event collected there destroys its handle re-entrantly
    import gc
    backends.register("cpugclock", lambda: CpuBackend(name="cpugclock"), replace=True)
    b = backends.get_backend("cpugclock")

    class Cycle:
        pass

    def collect_under_lock():
        c = Cycle()
        c.me, c.event = c, acc.Event("cpugclock:0")
        c.event.record()
        del c
        with b._lock:
            gc.collect()

    t = threading.Thread(target=collect_under_lock, daemon=True)
    t.start()
    t.join(10)
    assert not t.is_alive(), "deadlock: a finalizer waited for the lock its thread holds"
    assert not b._events


@pytest.mark.parametrize("async_streams", [False, True], ids=["sync", "async"])
def test_streams_idle_follows_mode_and_captures(async_streams: bool) -> None:
    """The contract's ``streams_idle`` hint (read by the distributed inline plans): True only
    with synchronous streams and no open capture; False on a closed instance; False by
    default on a backend that does not maintain it."""
    b = CpuBackend(num_devices=1, memory_limit="16MiB", async_streams=async_streams)
    assert b.streams_idle is (not async_streams)
    s = b.stream_create(0, 0)
    s2 = b.stream_create(0, 0)
    b.graph_capture_begin(0, s)
    b.graph_capture_begin(0, s2)
    assert b.streams_idle is False
    b.graph_destroy(0, b.graph_capture_end(0, s))
    assert b.streams_idle is False          # the other capture is still open
    b.graph_destroy(0, b.graph_capture_end(0, s2))
    assert b.streams_idle is (not async_streams)
    b.stream_destroy(0, s)
    b.stream_destroy(0, s2)
    b.close()
    assert b.streams_idle is False
    assert registry.Backend.streams_idle is False
