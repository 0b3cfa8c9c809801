"""accelrt.Array and its factories: every method, every bad input, memory lifetime."""

from __future__ import annotations

import dataclasses
import gc
import threading

import numpy as np
import pytest
from helpers.registry import module_backends
from hypothesis import given, settings
from hypothesis import strategies as st

import accelrt as acc
from accelrt import backends
from accelrt.backends import Capabilities
from accelrt.backends.cpu import CpuBackend


class HiddenCpu(CpuBackend):
    """cpu devices whose memory the host may not touch directly (like a GPU's)."""

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), host_accessible=False)


# Two-device variants: sync streams, async streams (worker threads), and devices whose memory
# is not host-accessible; closed (worker threads stopped) and unregistered after the module.
_backends = module_backends({
    "cpusync": lambda: CpuBackend(num_devices=2, async_streams=False, name="cpusync"),
    "cpuarr": lambda: CpuBackend(num_devices=2, async_streams=True, name="cpuarr"),
    "cpuhidden": lambda: HiddenCpu(num_devices=2, async_streams=True, name="cpuhidden"),
})

DEVICE_SETS = ["cpusync", "cpuarr", "cpuhidden"]


def allocated(dev: str) -> int:
    return acc.memory.memory_allocated(dev)


@pytest.fixture(params=DEVICE_SETS)
def bk(request: pytest.FixtureRequest) -> str:
    return request.param


# ---------------------------------------------------------------------- construction

def test_empty_metadata(bk):
    a = acc.empty((2, 3), dtype="float64", device=f"{bk}:0")
    assert a.shape == (2, 3) and a.ndim == 2 and a.size == 6 and a.itemsize == 8
    assert a.nbytes == 48 and a.dtype == np.dtype("float64")
    assert a.device == acc.device(bk, 0) and a.device.index == 0
    assert isinstance(a.data_ptr(), int) and a.data_ptr() != 0
    assert repr(a) == f"accelrt.Array(shape=(2, 3), dtype=float64, device='{bk}:0')"


def test_pickle_and_copy_carry_contents():
    import copy
    import pickle
    a = acc.full((2, 2), 3, dtype="int16", device="cpuhidden:1")
    for b in (pickle.loads(pickle.dumps(a)), copy.deepcopy(a)):
        assert b is not a and b.data_ptr() != a.data_ptr()
        assert b.device == a.device and b.dtype == a.dtype and b.tolist() == [[3, 3], [3, 3]]
    # copy.copy is shallow, as copy.copy of a torch.Tensor (it shares the storage; torch
    # 2.15's test_torch.py test_copy_all_dtypes_and_devices)
    b = copy.copy(a)
    assert b is not a and b.data_ptr() == a.data_ptr() and b.tolist() == [[3, 3], [3, 3]]


def test_array_constructor_is_empty():
    a = acc.Array(4, dtype="int8", device="cpu:0")
    assert a.shape == (4,) and a.dtype == np.int8 and isinstance(a, acc.Array)


def test_default_device_and_dtype():
    acc.set_current_accelerator("cpu")
    a = acc.empty(3)
    assert a.dtype == np.float32 and a.device == acc.device("cpu", acc.current_device_index())


def test_shape_forms():
    assert acc.empty(5, device="cpu").shape == (5,)
    assert acc.empty([2, 2], device="cpu").shape == (2, 2)
    assert acc.empty(np.int64(3), device="cpu").shape == (3,)
    assert acc.empty(np.array([1, 2]), device="cpu").shape == (1, 2)
    s = acc.empty((), device="cpu")
    assert s.shape == () and s.size == 1 and s.nbytes == 4 and s.ndim == 0


