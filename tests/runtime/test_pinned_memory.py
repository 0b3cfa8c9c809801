"""Pinned host arrays (issue 23 §2): acc.pin_memory / acc.is_pinned, the factories'
pin_memory=True, PyTorch's CachingHostAllocator semantics for them (reuse only after the
streams that used a block are done; host_memory_stats; empty_host_cache), truly asynchronous
non-blocking copies from pinned memory, and backends that cannot pin (OpenCL)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import threading
from collections.abc import Iterator

import numpy as np
import pytest
from helpers.registry import module_backends
from helpers.staging import RecordingNoHostCpu

import accelrt as acc
from accelrt import backends
from accelrt.backends.cpu import CpuBackend
from accelrt.memory._host import peek_host_allocator

ASYNC = "pinasync"      # two simulated devices, each stream on a worker thread
NOHOST = "pinnohost"    # device memory the host cannot read (the staged path, like CUDA)

# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    ASYNC: lambda: CpuBackend(num_devices=2, async_streams=True, name=ASYNC),
    NOHOST: lambda: RecordingNoHostCpu(num_devices=1, async_streams=True, name=NOHOST),
})


@pytest.fixture(scope="module", autouse=True)
def _empty_host_pools(_module_backends: None) -> Iterator[None]:
    """Give the pinned blocks the module's backends cached back before they are closed."""
    yield
    gc.collect()
    for name in (ASYNC, NOHOST):
        for i in range(backends.get_backend(name).device_count()):
            acc.synchronize(f"{name}:{i}")
        pool = peek_host_allocator(name)
        if pool is not None:
            pool.empty_cache()


@pytest.fixture(params=[ASYNC, NOHOST])
def be(request: pytest.FixtureRequest) -> Iterator[str]:
    """The backend made the current accelerator (acc.memory's host functions read its pool),
    with an empty pool and zeroed counters."""
    name = request.param
    prev = acc.current_accelerator()
    acc.set_current_accelerator(name)
    gc.collect()
    acc.synchronize(f"{name}:0")
    acc.memory.empty_host_cache()
    acc.memory.reset_accumulated_host_memory_stats()
    try:
        yield name
    finally:
        acc.set_current_accelerator(prev.type if prev is not None else "cpu")


def stats() -> dict[str, int]:
    return dict(acc.memory.host_memory_stats())


class Gate:
    """Blocks the current stream of ``dev`` (a host function) until opened; opened on exit."""

    def __init__(self, dev: str) -> None:
        self.dev = dev
        self.event = threading.Event()

    def __enter__(self) -> Gate:
        name, index = self.dev.split(":")
        b = backends.get_backend(name)
        b.launch_host_func(int(index), lambda: self.event.wait(30),
                           acc.current_stream(self.dev).stream_id)
        return self

    def open(self) -> None:
        self.event.set()

    def __exit__(self, *exc: object) -> None:
        self.event.set()


# ---------------------------------------------------------------------- pin_memory / is_pinned

def test_pin_memory_returns_a_pinned_numpy_copy(be: str) -> None:
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    p = acc.pin_memory(x)
    assert type(p) is np.ndarray and p.shape == x.shape and p.dtype == x.dtype
    np.testing.assert_array_equal(p, x)
    assert p.ctypes.data != x.ctypes.data and p.flags.c_contiguous and p.flags.writeable
    assert acc.is_pinned(p) and acc.is_pinned(p, device=be)
    for view in (p[1:], p[:, 2], p.T, p.reshape(-1)[::-1], p[2:3, 1:2]):
        assert acc.is_pinned(view)
    assert not acc.is_pinned(x) and not acc.is_pinned(p.copy())
    assert not acc.is_pinned(np.empty(0))
    assert acc.pin_memory(p) is p                         # already pinned: itself, as torch
    assert acc.pin_memory(p[1:]).base is not None         # a view of it stays that view
    q = acc.pin_memory(x.T)                               # any strides in: C-contiguous out
    np.testing.assert_array_equal(q, x.T)
    assert q.flags.c_contiguous and acc.is_pinned(q)


