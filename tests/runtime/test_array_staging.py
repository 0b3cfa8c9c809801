"""Pinned host staging of Array copies to and from devices the host cannot read: data on every
path, pool reuse and its stream-ordered safety, the fallbacks, and no leaks (accelrt._transfer
through accelrt._array)."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Iterator
from typing import final

import numpy as np
import pytest
from helpers import registry
from helpers.registry import module_backends
from helpers.staging import RecordingNoHostCpu

import accelrt as acc
from accelrt import backends
from accelrt._backend import Backend
from accelrt.backends import Capabilities
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._host import peek_host_allocator


class StagedCpu(RecordingNoHostCpu):
    """cpu devices the core must treat like GPU memory; records pinned blocks and copies."""


class NoPinnedCpu(StagedCpu):
    """No pinned host memory: the base class's host_malloc (NotImplementedError)."""

    host_malloc = Backend.host_malloc      # type: ignore[assignment]
    host_free = Backend.host_free          # type: ignore[assignment]

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), pinned_host_memory=False)


class RaisingPinnedCpu(StagedCpu):
    """A host_malloc override that raises NotImplementedError when called."""

    def host_malloc(self, size: int) -> int:
        raise NotImplementedError("no pinned memory on this device")


class FullPinnedCpu(StagedCpu):
    """Pinned host memory is always exhausted (host_malloc returns 0)."""

    def host_malloc(self, size: int) -> int:
        return 0


_BACKENDS: dict[str, Callable[[], CpuBackend]] = {
    "stagesync": lambda: StagedCpu(num_devices=2, async_streams=False, name="stagesync"),
    "stageasync": lambda: StagedCpu(num_devices=2, async_streams=True, name="stageasync"),
    "stagenopin": lambda: NoPinnedCpu(num_devices=1, async_streams=True, name="stagenopin"),
    "stageraise": lambda: RaisingPinnedCpu(num_devices=1, async_streams=True,
                                           name="stageraise"),
    "stagefull": lambda: FullPinnedCpu(num_devices=1, async_streams=True, name="stagefull"),
}
# closed (worker threads stopped) and unregistered after the module
_backends = module_backends(_BACKENDS)

STAGED = ["stagesync", "stageasync"]
FALLBACK = ["stagenopin", "stageraise", "stagefull"]


@pytest.fixture(params=STAGED)
def be(request: pytest.FixtureRequest) -> Iterator[str]:
    """A staged backend made the current accelerator (so acc.memory's host functions read its
    pool), with its host pool emptied and its counters zeroed."""
    name = request.param
    prev = acc.current_accelerator()
    acc.set_current_accelerator(name)
    acc.synchronize(f"{name}:0")
    acc.memory.empty_host_cache()
    acc.memory.reset_accumulated_host_memory_stats()
    backends.get_backend(name).copies.clear()
    try:
        yield name
    finally:
        acc.set_current_accelerator(prev.type if prev is not None else "cpu")


def stats() -> dict[str, int]:
    return dict(acc.memory.host_memory_stats())


def h2d_sources(b: StagedCpu) -> list[int]:
    return [src for kind, _, src in b.copies if kind == "h2d"]


def d2h_targets(b: StagedCpu) -> list[int]:
    return [dst for kind, dst, _ in b.copies if kind == "d2h"]


@final
class Gate:
    """Blocks a stream (launch_host_func) until opened; always opened on exit."""

    def __init__(self, dev: str) -> None:
        self.dev = dev
        self.event = threading.Event()

    def __enter__(self) -> Gate:
        b, index = backends.get_backend(self.dev.split(":")[0]), int(self.dev.split(":")[1])
        handle = acc.current_stream(self.dev).stream_id
        b.launch_host_func(index, lambda: self.event.wait(30), handle)
        return self

    def open(self) -> None:
        self.event.set()

    def __exit__(self, *exc: object) -> None:
        self.event.set()


# ---------------------------------------------------------------------- data on every path