@pytest.mark.parametrize("shape, exc, match", [
    ((-1,), ValueError, "negative"),
    (-3, ValueError, "negative"),
    ((2, 1.5), TypeError, "ints"),
    ("3", TypeError, "size entries must be ints"),
    (True, TypeError, "bool"),
    ((2, True), TypeError, "ints"),
    (None, TypeError, "size entries must be ints"),
    (3.0, TypeError, "size entries must be ints"),
])
def test_bad_shape(shape, exc, match):
    with pytest.raises(exc, match=match):
        acc.empty(shape, device="cpu")


@pytest.mark.parametrize("dtype, exc, match", [
    ("float33", TypeError, "unknown dtype"),
    ("U4", TypeError, "not supported"),
    (object, TypeError, "not supported"),
    ("datetime64[s]", TypeError, "not supported"),
    (">f4", ValueError, "byte order"),
    # None is the default dtype, as in PyTorch (test_review_torch_array_s25.py)
    (np.dtype([("a", "i4")]), TypeError, "not supported"),
    # a structured-dtype spec is no dtype argument (torch: "must be torch.dtype, not list")
    ([("a", "i4")], TypeError, "argument 'dtype' must be a numpy dtype"),
])
def test_bad_dtype(dtype, exc, match):
    with pytest.raises(exc, match=match):
        acc.empty(2, dtype=dtype, device="cpu")


def test_dtype_not_in_capabilities():
    class NoHalf(CpuBackend):
        def get_device_capability(self, index):
            return {"supported_dtypes": ["float32"]}
    backends.register("cpunohalf", lambda: NoHalf(name="cpunohalf"), replace=True)
    with pytest.raises(TypeError, match="not supported on cpunohalf:0"):
        acc.empty(2, dtype="float16", device="cpunohalf:0")
    assert acc.empty(2, dtype="float32", device="cpunohalf:0").nbytes == 8


def test_bad_device():
    with pytest.raises(IndexError):
        acc.empty(2, device="cpu:99")
    with pytest.raises(TypeError):
        acc.empty(2, device=1.5)
    with pytest.raises(acc.BackendUnavailableError):
        acc.empty(2, device="nosuchbackend:0")


def test_zero_size_arrays(bk):
    a = acc.zeros((0, 4), device=f"{bk}:0")
    assert a.nbytes == 0 and a.size == 0 and a.data_ptr() == 0
    assert a.numpy().shape == (0, 4)
    a.fill_(3.0)
    a.copy_(np.empty((0, 4), np.float32))
    assert a.to(f"{bk}:1").shape == (0, 4)
    a.record_stream(acc.Stream(f"{bk}:0"))


# ---------------------------------------------------------------------- factories

@pytest.mark.parametrize("dtype", ["bool", "int8", "uint16", "int32", "int64", "float16",
                                   "float32", "float64", "complex64", "complex128"])
def test_zeros_full_all_dtypes(bk, dtype):
    z = acc.zeros((3, 5), dtype=dtype, device=f"{bk}:1")
    assert np.array_equal(z.numpy(), np.zeros((3, 5), dtype))
    value = {"b": True, "c": 1.5 - 2j, "f": -2.5}.get(np.dtype(dtype).kind, 7)
    f = acc.full((3, 5), value, dtype=dtype, device=f"{bk}:1")
    assert f.dtype == np.dtype(dtype)
    assert np.array_equal(f.numpy(), np.full((3, 5), value, dtype))


@pytest.mark.parametrize("value, dtype", [(True, np.bool_), (3, np.int64), (2.5, np.float32),
                                          (1j, np.complex64), (np.float64(1.0), np.float32),
                                          (np.int16(4), np.int64)])
def test_full_infers_dtype(value, dtype):
    a = acc.full(2, value, device="cpu")
    assert a.dtype == dtype
    assert np.array_equal(a.numpy(), np.full(2, value, dtype))


def test_full_bad_value():
    with pytest.raises(TypeError, match="fill value"):
        acc.full(2, "x", device="cpu")
    with pytest.raises(TypeError, match="fill value"):
        acc.full(2, None, dtype="int32", device="cpu")


# ---------------------------------------------------------------------- fill_

