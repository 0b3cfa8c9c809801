"""Tests of the opencl backend (accelrt.backends.opencl) on whatever OpenCL device exists.

Skipped, with the reason, where pyopencl or an OpenCL platform is missing. On a machine
without a GPU, PoCL (``pip install pocl-binary-distribution``) provides a CPU device; the
multi-device test asks PoCL for two devices (``POCL_DEVICES``) in a subprocess.
Both memory representations (SVM at real addresses, buffers at made-up addresses) are tested
where the device supports them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator

import numpy as np
import pytest

import accelrt as acc
from accelrt import _backend as registry
from tests.helpers.expandable import fresh_fallback_warnings

REASON = registry.unavailable_reason("opencl")
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"opencl unavailable: {REASON}")

MiB = 1 << 20
GATE_TIMEOUT = 30.0


def _svm_supported() -> bool:
    if REASON is not None:
        return False
    from accelrt.backends.opencl import OpenCLBackend
    return OpenCLBackend("auto").get_device_properties(0)["memory_mode"] == "svm"


@pytest.fixture(params=[
    pytest.param("svm", marks=pytest.mark.skipif(not _svm_supported(),
                                                 reason="device has no coarse-grained SVM")),
    "buffer"])
def b(request: pytest.FixtureRequest) -> Iterator[object]:
    from accelrt.backends.opencl import OpenCLBackend
    backend = OpenCLBackend(request.param)
    yield backend
    backend.close()


def h2d(b, ptr: int, data: np.ndarray, stream: int = 0) -> None:
    b.memcpy(0, ptr, int(data.ctypes.data), data.nbytes, "h2d", stream)


def d2h(b, ptr: int, nbytes: int, stream: int = 0) -> np.ndarray:
    out = np.empty(nbytes, dtype=np.uint8)
    b.memcpy(0, int(out.ctypes.data), ptr, nbytes, "d2h", stream)
    b.stream_synchronize(0, stream)
    return out


class Gate:
    def __init__(self) -> None:
        self.event = threading.Event()

    def __call__(self) -> None:
        self.event.wait(GATE_TIMEOUT)

    def open(self) -> None:
        self.event.set()


# ------------------------------------------------------------------ discovery

def test_registry_and_properties() -> None:
    b = registry.get_backend("opencl")
    assert b.name == "opencl" and b.device_count() >= 1
    props = b.get_device_properties(0)
    assert props["total_memory"] > 0 and props["multi_processor_count"] >= 1
    assert props["memory_mode"] in ("svm", "buffer")
    assert props["device_type"] in ("cpu", "gpu", "accelerator", "other")
    assert props["host_accessible"] is False and props["vm_supported"] is False
    assert "float32" in b.get_device_capability(0)["supported_dtypes"]
    with pytest.raises(IndexError, match="out of range"):
        b.get_device_properties(b.device_count())


def test_memory_mode_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelrt.backends.opencl import OpenCLBackend
    from accelrt.backends.opencl._discovery import ENV_MEMORY, unavailable_reason
    with pytest.raises(ValueError, match="must be one of auto, svm, buffer"):
        OpenCLBackend("fast")
    with pytest.raises(TypeError):
        OpenCLBackend(3)  # type: ignore[arg-type]
    monkeypatch.setenv(ENV_MEMORY, "shared")
    assert ENV_MEMORY in (unavailable_reason() or "")
    with pytest.raises(ValueError, match=ENV_MEMORY):
        OpenCLBackend()


def test_unavailable_reason_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from accelrt.backends.opencl import _discovery
    monkeypatch.setitem(sys.modules, "pyopencl", None)   # import fails as if not installed
    devices, reason = _discovery._discover()
    assert devices == [] and reason is not None
    assert 'pip install "accelrt[opencl]"' in reason


# ------------------------------------------------------------------ memory and copies

def test_malloc_accounts_and_frees(b) -> None:
    free0, total = b.get_memory_info(0)
    p = b.malloc(0, 3 * MiB)
    assert p and p % 256 == 0
    assert b.get_memory_info(0) == (free0 - 3 * MiB, total)
    b.free(0, p)
    assert b.get_memory_info(0) == (free0, total)
    with pytest.raises(ValueError, match="already freed"):
        b.free(0, p)
    too_big = b.get_device_properties(0)["max_mem_alloc_size"] + 1
    assert b.malloc(0, too_big) == 0                  # plain out-of-memory: 0, no exception
    assert b.malloc(0, total + 1) == 0


def test_copies_and_fills_at_offsets_inside_an_allocation(b) -> None:
    p = b.malloc(0, 1 * MiB)
    try:
        data = np.arange(4096, dtype=np.uint8)
        h2d(b, p + 512, data)
        b.memset(0, p + 512 + 100, 7, 10, 0)
        b.fill(0, p + 8192, b"\x01\x02\x03\x04", 4, 0)
        b.fill(0, p + 16384, np.uint64(0x1122334455667788).tobytes(), 2, 0)
        b.memcpy(0, p + 65536, p + 512, 4096, "d2d", 0)
        got = d2h(b, p + 65536, 4096)
        expect = data.copy()
        expect[100:110] = 7
        assert np.array_equal(got, expect)
        assert d2h(b, p + 8192, 16).tolist() == [1, 2, 3, 4] * 4
        assert d2h(b, p + 16384, 16).view(np.uint64).tolist() == [0x1122334455667788] * 2
        src, dst = np.arange(64, dtype=np.uint8), np.zeros(64, dtype=np.uint8)
        b.memcpy(0, int(dst.ctypes.data), int(src.ctypes.data), 64, "h2h", 0)
        b.stream_synchronize(0, 0)
        assert np.array_equal(src, dst)
    finally:
        b.free(0, p)


def test_bad_copies_raise_clear_errors(b) -> None:
    p = b.malloc(0, 4096)
    host = np.zeros(8192, dtype=np.uint8)
    try:
        with pytest.raises(ValueError, match="overlap"):
            b.memcpy(0, p + 16, p, 256, "d2d", 0)
        with pytest.raises(ValueError, match="not inside memory allocated on opencl:0"):
            b.memcpy(0, p, int(host.ctypes.data), 4097, "h2d", 0)
        with pytest.raises(ValueError, match="not inside memory"):
            b.memcpy(0, int(host.ctypes.data), p + 4000, 200, "d2h", 0)
        with pytest.raises(ValueError, match="aligned"):
            b.fill(0, p + 2, b"abcd", 4, 0)
        with pytest.raises(ValueError, match="kind"):
            b.memcpy(0, p, p, 4, "x", 0)
        with pytest.raises(ValueError, match="not a live stream"):
            b.memset(0, p, 0, 4, 12345)
    finally:
        b.free(0, p)


# ------------------------------------------------------------------ streams and events

def test_streams_are_ordered_by_events_and_report_completion(b) -> None:
    sa, sb = b.stream_create(0, 0), b.stream_create(0, 0)
    p = b.malloc(0, 4096)
    gate = Gate()
    ev = b.event_create(0, False, False, False)
    try:
        b.launch_host_func(0, gate, sa)             # A is held until the gate opens
        b.memset(0, p, 0x5A, 4096, sa)
        b.event_record(0, ev, sa)
        b.stream_wait_event(0, sb, ev)              # B waits for A's memset
        out = np.zeros(4096, dtype=np.uint8)
        b.memcpy(0, int(out.ctypes.data), p, 4096, "d2h", sb)
        assert not b.stream_query(0, sa)
        assert not b.event_query(0, ev)
        assert not b.stream_query(0, sb)
    finally:
        gate.open()
    b.stream_synchronize(0, sb)
    assert np.all(out == 0x5A)
    assert b.event_query(0, ev) and b.stream_query(0, sa)
    b.synchronize(0)
    b.free(0, p)
    b.event_destroy(0, ev)
    b.stream_destroy(0, sa)
    b.stream_destroy(0, sb)


def test_host_function_error_is_raised_once_as_device_error(b) -> None:
    s = b.stream_create(0, 0)
    ran: list[int] = []
    b.launch_host_func(0, lambda: 1 / 0, s)
    b.launch_host_func(0, lambda: ran.append(1), s)   # later work still runs
    with pytest.raises(acc.DeviceError, match="ZeroDivisionError") as info:
        b.stream_synchronize(0, s)
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert ran == [1]
    b.stream_synchronize(0, s)                         # reported once, then cleared
    b.stream_destroy(0, s)


def test_event_timing(b) -> None:
    s = b.stream_create(0, 0)
    e0, e1 = (b.event_create(0, True, False, False) for _ in range(2))
    plain = b.event_create(0, False, False, False)
    with pytest.raises(acc.DeviceError, match="never recorded"):
        b.event_elapsed_time(0, e0, e1)
    p = b.malloc(0, 8 * MiB)
    b.event_record(0, e0, s)
    b.memset(0, p, 1, 8 * MiB, s)
    b.event_record(0, e1, s)
    b.event_record(0, plain, s)
    b.event_synchronize(0, e1)
    assert b.event_elapsed_time(0, e0, e1) >= 0.0
    with pytest.raises(acc.DeviceError, match="without timing"):
        b.event_elapsed_time(0, e0, plain)
    with pytest.raises(ValueError, match="interprocess"):
        b.event_create(0, False, False, True)
    b.free(0, p)
    for e in (e0, e1, plain):
        b.event_destroy(0, e)
    b.stream_destroy(0, s)


# ------------------------------------------------------------------ the caching allocator

def test_caching_allocator_splits_segments_into_working_blocks(b) -> None:
    from accelrt.memory._allocator import DeviceCachingAllocator
    from accelrt.memory._config import AllocatorConfig, parse_config

    a = DeviceCachingAllocator(b, 0, AllocatorConfig())
    s = b.stream_create(0, 0)
    ptrs = [a.malloc(1000 + i, s) for i in range(8)]   # all in one 2 MiB small segment
    assert len(a.snapshot_segments()) == 1
    for i, p in enumerate(ptrs):
        h2d(b, p, np.full(1000 + i, i + 1, dtype=np.uint8), s)
    for i, p in enumerate(ptrs):
        assert np.all(d2h(b, p, 1000 + i, s) == i + 1)
    big = a.malloc(12 * MiB, s)
    b.memset(0, big + 5 * MiB, 9, MiB, s)
    assert np.all(d2h(b, big + 5 * MiB, MiB, s) == 9)
    too_big = b.get_device_properties(0)["max_mem_alloc_size"] + MiB
    with pytest.raises(acc.OutOfMemoryError, match="Tried to allocate"):
        a.malloc(too_big, s)
    for p in (*ptrs, big):
        a.free(p)
    b.synchronize(0)
    a.empty_cache()
    assert a.memory_reserved() == 0
    assert b.get_memory_info(0)[0] == b.get_memory_info(0)[1]
    # expandable segments are a request: without virtual memory, one warning and ordinary
    # segments (torch's "expandable_segments not supported on this platform")
    with fresh_fallback_warnings(), \
            pytest.warns(UserWarning, match=f"'{b.name}' backend has no virtual memory"):
        a2 = DeviceCachingAllocator(b, 0, parse_config("expandable_segments:True"))
    p = a2.malloc(4096, s)
    assert [seg["is_expandable"] for seg in a2.snapshot_segments()] == [False]
    src = np.full(4096, 7, dtype=np.uint8)            # alive until d2h's synchronize
    h2d(b, p, src, s)
    assert np.all(d2h(b, p, 4096, s) == 7)
    a2.free(p)
    b.synchronize(0)
    a2.empty_cache()
    assert a2.memory_reserved() == 0
    b.stream_destroy(0, s)


def test_public_api_on_opencl() -> None:
    host = np.arange(1000, dtype=np.float32)
    x = acc.asarray(host, device="opencl:0")
    assert str(x.device).startswith("opencl")
    assert np.array_equal(x.numpy(), host)
    s = acc.Stream("opencl:0")
    start, end = (acc.Event("opencl:0", enable_timing=True),
                  acc.Event("opencl:0", enable_timing=True))
    start.record(s)
    end.record(s)
    end.synchronize()
    assert start.elapsed_time(end) >= 0.0
    s.synchronize()
    assert s.query()


# ------------------------------------------------------------------ several devices

_TWO_DEVICES = textwrap.dedent("""
    import threading
    import numpy as np
    from accelrt.backends.opencl import OpenCLBackend

    for mode in ("auto", "buffer"):
        b = OpenCLBackend(mode)
        assert b.device_count() == 2, b.device_count()
        assert not b.can_access_peer(0, 1) and b.can_access_peer(1, 1)
        p0, p1 = b.malloc(0, 65536), b.malloc(1, 65536)
        data = np.arange(65536, dtype=np.uint8)
        s0, s1 = b.stream_create(0, 0), b.stream_create(1, 0)
        gate = threading.Event()
        b.launch_host_func(0, lambda: gate.wait(30), s0)
        b.memcpy(0, p0, int(data.ctypes.data), 65536, "h2d", s0)
        b.memcpy_peer(1, p1 + 256, 0, p0, 1024, s0)       # ordered on device 0's stream
        ev = b.event_create(0, False, False, False)
        b.event_record(0, ev, s0)
        b.stream_wait_event(1, s1, ev)                    # cross-device wait
        out = np.zeros(1024, dtype=np.uint8)
        b.memcpy(1, int(out.ctypes.data), p1 + 256, 1024, "d2h", s1)
        assert not b.stream_query(1, s1)
        gate.set()
        b.stream_synchronize(1, s1)
        assert np.array_equal(out, data[:1024]), out[:8]
        b.synchronize(0)
        b.free(0, p0); b.free(1, p1)
        b.event_destroy(0, ev)
        b.stream_destroy(0, s0); b.stream_destroy(1, s1)
        b.close()
    print("two-devices-ok")
""")


def test_two_devices_peer_copy_and_cross_device_wait() -> None:
    env = dict(os.environ, POCL_DEVICES="pthread pthread")
    from accelrt.backends.opencl import OpenCLBackend
    if "Portable Computing Language" not in OpenCLBackend().get_device_properties(0)["platform"]:
        pytest.skip("needs PoCL to simulate two devices (POCL_DEVICES)")
    proc = subprocess.run([sys.executable, "-c", _TWO_DEVICES], env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 0 and "two-devices-ok" in proc.stdout, proc.stderr[-3000:]