@pytest.mark.parametrize("non_blocking", [False, True])
@pytest.mark.parametrize("dtype", ["int8", "float32", "complex128"])
def test_every_copy_path_moves_the_right_data(be: str, non_blocking: bool, dtype: str) -> None:
    b = backends.get_backend(be)
    dev0, dev1 = f"{be}:0", f"{be}:1"
    src = (np.arange(24) * 3 - 7).astype(dtype).reshape(4, 6)
    a = acc.asarray(src, device=dev0)                      # upload (blocking)
    assert not a._host_ok() and a.data_ptr() != src.ctypes.data
    np.testing.assert_array_equal(a.numpy(), src)          # download
    c = acc.empty((4, 6), dtype=dtype, device=dev1)
    c.copy_(src[::-1], non_blocking=non_blocking)          # non-contiguous host source
    acc.synchronize(dev1)
    np.testing.assert_array_equal(c.numpy(), src[::-1])
    assert c.tolist() == src[::-1].tolist()
    on_cpu = a.to("cpu:0", non_blocking=non_blocking)      # device -> host backend
    np.testing.assert_array_equal(on_cpu.numpy(), src)
    back = on_cpu.to(dev1, non_blocking=non_blocking)      # host backend -> device
    acc.synchronize(dev1)
    np.testing.assert_array_equal(back.numpy(), src)
    cast = acc.zeros((4, 6), dtype="complex64", device=dev0).copy_(a,
                                                                   non_blocking=non_blocking)
    np.testing.assert_array_equal(cast.numpy(), src.astype("complex64"))
    host_copy = np.from_dlpack(a, device="cpu", copy=True)
    np.testing.assert_array_equal(host_copy, src)
    if dtype == "complex128":                              # a 16-byte fill is an upload
        a.fill_(1 - 2j)
        assert (a.numpy() == 1 - 2j).all()
    # every host <-> device copy went through a pinned block of the pool
    assert h2d_sources(b) and d2h_targets(b)
    staged = set(h2d_sources(b) + d2h_targets(b))
    assert staged <= b.pinned
    assert stats()["num_host_alloc"] >= 1


def test_empty_and_scalar_arrays(be: str) -> None:
    z = acc.asarray(np.zeros((0, 3), np.float32), device=f"{be}:0")
    assert z.numpy().shape == (0, 3)
    s = acc.asarray(np.array(5, np.int64), device=f"{be}:0")
    assert s.numpy().tolist() == 5 and s.tolist() == 5


def test_non_blocking_upload_snapshots_the_source(be: str) -> None:
    """The host data is copied into the staging block before copy_ returns, so changing the
    numpy source while the stream is still blocked does not change the result."""
    if be != "stageasync":
        pytest.skip("needs an asynchronous stream to hold the copy back")
    dev = f"{be}:0"
    a = acc.zeros(1000, dtype="int32", device=dev)
    src = np.arange(1000, dtype=np.int32)
    with Gate(dev) as gate:
        a.copy_(src, non_blocking=True)
        src[:] = -1
        gate.open()
    acc.synchronize(dev)
    assert a.numpy().tolist() == list(range(1000))


# ---------------------------------------------------------------------- pool reuse

@pytest.mark.parametrize("non_blocking", [False, True])
def test_second_upload_reuses_the_block_once_the_first_completed(be: str,
                                                                 non_blocking: bool) -> None:
    b = backends.get_backend(be)
    dev = f"{be}:0"
    a = acc.empty(3000, dtype="uint8", device=dev)
    a.copy_(np.full(3000, 1, np.uint8), non_blocking=non_blocking)
    acc.synchronize(dev)
    a.copy_(np.full(3000, 2, np.uint8), non_blocking=non_blocking)
    acc.synchronize(dev)
    st = stats()
    assert st["num_host_alloc"] == 1
    assert st["allocations.current"] == 1 and st["allocated_bytes.current"] == 4096
    first, second = h2d_sources(b)
    assert first == second
    assert (a.numpy() == 2).all()


def test_downloads_reuse_the_block(be: str) -> None:
    b = backends.get_backend(be)
    a = acc.full(100, 9, dtype="int64", device=f"{be}:0")
    before = stats().get("num_host_alloc", 0)
    for _ in range(5):
        assert a.numpy().tolist() == [9] * 100
    assert stats()["num_host_alloc"] - before <= 1
    assert len(set(d2h_targets(b))) == 1