def test_fill_patterns(bk):
    a = acc.empty(1000, dtype="uint8", device=f"{bk}:0")
    assert a.fill_(255) is a
    assert (a.numpy() == 255).all()
    for dtype, value in [("int16", -2), ("int32", 123456), ("float32", 0.1),
                         ("float64", -1e300), ("complex128", 3 + 4j), ("bool", False)]:
        x = acc.empty((7, 3), dtype=dtype, device=f"{bk}:0").fill_(value)
        assert np.array_equal(x.numpy(), np.full((7, 3), value, dtype)), dtype


def test_fill_float_into_int_truncates():
    assert acc.empty(2, dtype="int32", device="cpu").fill_(2.9).tolist() == [2, 2]
    assert acc.empty(2, dtype="float32", device="cpu").fill_(np.array(1.5)).tolist() == [1.5,
                                                                                         1.5]


@pytest.mark.parametrize("dtype, value, exc, match", [
    ("uint8", 256, ValueError, "does not fit"),
    ("int8", -129, ValueError, "does not fit"),
    ("uint8", -256, ValueError, "does not fit"),     # -1 wraps to 255, as in PyTorch
    ("int32", float("nan"), ValueError, "cannot fill"),
    ("float16", 1e10, ValueError, "overflows"),
    ("float32", 1j, TypeError, "complex"),
    ("float32", "1", TypeError, "fill value"),
    ("float32", [1.0], TypeError, "fill value"),
])
def test_fill_bad_values(dtype, value, exc, match):
    a = acc.zeros(2, dtype=dtype, device="cpu")
    with pytest.raises(exc, match=match):
        a.fill_(value)
    assert not a.numpy().any()


def test_fill_inf_nan_floats():
    a = acc.empty(2, dtype="float16", device="cpu").fill_(float("inf"))
    assert np.isinf(a.numpy()).all()
    assert np.isnan(acc.empty(2, device="cpu").fill_(float("nan")).numpy()).all()


# ---------------------------------------------------------------------- numpy()

def test_numpy_is_zero_copy_view_on_host_backends():
    a = acc.full(4, 1.0, device="cpu:0")
    v = a.numpy()
    assert v.ctypes.data == a.data_ptr() and v.flags.writeable
    v[1] = 5.0
    assert a.tolist() == [1.0, 5.0, 1.0, 1.0]
    a.fill_(2.0)
    acc.synchronize("cpu:0")             # the view sees stream work once it has run
    assert v.tolist() == [2.0] * 4


def test_numpy_view_keeps_memory_alive():
    dev = "cpu:0"
    base = allocated(dev)
    a = acc.full(1 << 16, 9, dtype="int32", device=dev)
    assert allocated(dev) >= base + (1 << 18)
    v = a.numpy()
    del a
    gc.collect()
    assert allocated(dev) >= base + (1 << 18)     # the view still holds the block
    assert (v == 9).all()
    del v
    gc.collect()
    assert allocated(dev) == base


def test_numpy_copies_when_not_host_accessible():
    a = acc.full(4, 3, dtype="int64", device="cpuhidden:1")
    v = a.numpy()
    assert v.tolist() == [3, 3, 3, 3]
    assert v.ctypes.data != a.data_ptr()
    v[0] = 0
    assert a.tolist() == [3, 3, 3, 3]


def test_numpy_synchronizes_async_stream_work():
    s = acc.Stream("cpuarr:0")
    a = acc.zeros(1 << 20, dtype="uint8", device="cpuarr:0")
    s.wait_stream(acc.current_stream("cpuarr:0"))   # the memset runs before the fill
    with s:
        a.fill_(3)
        a.record_stream(s)
        # inside the stream context numpy() waits for s
        assert (a.numpy() == 3).all()