def test_pinned_for_one_backend_is_not_pinned_for_another(be: str) -> None:
    p = acc.pin_memory(np.ones(8))
    other = NOHOST if be == ASYNC else ASYNC
    assert acc.is_pinned(p, device=be) and not acc.is_pinned(p, device=other)
    q = acc.pin_memory(p, device=other)                   # pinned again, for the other one
    assert q is not p and acc.is_pinned(q, device=other)


def test_arrays_are_never_pinned_and_cannot_be_pinned(be: str) -> None:
    a = acc.zeros(4, device=f"{be}:0")
    assert acc.is_pinned(a) is False                      # device memory, as a CUDA tensor
    with pytest.raises(TypeError, match="only host .numpy. arrays can be pinned"):
        acc.pin_memory(a)                                 # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"takes a numpy.ndarray .*got list"):
        acc.pin_memory([1, 2])                            # type: ignore[arg-type]
    with pytest.raises(TypeError, match="got list"):
        acc.is_pinned([1, 2])
    with pytest.raises(TypeError, match="Python objects"):
        acc.pin_memory(np.array([object()]))


def test_the_block_returns_to_the_pool_when_the_last_view_dies(be: str) -> None:
    p = acc.pin_memory(np.ones(1000))
    st = stats()
    assert st["active_requests.current"] == 1 and st["active_bytes.current"] == 8192
    assert st["allocations.current"] == 1 and st["num_host_alloc"] == 1
    ptr = p.ctypes.data
    view = p[10:20]
    del p
    gc.collect()
    assert stats()["active_requests.current"] == 1        # the view still holds the block
    assert acc.is_pinned(view)
    del view
    gc.collect()
    st = stats()
    assert st["active_requests.current"] == 0 and st["active_bytes.current"] == 0
    assert st["allocations.current"] == 1                 # cached, still pinned
    r = acc.pin_memory(np.zeros(900))                     # same bucket: the block is reused
    assert r.ctypes.data == ptr and stats()["num_host_alloc"] == 1
    del r
    gc.collect()
    acc.memory.empty_host_cache()                         # frees the unused pinned blocks
    st = stats()
    assert st["allocations.current"] == 0 and st["num_host_free"] == 1