def test_block_is_not_reused_while_its_copy_is_pending(be: str) -> None:
    if be != "stageasync":
        pytest.skip("needs an asynchronous stream to hold the copy back")
    b = backends.get_backend(be)
    dev = f"{be}:0"
    a = acc.empty(512, dtype="float64", device=dev)
    c = acc.empty(512, dtype="float64", device=dev)
    with Gate(dev) as gate:
        a.copy_(np.full(512, 1.0), non_blocking=True)
        c.copy_(np.full(512, 2.0), non_blocking=True)     # the first block is still queued
        st = stats()
        assert st["num_host_alloc"] == 2
        assert st["active_requests.current"] >= 1          # pending blocks stay active
        first, second = h2d_sources(b)
        assert first != second
        gate.open()
    acc.synchronize(dev)
    assert (a.numpy() == 1.0).all() and (c.numpy() == 2.0).all()
    a.copy_(np.full(512, 3.0), non_blocking=True)         # both events done: reuse
    acc.synchronize(dev)
    assert stats()["num_host_alloc"] == 2
    assert h2d_sources(b)[-1] in (first, second)
    assert (a.numpy() == 3.0).all()


def test_empty_host_cache_releases_cached_blocks(be: str) -> None:
    b = backends.get_backend(be)
    dev = f"{be}:0"
    for n in (100, 5000, 70000):
        acc.asarray(np.ones(n, np.float32), device=dev).numpy()
    acc.synchronize(dev)
    st = stats()
    assert st["allocations.current"] >= 3 and b.pinned
    acc.memory.empty_host_cache()
    st = stats()
    assert st["allocations.current"] == 0 and st["allocated_bytes.current"] == 0
    assert st["num_host_free"] == st["num_host_alloc"]
    assert not b.pinned


def test_many_copies_leak_nothing(be: str) -> None:
    b = backends.get_backend(be)
    dev = f"{be}:1"
    rng = np.random.default_rng(1)
    events_before = b.live_events
    arrays = {n: acc.empty(n, dtype="int16", device=dev) for n in (7, 300, 4000)}
    for i in range(150):
        n = (7, 300, 4000)[i % 3]
        data = rng.integers(-1000, 1000, n).astype(np.int16)
        arrays[n].copy_(data, non_blocking=bool(i % 2))
        if i % 10 == 0:
            np.testing.assert_array_equal(arrays[n].numpy(), data)
    acc.synchronize(dev)
    st = stats()
    # a handful of blocks serve every copy: one per size, and at most one more per size
    # while a copy was in flight
    assert st["num_host_alloc"] <= 6
    acc.memory.empty_host_cache()
    st = stats()
    assert st["active_requests.current"] == 0 and st["active_bytes.current"] == 0
    assert st["allocations.current"] == 0 and not b.pinned
    assert b.live_events == events_before                 # every pool event was destroyed


# ---------------------------------------------------------------------- fallbacks

@pytest.mark.parametrize("name", FALLBACK)
@pytest.mark.parametrize("non_blocking", [False, True])
def test_backends_without_pinned_memory_copy_directly(name: str, non_blocking: bool) -> None:
    b = backends.get_backend(name)
    dev = f"{name}:0"
    src = np.arange(50, dtype=np.float32)
    a = acc.asarray(src, device=dev)
    c = acc.empty(50, dtype="float32", device=dev).copy_(src * 2, non_blocking=non_blocking)
    acc.synchronize(dev)
    np.testing.assert_array_equal(a.numpy(), src)
    np.testing.assert_array_equal(c.numpy(), src * 2)
    assert not b.pinned
    pool = peek_host_allocator(name)
    assert pool is None or pool.stats()["allocations.current"] == 0
    # the copies read and wrote the numpy memory directly
    assert src.ctypes.data in h2d_sources(b)