def test_dunder_array():
    a = acc.full(3, 2, dtype="int16", device="cpu")
    assert np.asarray(a).ctypes.data == a.data_ptr()
    c = np.array(a, copy=True)
    assert c.ctypes.data != a.data_ptr() and c.tolist() == [2, 2, 2]
    assert np.asarray(a, dtype=np.float64).tolist() == [2.0, 2.0, 2.0]
    h = acc.full(3, 2, dtype="int16", device="cpuhidden:0")
    assert np.asarray(h).tolist() == [2, 2, 2]
    with pytest.raises(ValueError, match="needs a copy"):
        np.array(h, copy=False)


# ---------------------------------------------------------------------- copy_ and to

def test_copy_from_host_sources(bk):
    a = acc.empty((2, 3), dtype="float32", device=f"{bk}:1")
    assert a.copy_(np.arange(6, dtype=np.float32).reshape(2, 3)) is a
    assert a.tolist() == [[0, 1, 2], [3, 4, 5]]
    a.copy_([[1, 2, 3], [4, 5, 6]])                          # a list, cast from int64
    assert a.tolist() == [[1, 2, 3], [4, 5, 6]]
    a.copy_(np.arange(6, dtype=np.float64).reshape(3, 2).T)  # non-contiguous source
    assert a.tolist() == [[0, 2, 4], [1, 3, 5]]
    src = np.full((2, 3), 7, np.int8)
    a.copy_(src, non_blocking=True)
    acc.synchronize(f"{bk}:1")
    assert a.tolist() == [[7] * 3] * 2


def test_copy_between_arrays(bk):
    x = acc.full((4, 4), 1.25, dtype="float64", device=f"{bk}:0")
    same = acc.zeros((4, 4), dtype="float64", device=f"{bk}:0").copy_(x)
    peer = acc.zeros((4, 4), dtype="float64", device=f"{bk}:1").copy_(x)
    cast = acc.zeros((4, 4), dtype="int32", device=f"{bk}:1").copy_(x)
    other = acc.zeros((4, 4), dtype="float64", device="cpu:0").copy_(peer)
    for arr, val in [(same, 1.25), (peer, 1.25), (cast, 1), (other, 1.25)]:
        assert np.array_equal(arr.numpy(), np.full((4, 4), val)), arr
    assert x.copy_(x) is x


def test_copy_shape_and_type_errors():
    a = acc.zeros((2, 3), device="cpu")
    with pytest.raises(ValueError, match=r"shape mismatch.*\(2, 3\).*\(2,\)"):
        a.copy_(np.zeros(2))        # (3,) broadcasts, as in PyTorch; (2,) does not
    with pytest.raises(ValueError, match="shape mismatch"):
        a.copy_(acc.zeros((3, 2), device="cpu"))
    with pytest.raises(TypeError, match="numeric"):
        a.copy_(np.array([["a"] * 3] * 2))
    with pytest.raises(TypeError, match="accelrt.Array or an object numpy"):
        a.copy_([[1, 2], [3]])
    with pytest.raises(TypeError, match="non_blocking"):
        a.copy_(np.zeros((2, 3)), non_blocking=1)
    assert not a.numpy().any()


def test_to(bk):
    x = acc.asarray(np.arange(12, dtype=np.int32).reshape(3, 4), device=f"{bk}:0", copy=True)
    assert x.to(f"{bk}:0") is x
    y = x.to(f"{bk}:1")
    assert y.device == acc.device(bk, 1) and y.dtype == x.dtype
    z = y.to("cpu:0", non_blocking=True)
    w = z.to(acc.device(bk, 0), non_blocking=True)
    acc.synchronize(f"{bk}:0")
    for arr in (y, z, w):
        assert np.array_equal(arr.numpy(), np.arange(12).reshape(3, 4))
    with pytest.raises(IndexError):
        x.to(f"{bk}:7")
    with pytest.raises(TypeError):
        x.to(1.5)


