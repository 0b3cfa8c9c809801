"""accelrt.interop: DLPack round trips with numpy, the __cuda_array_interface__ helpers (with
CPU-hosted stand-ins for a CUDA producer and consumer), and the CuPy / Numba / PyTorch / JAX
integrations, which skip with the reason when the library or a GPU is missing."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
import threading
import time
import types
import weakref
from collections import namedtuple
from typing import Any

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt import backends
from accelrt.backends import Capabilities
from accelrt.backends.cpu import CpuBackend
from accelrt.interop import (
    consume_cuda_array_interface,
    cuda_array_interface,
    parse_cuda_array_interface,
    wait_for_stream,
)


class _NoHostCpu(CpuBackend):
    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), host_accessible=False)


# closed (worker threads stopped) and unregistered after the module
_backends = module_backends({
    "interopdev": lambda: _NoHostCpu(num_devices=2, async_streams=True, name="interopdev"),
    "interopcpu": lambda: CpuBackend(num_devices=2, async_streams=True, name="interopcpu"),
})


# ---------------------------------------------------------------------- DLPack

class _Producer:
    """A DLPack producer that is not a numpy array (forces accelrt's DLPack intake)."""

    def __init__(self, arr: np.ndarray) -> None:
        self.arr = arr

    def __dlpack__(self, **kw: Any) -> Any:
        return self.arr.__dlpack__(**kw)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.arr.__dlpack_device__()


@pytest.mark.parametrize("dtype", ["float32", "int16", "complex128", "bool"])
def test_dlpack_accelrt_to_numpy_is_zero_copy(dtype: str) -> None:
    a = acc.asarray(np.arange(6).reshape(2, 3).astype(dtype), device="cpu:0", copy=True)
    v = np.from_dlpack(a)
    assert v.ctypes.data == a.data_ptr() and v.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(v, np.arange(6).reshape(2, 3).astype(dtype))
    del a
    gc.collect()
    np.testing.assert_array_equal(v, np.arange(6).reshape(2, 3).astype(dtype))  # still alive


def test_dlpack_numpy_to_accelrt_and_back() -> None:
    host = np.linspace(0, 1, 12, dtype=np.float64).reshape(3, 4)
    a = acc.asarray(_Producer(host), device="cpu:0")
    assert a.shape == (3, 4) and a.dtype == np.float64
    np.testing.assert_array_equal(a.numpy(), host)
    back = np.from_dlpack(a)
    np.testing.assert_array_equal(back, host)
    copied = acc.asarray(_Producer(host), device="interopdev:1")   # to device memory
    np.testing.assert_array_equal(copied.numpy(), host)


# ---------------------------------------------------------------------- CAI parsing

def _desc(**over: Any) -> dict[str, Any]:
    d: dict[str, Any] = {"shape": (2, 3), "typestr": "<f4", "data": (4096, False),
                         "version": 3, "strides": None, "stream": None}
    d.update(over)
    return d


def test_parse_valid_dicts() -> None:
    c = parse_cuda_array_interface(_desc())
    assert (c.ptr, c.shape, c.dtype, c.readonly, c.stream, c.version) == (
        4096, (2, 3), np.dtype("float32"), False, None, 3)
    assert c.nbytes == 24 and c.is_c_contiguous
    c = parse_cuda_array_interface(_desc(strides=(4, 8), data=(8, True), stream=1))
    assert c.strides == (4, 8) and c.readonly and c.stream == 1 and not c.is_c_contiguous
    v2 = _desc(version=2)
    del v2["stream"], v2["strides"]
    assert parse_cuda_array_interface(v2).stream is None
    assert parse_cuda_array_interface(_desc(shape=(0, 3), data=(0, False))).size == 0


@pytest.mark.parametrize("over,exc,match", [
    ({"shape": [2, -1]}, ValueError, "negative dimension"),
    ({"shape": (2.0, 3)}, TypeError, "shape must be a tuple of ints"),
    ({"typestr": "<x9"}, ValueError, "unknown typestr"),
    ({"typestr": 4}, TypeError, "typestr must be a str"),
    ({"typestr": ">f4"}, ValueError, "native byte order"),
    ({"typestr": "|O"}, ValueError, "Python objects"),       # device bytes as PyObject*: crash
    ({"typestr": "(2,)<f4"}, ValueError, "sub-array"),
    ({"data": 4096}, TypeError, "data must be a"),
    ({"data": (4096, 0)}, TypeError, "data must be a"),
    ({"data": (0, False)}, ValueError, "data pointer is 0"),
    ({"data": (-8, False)}, ValueError, "negative"),
    ({"strides": (4,)}, ValueError, "do not match"),
    ({"strides": "C"}, TypeError, "strides must be None or a tuple"),
    ({"mask": (1, 2)}, ValueError, "masked arrays"),
    ({"stream": 0}, ValueError, "stream 0 is disallowed"),
    ({"stream": "s"}, TypeError, "stream must be None or an int"),
    ({"stream": -3}, ValueError, "negative"),
    ({"version": 4}, ValueError, "version 4 is not supported"),
    ({"version": "3"}, TypeError, "version must be an int"),
])
def test_parse_rejects_malformed(over: dict[str, Any], exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        parse_cuda_array_interface(_desc(**over))


def test_parse_requires_keys_and_mapping() -> None:
    d = _desc()
    del d["typestr"]
    with pytest.raises(ValueError, match="lacks the required key 'typestr'"):
        parse_cuda_array_interface(d)
    with pytest.raises(TypeError, match="must be a dict"):
        parse_cuda_array_interface([("shape", (1,))])
    with pytest.raises(TypeError, match="has no __cuda_array_interface__"):
        consume_cuda_array_interface(object(), backend="cpu")


# ---------------------------------------------------------------------- CAI stream handling

class _FakeProducer:
    """A CPU-hosted stand-in for a CUDA library's array: its data is written by slow work on
    its own stream, which it reports in ``__cuda_array_interface__['stream']``."""

    def __init__(self, be: str, n: int) -> None:
        self.buf = np.zeros(n, np.float64)
        self.stream = acc.Stream(f"{be}:0")
        b = backends.get_backend(be)
        buf = self.buf

        def write() -> None:
            time.sleep(0.15)
            buf[...] = 9.0
        b.launch_host_func(0, write, self.stream.stream_id)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return {"shape": self.buf.shape, "typestr": self.buf.dtype.str, "version": 3,
                "data": (self.buf.ctypes.data, False), "strides": None,
                "stream": self.stream.stream_id}


def test_consume_makes_current_stream_wait_for_producer() -> None:
    be = "interopcpu"
    prod = _FakeProducer(be, 64)
    cai = consume_cuda_array_interface(prod, backend=be, device=0)
    assert cai.ptr == prod.buf.ctypes.data and cai.stream == prod.stream.stream_id
    seen: list[float] = []
    done = threading.Event()
    view = prod.buf

    def read() -> None:
        seen.append(float(view.min()))
        done.set()
    # enqueued on the consumer's current stream right away: must run after the producer
    backends.get_backend(be).launch_host_func(0, read, acc.current_stream(f"{be}:0").stream_id)
    assert done.wait(10)
    assert seen == [9.0]


def test_consume_without_stream_does_not_wait() -> None:
    be = "interopcpu"
    prod = _FakeProducer(be, 8)
    desc = dict(prod.__cuda_array_interface__, stream=None)
    cai = consume_cuda_array_interface(desc, backend=be)
    assert cai.stream is None and cai.ptr == prod.buf.ctypes.data
    prod.stream.synchronize()


def test_wait_for_stream_checks_the_handle() -> None:
    s = acc.current_stream("interopcpu:1")
    wait_for_stream(s.stream_id, backend="interopcpu", device=1)   # itself: a no-op
    other = acc.Stream("interopcpu:0")
    with pytest.raises(ValueError, match="not a live stream of interopcpu:1"):
        wait_for_stream(other.stream_id, backend="interopcpu", device=1)
    with pytest.raises(TypeError, match="int handle"):
        wait_for_stream("0x10", backend="interopcpu")
    with pytest.raises(ValueError, match="not a live stream"):
        consume_cuda_array_interface(_desc(stream=987654), backend="interopcpu")


# ---------------------------------------------------------------------- CAI export

def test_export_device_array() -> None:
    a = acc.full((3, 2), 1.5, dtype="float32", device="interopdev:1")
    d = cuda_array_interface(a)
    assert d["shape"] == (3, 2) and d["typestr"] == "<f4" and d["version"] == 3
    assert d["data"] == (a.data_ptr(), False) and d["strides"] is None
    assert d["stream"] == 1   # the default stream (handle 0) is reported as legacy default
    s = acc.Stream("interopdev:1")
    with s:
        assert cuda_array_interface(a)["stream"] == s.stream_id
    assert cuda_array_interface(a, synchronize=True)["stream"] is None
    parsed = parse_cuda_array_interface(d)     # what we export, we accept
    assert parsed.ptr == a.data_ptr() and parsed.dtype == np.float32


def test_export_rejects_host_memory_and_non_arrays() -> None:
    with pytest.raises(ValueError, match="host memory"):
        cuda_array_interface(acc.zeros(2, device="cpu:0"))
    with pytest.raises(TypeError, match="accelrt.Array"):
        cuda_array_interface(np.zeros(2))
    with pytest.raises(TypeError, match="synchronize must be a bool"):
        cuda_array_interface(acc.zeros(2, device="interopdev:0"), synchronize=1)


# ---------------------------------------------------------------------- optional libraries

def test_missing_libraries_say_what_to_install() -> None:
    from accelrt.interop import cupy as acc_cupy
    from accelrt.interop import numba as acc_numba
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(acc.BackendUnavailableError, match="pip install cupy"):
            acc_cupy.use_accelrt_allocator()
    try:
        import numba.cuda  # noqa: F401
    except ImportError:
        with pytest.raises(acc.BackendUnavailableError, match="pip install numba-cuda"):
            acc_numba.AccelrtEMMPlugin  # noqa: B018
    acc_cupy.restore()   # nothing installed: a no-op


def _require_cuda() -> None:
    reason = backends.unavailable_reason("cuda")
    if reason is not None:
        pytest.skip(f"accelrt's cuda backend is unavailable: {reason}")


def test_cupy_allocates_through_accelrt() -> None:
    cupy = pytest.importorskip("cupy")
    _require_cuda()
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("CuPy sees no GPU")
    except cupy.cuda.runtime.CUDARuntimeError as exc:
        pytest.skip(f"CuPy cannot use a GPU: {exc}")
    from accelrt.interop.cupy import use_accelrt_allocator
    acc.set_current_accelerator("cuda")
    dev = cupy.cuda.runtime.getDevice()
    base = acc.memory.memory_stats(f"cuda:{dev}").get("allocated_bytes.all.current", 0)
    with use_accelrt_allocator():
        x = cupy.arange(1 << 20, dtype=cupy.float32)
        stats = acc.memory.memory_stats(f"cuda:{dev}")
        assert stats["allocated_bytes.all.current"] >= base + x.nbytes
        ptr = x.data.ptr
        segs = acc.memory.memory_snapshot()
        assert any(s["address"] <= ptr < s["address"] + s["total_size"] for s in segs)
        assert float(x[-1]) == float((1 << 20) - 1)
        s = cupy.cuda.Stream()
        with s:
            y = cupy.ones(1000, dtype=cupy.float64)   # allocated on CuPy's side stream
        s.synchronize()
        assert float(y.sum()) == 1000.0
        del x, y
        gc.collect()
        assert acc.memory.memory_stats(f"cuda:{dev}")["allocated_bytes.all.current"] == base
        assert acc.memory.memory_reserved(f"cuda:{dev}") > 0      # freed into the pool
    z = cupy.zeros(8)                                             # CuPy's own pool again
    assert acc.memory.memory_stats(f"cuda:{dev}")["allocated_bytes.all.current"] == base
    del z


def test_numba_allocates_through_accelrt() -> None:
    pytest.importorskip("numba")
    numba_cuda = pytest.importorskip("numba.cuda")
    _require_cuda()
    if not numba_cuda.is_available():
        pytest.skip("numba.cuda sees no GPU")
    from accelrt.interop.numba import AccelrtEMMPlugin, use_accelrt_memory_manager
    assert use_accelrt_memory_manager() is AccelrtEMMPlugin
    ctx = numba_cuda.current_context()
    if not isinstance(ctx.memory_manager, AccelrtEMMPlugin):
        pytest.skip("a Numba CUDA context existed before the plugin was installed (the plugin "
                    "must be set before Numba's first GPU use)")
    acc.set_current_accelerator("cuda")
    dev = numba_cuda.get_current_device().id
    base = acc.memory.memory_stats(f"cuda:{dev}").get("allocated_bytes.all.current", 0)
    arr = numba_cuda.to_device(np.arange(1 << 16, dtype=np.float32))
    assert ctx.memory_manager.interface_version == 1
    free, total = ctx.get_memory_info()
    assert 0 < free <= total
    assert acc.memory.memory_stats(f"cuda:{dev}")["allocated_bytes.all.current"] >= base + arr.nbytes
    ptr = arr.device_ctypes_pointer.value
    assert any(s["address"] <= ptr < s["address"] + s["total_size"]
               for s in acc.memory.memory_snapshot())
    np.testing.assert_array_equal(arr.copy_to_host(), np.arange(1 << 16, dtype=np.float32))
    del arr
    gc.collect()
    assert acc.memory.memory_stats(f"cuda:{dev}")["allocated_bytes.all.current"] == base


def test_torch_dlpack_round_trip() -> None:
    torch = pytest.importorskip("torch")
    a = acc.asarray(np.arange(5, dtype=np.float32), device="cpu:0", copy=True)
    t = torch.from_dlpack(a)
    assert t.data_ptr() == a.data_ptr() and t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    back = acc.asarray(torch.arange(3, dtype=torch.int64), device="cpu:0")
    assert back.tolist() == [0, 1, 2]
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device: CPU round trip checked only")
    _require_cuda()
    x = acc.full((4,), 2.0, device="cuda:0")
    tc = torch.as_tensor(x, device="cuda")     # through __cuda_array_interface__
    assert tc.data_ptr() == x.data_ptr() and tc.sum().item() == 8.0
    y = acc.asarray(torch.ones(3, device="cuda"), device="cuda:0")
    assert y.tolist() == [1.0, 1.0, 1.0]


def test_jax_dlpack_round_trip() -> None:
    jnp = pytest.importorskip("jax.numpy")
    a = acc.asarray(np.arange(4, dtype=np.float32), device="cpu:0", copy=True)
    j = jnp.from_dlpack(a)
    assert j.tolist() == [0.0, 1.0, 2.0, 3.0]
    back = acc.asarray(jnp.arange(3), device="cpu:0")
    assert back.tolist() == [0, 1, 2]


# ---------------------------------------------------------------------- plugins on stand-ins
# CuPy and Numba are replaced by minimal stand-ins (only the API the plugins call) and the
# memory comes from a cpu backend, so the plugins' bookkeeping is checked on every machine.


def _fake_cupy(device: int = 0) -> types.ModuleType:
    cupy = types.ModuleType("cupy")
    state = types.SimpleNamespace(device=device, stream_ptr=0,
                                  allocator="cupy-default-pool", calls=[])

    class UnownedMemory:
        def __init__(self, ptr: int, size: int, owner: Any, device_id: int) -> None:
            self.ptr, self.size, self.owner, self.device_id = ptr, size, owner, device_id

    class MemoryPointer:
        def __init__(self, mem: UnownedMemory, offset: int) -> None:
            self.mem, self.ptr = mem, mem.ptr + offset

    def set_allocator(fn: Any) -> None:
        state.calls.append(fn)
        state.allocator = fn

    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        runtime=types.SimpleNamespace(getDevice=lambda: state.device),
        get_current_stream=lambda: types.SimpleNamespace(ptr=state.stream_ptr),
        UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
        set_allocator=set_allocator, get_allocator=lambda: state.allocator)
    cupy.state = state  # type: ignore[attr-defined]
    return cupy


def _allocated(dev: str) -> int:
    return int(acc.memory.memory_stats(dev).get("allocated_bytes.all.current", 0))


def test_cupy_allocator_on_a_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_cupy(device=1)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    from accelrt.interop import cupy as acc_cupy
    be, dev = "interopcpu", "interopcpu:1"
    base = _allocated(dev)
    with acc_cupy.use_accelrt_allocator(backend=be) as handle:
        alloc = fake.state.allocator
        assert isinstance(alloc, acc_cupy.AccelrtCupyAllocator)
        mp = alloc(4096)
        assert mp.mem.device_id == 1 and mp.mem.size == 4096 and mp.ptr
        assert _allocated(dev) >= base + 4096
        acc.set_current_accelerator(be)
        segs = acc.memory.memory_snapshot()
        seg = next(s for s in segs if s["address"] <= mp.ptr < s["address"] + s["total_size"])
        assert seg["device"] == 1 and seg["stream"] == 0     # CuPy's null stream
        s = acc.Stream(dev)
        fake.state.stream_ptr = s.stream_id                   # CuPy on a side stream
        mp2 = alloc(100)
        seg2 = next(x for x in acc.memory.memory_snapshot()
                    if x["address"] <= mp2.ptr < x["address"] + x["total_size"])
        assert seg2["stream"] == s.stream_id
        fake.state.stream_ptr = 987654321
        with pytest.raises(ValueError, match="not a live stream"):
            alloc(16)
        fake.state.stream_ptr = 0
        del mp, mp2
        gc.collect()
        assert _allocated(dev) == base                         # freed back to accelrt
        assert acc.memory.memory_reserved(dev) > 0             # ... into its pool
    assert not handle._active and fake.state.allocator == "cupy-default-pool"
    fixed = acc_cupy.use_accelrt_allocator(0, backend=be)
    with pytest.raises(RuntimeError, match="device 0 but CuPy asked for memory on device 1"):
        fake.state.allocator(8)
    acc_cupy.restore()
    assert fake.state.allocator == "cupy-default-pool" and not fixed._active
    with pytest.raises(TypeError, match="device must be an int"):
        acc_cupy.use_accelrt_allocator("cuda:0")


def _fake_numba() -> dict[str, types.ModuleType]:
    numba = types.ModuleType("numba")
    cuda = types.ModuleType("numba.cuda")
    cudadrv = types.ModuleType("numba.cuda.cudadrv")
    driver = types.ModuleType("numba.cuda.cudadrv.driver")
    driver.USE_NV_BINDING = False  # type: ignore[attr-defined]

    class HostOnlyCUDAMemoryManager:
        def __init__(self, context: Any) -> None:
            self.context = context
            self.allocations: dict[int, Any] = {}
            self.initialized = False

        def initialize(self) -> None:
            self.initialized = True

        def reset(self) -> None:
            self.allocations.clear()

        @contextlib.contextmanager
        def defer_cleanup(self) -> Any:
            yield

    class GetIpcHandleMixin:
        def get_ipc_handle(self, memory: Any) -> Any:
            return ("ipc", memory.ptr)

    class MemoryPointer:
        def __init__(self, context: Any, pointer: Any, size: int, owner: Any = None,
                     finalizer: Any = None) -> None:
            self.context, self.ptr, self.size = context, pointer.value, size
            if finalizer is not None:
                weakref.finalize(self, finalizer)

    cuda.HostOnlyCUDAMemoryManager = HostOnlyCUDAMemoryManager  # type: ignore[attr-defined]
    cuda.GetIpcHandleMixin = GetIpcHandleMixin  # type: ignore[attr-defined]
    cuda.MemoryPointer = MemoryPointer  # type: ignore[attr-defined]
    cuda.MemoryInfo = namedtuple("MemoryInfo", "free total")  # type: ignore[attr-defined]
    cuda.installed = []  # type: ignore[attr-defined]
    cuda.set_memory_manager = cuda.installed.append  # type: ignore[attr-defined]
    numba.cuda = cuda  # type: ignore[attr-defined]
    cuda.cudadrv = cudadrv  # type: ignore[attr-defined]
    cudadrv.driver = driver  # type: ignore[attr-defined]
    return {"numba": numba, "numba.cuda": cuda, "numba.cuda.cudadrv": cudadrv,
            "numba.cuda.cudadrv.driver": driver}


def test_numba_plugin_on_a_stand_in(monkeypatch: pytest.MonkeyPatch) -> None:
    mods = _fake_numba()
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    from accelrt.interop import numba as acc_numba
    monkeypatch.setattr(acc_numba, "_plugin_class", None)
    plugin_cls = acc_numba.use_accelrt_memory_manager()
    assert mods["numba.cuda"].installed == [plugin_cls]
    assert acc_numba.AccelrtEMMPlugin is plugin_cls
    assert acc_numba._numba_memory_manager is plugin_cls   # NUMBA_CUDA_MEMORY_MANAGER hook

    class CpuPlugin(plugin_cls):  # type: ignore[misc, valid-type]
        backend_name = "interopcpu"

    ctx = types.SimpleNamespace(device=types.SimpleNamespace(id=1))
    p = CpuPlugin(ctx)
    p.initialize()
    assert p.initialized and p.interface_version == 1
    dev = "interopcpu:1"
    base = _allocated(dev)
    mp = p.memalloc(1000)
    assert mp.size == 1000 and _allocated(dev) >= base + 1000
    assert p.allocations[mp.ptr].ptr == mp.ptr
    assert p.get_ipc_handle(mp) == ("ipc", mp.ptr)
    info = p.get_memory_info()
    assert (info.free, info.total) == backends.get_backend("interopcpu").get_memory_info(1)
    with p.defer_cleanup():
        del mp
        gc.collect()
    assert _allocated(dev) == base and not p.allocations
    keep = p.memalloc(2000)
    assert _allocated(dev) >= base + 2000
    p.reset()                                   # a context reset frees what is still out
    assert _allocated(dev) == base and not p.allocations
    del keep
    gc.collect()                                # the late finalizer does not free twice
    assert _allocated(dev) == base
    monkeypatch.setattr(acc_numba, "_plugin_class", None)