def test_graph_capture_copies_directly() -> None:
    """A captured upload must not read a staging block the pool recycles before replay (the
    source is pinned: a capture refuses pageable host memory, as PyTorch's)."""
    name = "stagesync"
    b = backends.get_backend(name)
    dev = f"{name}:0"
    a = acc.zeros(8, dtype="int32", device=dev)
    src = acc.pin_memory(np.arange(8, dtype=np.int32), device=dev)
    s = acc.Stream(dev)
    s.wait_stream(acc.current_stream(dev))
    g = acc.Graph()
    b.copies.clear()
    with acc.graph(g, stream=s):
        a.copy_(src, non_blocking=True)
    assert h2d_sources(b) == [src.ctypes.data]
    src += 100
    g.replay()
    acc.synchronize(dev)
    assert a.numpy().tolist() == list(range(100, 108))


# ---------------------------------------------------------------------- OpenCL buffer mode

@pytest.fixture(scope="module")
def opencl_buffer() -> Iterator[str]:
    pytest.importorskip("pyopencl")
    from accelrt._errors import BackendUnavailableError
    from accelrt.backends.opencl import OpenCLBackend
    old = os.environ.get("ACCELRT_OPENCL_MEMORY")
    os.environ["ACCELRT_OPENCL_MEMORY"] = "buffer"
    before = registry.snapshot()
    try:
        try:
            OpenCLBackend(name="oclstage")
        except BackendUnavailableError as exc:
            pytest.skip(f"no OpenCL device: {exc}")
        backends.register("oclstage", lambda: OpenCLBackend("buffer", name="oclstage"),
                          replace=True)
        yield "oclstage"
    finally:
        registry.restore(before)   # closes and unregisters oclstage
        if old is None:
            os.environ.pop("ACCELRT_OPENCL_MEMORY", None)
        else:
            os.environ["ACCELRT_OPENCL_MEMORY"] = old


@pytest.mark.parametrize("non_blocking", [False, True])
def test_opencl_buffer_mode_stages_through_the_pool(opencl_buffer: str,
                                                    non_blocking: bool) -> None:
    name = opencl_buffer
    b = backends.get_backend(name)
    assert not b.host_accessible(0)
    dev = f"{name}:0"
    src = np.arange(256, dtype=np.float32)
    a = acc.empty(256, dtype="float32", device=dev)
    pool = peek_host_allocator(name)
    before = pool.stats()["num_host_alloc"] if pool is not None else 0
    a.copy_(src, non_blocking=non_blocking)
    src[:] = 0                                        # the staged copy already took the data
    acc.synchronize(dev)
    a.copy_(np.arange(256, dtype=np.float32) + 1, non_blocking=non_blocking)
    np.testing.assert_array_equal(a.numpy(), np.arange(256, dtype=np.float32) + 1)
    pool = peek_host_allocator(name)
    assert pool is not None
    st = pool.stats()
    assert st["num_host_alloc"] - before == 1           # upload, upload and download share it
    pool.empty_cache()
    assert pool.stats()["allocations.current"] == 0


def test_captured_host_copy_on_a_backend_that_cannot_keep_host_memory_alive_is_refused():
    # A backend whose host callbacks cannot be captured (CUDA) must refuse a non_blocking
    # copy from (pinned) host memory inside a capture with a clear message, not a raw driver
    # error.
    import accelrt as acc
    from accelrt._errors import DeviceError
    from accelrt.backends.cpu import CpuBackend

    class NoCapturedHostFuncs(CpuBackend):
        def launch_host_func(self, index, fn, stream):
            if self.stream_is_capturing(index, stream):
                raise DeviceError("host functions cannot be captured here")
            return super().launch_host_func(index, fn, stream)

    name = "nocapturehost"
    acc.backends.register(name, lambda: NoCapturedHostFuncs(name=name), replace=True)
    try:
        x = acc.empty(4, dtype="float32", device=f"{name}:0")
        host = acc.pin_memory(np.arange(4, dtype=np.float32), device=f"{name}:0")
        s = acc.Stream(f"{name}:0")
        g = acc.Graph()
        with pytest.raises(DeviceError, match="captured into a graph"):
            with acc.graph(g, stream=s):
                x.copy_(host, non_blocking=True)
        x.copy_(host)                       # outside a capture it works
        assert np.array_equal(x.numpy(), host)
    finally:
        acc.backends.unregister(name)