def test_peer_copy_orders_after_destination_stream_work():
    """A peer copy must land after earlier work on the destination's current stream."""
    src = acc.full(1 << 20, 1, dtype="uint8", device="cpuarr:0")
    dst = acc.empty(1 << 20, dtype="uint8", device="cpuarr:1")
    dst.fill_(2)                         # enqueued on cpuarr:1's current stream
    dst.copy_(src)                       # must run after the fill
    assert (dst.numpy() == 1).all()


def test_many_async_round_trips_are_consistent():
    a = acc.empty(4096, dtype="int32", device="cpuarr:0")
    b = acc.empty(4096, dtype="int32", device="cpuarr:1")
    for i in range(20):
        a.fill_(i)
        b.copy_(a)
        a.copy_(b.to("cpuarr:0"))
    assert (a.numpy() == 19).all() and (b.numpy() == 19).all()


# ---------------------------------------------------------------------- asarray

def test_asarray_shares_numpy_memory_on_host_devices():
    host = np.arange(6, dtype=np.float32)
    a = acc.asarray(host, device="cpu:0")
    assert a.data_ptr() == host.ctypes.data and a.dtype == np.float32
    a.fill_(4.0)
    acc.synchronize("cpu:0")
    assert (host == 4.0).all()
    assert np.shares_memory(a.numpy(), host)
    # borrowed memory is not the allocator's
    base = allocated("cpu:0")
    b = acc.asarray(np.ones(1 << 16), device="cpu:0")
    assert allocated("cpu:0") == base and b.record_stream(acc.Stream("cpu:0")) is None
    # and can be copied to/from device memory on any device
    d = acc.zeros(6, device="cpuarr:1").copy_(a)
    assert d.tolist() == [4.0] * 6
    a.copy_(acc.full(6, 5.0, device="cpuarr:1"))
    assert host.tolist() == [5.0] * 6
    e = acc.zeros(6, device="cpu:0").copy_(a)
    assert e.tolist() == [5.0] * 6


def test_asarray_borrowed_memory_outlives_producer():
    host = np.arange(1000, dtype=np.int64)
    a = acc.asarray(host, device="cpu")
    del host
    gc.collect()
    assert a.tolist()[:3] == [0, 1, 2] and a.numpy().sum() == 499500


@pytest.mark.parametrize("host", [
    np.arange(6, dtype=np.float64)[::2],                       # not contiguous
    np.frombuffer(b"\x00" * 16, dtype=np.float32),             # read-only
    np.arange(3, dtype=np.int32),                              # dtype conversion below
])
def test_asarray_copies_when_it_must(host):
    a = acc.asarray(host, device="cpu:0", dtype="float32" if host.dtype == np.int32 else None)
    assert a.data_ptr() != host.ctypes.data
    assert np.array_equal(a.numpy(), host)
    with pytest.raises(ValueError, match="copy=False"):
        acc.asarray(host, device="cpu:0", copy=False,
                    dtype="float32" if host.dtype == np.int32 else None)


def test_asarray_copy_flag():
    host = np.zeros(3, np.float32)
    a = acc.asarray(host, device="cpu", copy=True)
    a.fill_(1.0)
    assert not host.any()
    assert acc.asarray(host, device="cpu", copy=False).data_ptr() == host.ctypes.data
    with pytest.raises(TypeError, match="copy"):
        acc.asarray(host, copy="yes")
    with pytest.raises(ValueError, match="copy=False"):
        acc.asarray(host, device="cpuhidden:0", copy=False)


def test_asarray_python_data():
    assert acc.asarray([1.5, 2], device="cpu").dtype == np.float32
    assert acc.asarray([1, 2], device="cpu").dtype == np.int64
    assert acc.asarray([True], device="cpu").dtype == np.bool_
    assert acc.asarray([1j], device="cpu").dtype == np.complex64
    s = acc.asarray(3.5, device="cpu")
    assert s.shape == () and s.tolist() == 3.5
    nested = acc.asarray([[1, 2], [3, 4]], device="cpuhidden:1", dtype="uint8")
    assert nested.tolist() == [[1, 2], [3, 4]] and nested.dtype == np.uint8
    pylist = [1.0, 2.0]
    x = acc.asarray(pylist, device="cpu")
    x.fill_(0.0)
    assert pylist == [1.0, 2.0]