def test_a_finalizer_free_while_the_pool_lock_is_held_is_queued() -> None:
    """The collector may free a pinned array while this thread holds the pool's lock (inside
    malloc): the free is queued, not a deadlock (a subprocess, so a regression cannot hang)."""
    code = r"""
import gc, numpy as np, accelrt as acc
from accelrt.memory._host import peek_host_allocator
acc.set_current_accelerator("cpu")
p = acc.pin_memory(np.ones(16))
pool = peek_host_allocator("cpu")
with pool._lock:
    del p
    gc.collect()
assert pool.stats()["active_requests.current"] == 1     # queued, not done yet
acc.memory.empty_host_cache()                             # the next call does it
assert pool.stats()["active_requests.current"] == 0
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr


# ---------------------------------------------------------------------- factories

@pytest.mark.parametrize("factory", ["empty", "zeros", "ones", "full", "rand", "randn"])
def test_factories_with_pin_memory_make_pinned_host_arrays(be: str, factory: str) -> None:
    before = stats().get("active_requests.current", 0)
    if factory == "full":
        out = acc.full((2, 3), 2.5, pin_memory=True)
    else:
        out = getattr(acc, factory)(2, 3, pin_memory=True)
    assert type(out) is np.ndarray and out.shape == (2, 3) and out.dtype == np.float32
    assert acc.is_pinned(out)
    assert stats()["active_requests.current"] == before + 1
    expected = {"zeros": 0.0, "ones": 1.0, "full": 2.5}
    if factory in expected:
        assert (out == expected[factory]).all()
    assert acc.zeros(2, dtype="int16", pin_memory=True).dtype == np.int16
    assert acc.full((2,), 7, pin_memory=True).dtype == np.int64   # inferred, as torch
    assert acc.ones(2, dtype="bool", pin_memory=True).tolist() == [True, True]
    assert acc.empty(0, pin_memory=True).shape == (0,)


def test_pinned_random_numbers_are_the_generators(be: str) -> None:
    g = acc.random.Generator(f"{be}:0").manual_seed(7)
    host = acc.rand(5, generator=g, pin_memory=True)
    dev = acc.rand(5, generator=acc.random.Generator(f"{be}:0").manual_seed(7))
    assert acc.is_pinned(host)
    np.testing.assert_array_equal(host, dev.numpy())


@pytest.mark.parametrize("factory", ["empty", "zeros", "ones", "full", "rand", "randn"])
def test_pin_memory_with_a_device_is_refused_as_in_torch(be: str, factory: str) -> None:
    def make(**kw: object) -> object:
        if factory == "full":
            return acc.full((2,), 1.0, pin_memory=True, **kw)  # type: ignore[call-overload]
        return getattr(acc, factory)(2, pin_memory=True, **kw)

    with pytest.raises(acc.AcceleratorError, match="Only dense CPU tensors can be pinned.*"
                       "device= places it on the accelerator device") as info:
        make(device=f"{be}:0")
    assert isinstance(info.value, ValueError)
    with acc.device(f"{be}:1" if be == ASYNC else f"{be}:0"), \
            pytest.raises(ValueError, match="Only dense CPU tensors can be pinned.*default"):
        make()
    with pytest.raises(TypeError, match="pin_memory must be a bool"):
        getattr(acc, factory)(*(((2,), 1.0) if factory == "full" else (2,)), pin_memory=1)


# ---------------------------------------------------------------------- asynchronous copies

def test_non_blocking_copy_from_pinned_memory_reads_it_when_the_stream_runs() -> None:
    dev = f"{ASYNC}:1"
    a = acc.zeros(256, dtype="float64", device=dev)
    u = acc.zeros(256, dtype="float64", device=dev)
    p = acc.pin_memory(np.full(256, 1.0), device=ASYNC)
    plain = np.full(256, 1.0)
    with Gate(dev) as gate:
        a.copy_(p, non_blocking=True)          # returns with the copy still queued
        u.copy_(plain, non_blocking=True)
        p[:] = 2.0                             # written before the stream ran the copies
        plain[:] = 2.0
        assert not acc.current_stream(dev).query()
        gate.open()
    acc.synchronize(dev)
    assert (a.numpy() == 2.0).all()            # pinned: read at execution time (no copy)
    assert (u.numpy() == 1.0).all()            # pageable: read at the call, as in torch


def test_a_pinned_block_is_not_reused_before_its_stream_is_done() -> None:
    dev = f"{ASYNC}:0"
    a = acc.empty(512, dtype="float64", device=dev)
    p = acc.pin_memory(np.full(512, 3.0), device=ASYNC)
    first = p.ctypes.data
    host = peek_host_allocator(ASYNC)
    assert host is not None
    with Gate(dev) as gate:
        a.copy_(p, non_blocking=True)
        del p
        gc.collect()                           # the last view died with the copy queued
        st = host.stats()
        assert st["active_requests.current"] >= 1          # pending: still active
        q = acc.pin_memory(np.zeros(512), device=ASYNC)
        assert q.ctypes.data != first          # not reused while the stream may read it
        gate.open()
    acc.synchronize(dev)
    assert (a.numpy() == 3.0).all()
    del q
    gc.collect()
    r = acc.pin_memory(np.zeros(512), device=ASYNC)
    s = acc.pin_memory(np.zeros(512), device=ASYNC)
    assert first in (r.ctypes.data, s.ctypes.data)         # the stream is done: reusable


def test_non_blocking_copy_from_pinned_memory_takes_no_staging_block() -> None:
    b = backends.get_backend(NOHOST)
    assert isinstance(b, RecordingNoHostCpu)
    dev = f"{NOHOST}:0"
    a = acc.empty(64, dtype="float32", device=dev)
    p = acc.pin_memory(np.arange(64, dtype=np.float32), device=NOHOST)
    pool = peek_host_allocator(NOHOST)
    assert pool is not None
    allocs = pool.stats()["num_host_alloc"]
    active = pool.stats()["active_requests.current"]
    b.copies.clear()
    for non_blocking in (True, False):
        a.copy_(p, non_blocking=non_blocking)
        assert b.copies[-1] == ("h2d", a.data_ptr(), p.ctypes.data)   # straight from p
    acc.synchronize(dev)
    st = pool.stats()
    assert st["num_host_alloc"] == allocs and st["active_requests.current"] == active
    np.testing.assert_array_equal(a.numpy(), np.arange(64, dtype=np.float32))
    a.copy_(np.ones(64, np.float32), non_blocking=True)   # pageable: staged, as before
    assert b.copies[-1][2] != p.ctypes.data and b.copies[-1][2] in b.pinned


# ---------------------------------------------------------------------- backends that cannot pin

def test_opencl_cannot_pin_as_torch_without_a_pinned_allocator() -> None:
    pytest.importorskip("pyopencl")
    if not acc.opencl.is_available():
        pytest.skip("no OpenCL device")
    x = np.ones(8)
    with pytest.raises(acc.AcceleratorError, match="opencl backend has none.*no pinned "
                       "memory allocator is available"):
        acc.pin_memory(x, device="opencl")
    prev = acc.current_accelerator()
    acc.set_current_accelerator("opencl")
    try:
        with pytest.raises(acc.AcceleratorError, match="no pinned memory allocator"):
            acc.empty(4, pin_memory=True)
        a = acc.empty(8, dtype="float64", device="opencl:0")
        a.copy_(x, non_blocking=True)          # pageable copies work as before
        x[:] = 5.0
        assert (a.numpy() == 1.0).all()
    finally:
        acc.set_current_accelerator(prev.type if prev is not None else "cpu")
    assert not acc.is_pinned(x) and not acc.is_pinned(x, device="opencl")


# ---------------------------------------------------------------------- CUDA

def test_pinned_upload_on_the_gpu() -> None:
    """On a GPU (scripts/gpu_check.py's suite-runtime phase): cuMemHostAlloc blocks, an
    asynchronous upload straight from them, and reuse only after the stream."""
    code = r"""
import gc, numpy as np, accelrt as acc
p = acc.pin_memory(np.arange(1 << 20, dtype=np.float32), device="cuda")
assert acc.is_pinned(p, device="cuda") and acc.is_pinned(p[5:])
a = acc.empty(1 << 20, dtype="float32", device="cuda:0")
a.copy_(p, non_blocking=True)
first = p.ctypes.data
del p; gc.collect()
acc.cuda.synchronize()
assert (a.numpy() == np.arange(1 << 20, dtype=np.float32)).all()
q = acc.empty(1 << 20, dtype="float32", pin_memory=True)
assert q.ctypes.data == first, "reused once the stream is done"
print("ok", acc.cuda.host_memory_stats()["num_host_alloc"])
"""
    try:
        import cuda.bindings  # noqa: F401
    except ImportError:
        pytest.skip("no cuda-bindings")
    env = dict(os.environ, ACCELRT_ACCELERATOR="cuda")
    probe = "import accelrt as acc; raise SystemExit(0 if acc.cuda.is_available() else 1)"
    if subprocess.run([sys.executable, "-c", probe],
                      env=env, timeout=120).returncode:
        pytest.skip("no CUDA GPU")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok")