def test_asarray_from_array():
    x = acc.full(3, 2, dtype="int32", device="cpuarr:0")
    assert acc.asarray(x) is x
    assert acc.asarray(x, device="cpuarr:0", dtype="int32") is x
    c = acc.asarray(x, copy=True)
    assert c is not x and c.data_ptr() != x.data_ptr() and c.tolist() == [2, 2, 2]
    moved = acc.asarray(x, device="cpuhidden:1", dtype="float64")
    assert moved.device == acc.device("cpuhidden", 1) and moved.tolist() == [2.0] * 3
    with pytest.raises(ValueError, match="copy=False"):
        acc.asarray(x, device="cpuarr:1", copy=False)


def test_asarray_bad_inputs():
    with pytest.raises(TypeError, match="numeric"):
        acc.asarray(["a", "b"], device="cpu")
    with pytest.raises(TypeError, match="numeric"):
        acc.asarray({"a": 1}, device="cpu")
    with pytest.raises(TypeError):
        acc.asarray(object(), device="cpu")
    with pytest.raises(TypeError, match="unknown dtype"):
        acc.asarray([1], device="cpu", dtype="nope")


# ---------------------------------------------------------------------- record_stream, GC

def test_gc_returns_memory_to_allocator(bk):
    dev = f"{bk}:0"
    base = allocated(dev)
    arrays = [acc.empty(1000 + i, dtype="uint8", device=dev) for i in range(10)]
    assert allocated(dev) >= base + sum(1000 + i for i in range(10))
    arrays.pop()
    mid = allocated(dev)
    assert base < mid
    del arrays
    assert allocated(dev) == base
    moved = acc.full(100, 1.0, device=dev).to(f"{bk}:1")   # temp source freed at once
    assert allocated(dev) == base
    del moved


def test_record_stream():
    dev = "cpuarr:0"
    s = acc.Stream(dev)
    a = acc.empty(1 << 20, dtype="uint8", device=dev)
    s.wait_stream(acc.current_stream(dev))
    with s:
        a.fill_(1)
    a.record_stream(s)
    with pytest.raises(TypeError, match="accelrt.Stream"):
        a.record_stream("stream")
    a.record_stream(acc.Stream("cpuarr:1"))   # another device of the backend: as torch
    with pytest.raises(ValueError, match="pass a stream of the array's backend"):
        a.record_stream(acc.Stream("cpu:0"))
    del a
    s.synchronize()


def test_arrays_from_many_threads():
    errors = []

    def work(i: int) -> None:
        try:
            for _ in range(20):
                a = acc.full(256, i, dtype="int32", device=f"cpuarr:{i % 2}")
                assert (a.to(f"cpuarr:{(i + 1) % 2}").numpy() == i).all()
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(0, 5), max_size=3),
       dtype=st.sampled_from(["int8", "uint32", "float32", "complex64", "bool"]),
       seed=st.integers(0, 2**32 - 1))
def test_round_trip_property(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    host = (rng.integers(0, 100, size=shape) % (2 if dtype == "bool" else 100)).astype(dtype)
    a = acc.asarray(host, device="cpuhidden:0", copy=True)
    b = a.to("cpuhidden:1").to("cpu:0")
    assert b.shape == tuple(shape) and b.dtype == np.dtype(dtype)
    assert np.array_equal(b.numpy(), host)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_arrays_alive_at_interpreter_exit(mode):
    import os
    import subprocess
    import sys
    code = ("import numpy as np, accelrt as acc\n"
            "a = acc.full(1000, 1.0, device='cpu:0')\n"
            "b = a.to('cpu:1', non_blocking=True); v = b.numpy(); cap = a.__dlpack__()\n"
            "c = acc.asarray(np.ones(10), device='cpu:1')\n"
            "s = acc.Stream('cpu:0')\n"
            "with s:\n    a.fill_(2.0)\n"
            "a.record_stream(s)\n")
    env = {**os.environ, "ACCELRT_CPU_STREAMS": mode, "ACCELRT_CPU_DEVICES": "2"}
    r = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,  # noqa: PLW1510
                       text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stderr == "", r.stderr


# ---------------------------------------------------------------------- CUDA array interface

class CaiDevice(HiddenCpu):
    """A device backend that can locate ``__cuda_array_interface__`` memory (like cuda)."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)
        self.blocks: dict[int, tuple[int, int]] = {}

    def malloc(self, index: int, size: int) -> int:
        ptr = super().malloc(index, size)
        if ptr:
            self.blocks[ptr] = (size, index)
        return ptr

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), pointer_lookup=True)

    def pointer_device(self, ptr: int) -> int | None:
        for base, (size, index) in list(self.blocks.items()):
            if base <= ptr < base + size:
                return index
        return None


# closed (worker threads stopped) and unregistered after the module
_cai_backend = module_backends(
    {"cpucai": lambda: CaiDevice(num_devices=2, async_streams=True, name="cpucai")},
    name="_cai_backend")


class Producer:
    """A stand-in for a CUDA library's array without ``__dlpack__`` (Numba, old CuPy)."""

    def __init__(self, src: acc.Array, stream: int | None = None, *,
                 strides: tuple[int, ...] | None = None, shape: tuple[int, ...] | None = None,
                 readonly: bool = False) -> None:
        self.src = src
        self.__cuda_array_interface__ = {
            "shape": src.shape if shape is None else shape, "typestr": src.dtype.str,
            "data": (src.data_ptr(), readonly), "version": 3, "strides": strides,
            "stream": stream,
        }


class _Raw:
    """numpy's view of ``n`` float64 at a raw address (the stand-in device's memory is host
    memory; only the producer's 'kernel' writes it this way)."""

    def __init__(self, ptr: int, n: int) -> None:
        self.__array_interface__ = {"shape": (n,), "typestr": "<f8", "data": (ptr, False),
                                    "version": 3}



def _cai_src(values: np.ndarray, device: str = "cpucai:0") -> acc.Array:
    return acc.asarray(values, device=device, copy=True)


def test_cai_producer_is_wrapped_without_a_copy() -> None:
    src = _cai_src(np.arange(6, dtype=np.float32).reshape(2, 3))
    a = acc.asarray(Producer(src), device="cpucai:0")
    assert a.data_ptr() == src.data_ptr() and a.shape == (2, 3) and a.dtype == np.float32
    a.fill_(4.0)
    assert src.numpy().tolist() == [[4.0] * 3] * 2
    b = acc.asarray(Producer(src, stream=acc.Stream("cpucai:0").stream_id), device="cpucai:0")
    assert b.data_ptr() == src.data_ptr() and b.device == acc.device("cpucai:0")
    other = _cai_src(np.ones(2, np.int8), "cpucai:1")
    c = acc.asarray(Producer(other), device="cpucai:1", copy=False)
    assert c.device == acc.device("cpucai:1") and c.data_ptr() == other.data_ptr()


def test_cai_copies_when_it_must() -> None:
    host = np.arange(12, dtype=np.int32).reshape(3, 4)
    src = _cai_src(host)
    for kw in ({"copy": True}, {"dtype": "float64"}, {"device": "cpucai:1"}):
        a = acc.asarray(Producer(src), **({"device": "cpucai:0"} | kw))  # type: ignore[arg-type]
        assert a.data_ptr() != src.data_ptr()
        assert a.numpy().tolist() == host.tolist()
    ro = acc.asarray(Producer(src, readonly=True), device="cpucai:0")
    assert ro.data_ptr() != src.data_ptr() and ro.numpy().tolist() == host.tolist()
    # a transposed (strided) view is gathered into a C-contiguous copy
    t = acc.asarray(Producer(src, shape=(4, 3), strides=(4, 16)), device="cpucai:0")
    assert t.numpy().tolist() == host.T.tolist()
    with pytest.raises(ValueError, match="copy=False"):
        acc.asarray(Producer(src), device="cpucai:0", dtype="int64", copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        acc.asarray(Producer(src, shape=(4, 3), strides=(4, 16)), device="cpucai:0",
                    copy=False)
    empty = acc.asarray(Producer(acc.empty(0, dtype="float32", device="cpucai:0")),
                        device="cpucai:0")
    assert empty.shape == (0,) and empty.device == acc.device("cpucai:0")


def test_cai_waits_for_the_producers_stream() -> None:
    src = _cai_src(np.zeros(1000, np.float64))
    producer = acc.Stream("cpucai:0")
    gate = threading.Event()
    backend = backends.get_backend("cpucai")
    ptr = src.data_ptr()

    def write() -> None:   # the producer's kernel: blocked until the copy is enqueued
        gate.wait(30)
        np.copyto(np.asarray(_Raw(ptr, 1000)), 7.0)

    backend.launch_host_func(0, write, producer.stream_id)
    copied = acc.asarray(Producer(src, stream=producer.stream_id), device="cpucai:0", copy=True)
    gate.set()
    assert copied.numpy().tolist() == [7.0] * 1000
    with pytest.raises(ValueError, match="not a live stream"):
        acc.asarray(Producer(src, stream=987654321), device="cpucai:0")


def test_cai_memory_not_on_the_device_is_refused() -> None:
    host_memory = acc.zeros(4, device="cpu:0")         # CPU-backend memory, not a GPU's
    with pytest.raises(ValueError, match="not device memory of cpucai"):
        acc.asarray(Producer(host_memory), device="cpucai:0")


@pytest.mark.skipif(backends.unavailable_reason("cuda") is None,
                    reason="checks the refusal without CUDA")
def test_cai_without_cuda_says_what_is_missing() -> None:
    host_memory = acc.zeros(4, device="cpu:0")
    with pytest.raises(acc.BackendUnavailableError, match="__cuda_array_interface__"):
        acc.asarray(Producer(host_memory))
    with pytest.raises(acc.BackendUnavailableError, match="cuda backend"):
        acc.asarray(Producer(host_memory), device="cpu:0")


@pytest.mark.parametrize(("desc", "exc", "match"), [
    ({"shape": (2,), "typestr": "<f4", "version": 3}, ValueError, "'data'"),
    ({"shape": (2,), "typestr": "<f4", "data": (64, False), "version": 3, "stream": 0},
     ValueError, "stream 0"),
    ({"shape": (2,), "typestr": "<q9", "data": (64, False), "version": 3}, ValueError,
     "typestr"),
    ({"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3}, ValueError,
     "pointer is 0"),
    ({"shape": "2", "typestr": "<f4", "data": (64, False), "version": 3}, TypeError, "shape"),
    ({"shape": (2,), "typestr": "<f4", "data": (64, False), "version": 3,
      "mask": object()}, ValueError, "mask"),
    ([1, 2], TypeError, "must be a dict"),
])
def test_malformed_cai_is_refused_before_any_device_work(desc: object, exc: type,
                                                         match: str) -> None:
    class Bad:
        __cuda_array_interface__ = desc

    with pytest.raises(exc, match=match):
        acc.asarray(Bad(), device="cpucai:0")


def test_only_cuda_arrays_have_a_cuda_array_interface() -> None:
    a = acc.zeros(2, device="cpu:0")
    assert not hasattr(a, "__cuda_array_interface__")
    assert not hasattr(acc.zeros(2, device="cpucai:0"), "__cuda_array_interface__")
