"""DLPack export/import of accelrt arrays and the ctypes capsule builder."""

from __future__ import annotations

import ctypes
import dataclasses
import gc
import weakref

import numpy as np
import pytest
from helpers.registry import module_backends

import accelrt as acc
from accelrt import _dlpack
from accelrt.backends import Capabilities
from accelrt.backends.cpu import CpuBackend


class HiddenCpu(CpuBackend):
    """cpu devices whose memory the host may not touch directly (like a GPU's)."""

    def capabilities(self, index: int) -> Capabilities:
        return dataclasses.replace(super().capabilities(index), host_accessible=False)


# closed and unregistered after the module
_backends = module_backends({"cpudlhidden": lambda: HiddenCpu(num_devices=2, name="cpudlhidden")})


# An independent reading of dlpack.h's layouts, to check what the producer wrote.
class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class Managed(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p))]


class ManagedVersioned(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32),
                ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


# PyCapsule_SetName keeps the pointer it is given: the new names must outlive the capsules
_USED = {b"dltensor": b"used_dltensor", b"dltensor_versioned": b"used_dltensor_versioned"}


def consume(capsule: object) -> tuple[object, ctypes.Structure, DLTensor]:
    """Read a capsule like a C consumer and mark it used; returns (name, managed, tensor)."""
    name = _api.PyCapsule_GetName(capsule)
    ptr = _api.PyCapsule_GetPointer(capsule, name)
    managed = (ManagedVersioned if name == b"dltensor_versioned" else Managed).from_address(ptr)
    _api.PyCapsule_SetName(capsule, _USED[name])
    return name, managed, managed.dl_tensor


class Wrap:
    """A DLPack producer handing out a prepared capsule."""

    def __init__(self, capsule: object, device: tuple[int, int] = (_dlpack.kDLCPU, 0)) -> None:
        self.capsule, self.device = capsule, device

    def __dlpack__(self, **kwargs: object) -> object:
        return self.capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.device


# ---------------------------------------------------------------------- host-accessible export

@pytest.mark.parametrize("dtype", ["bool", "int8", "uint64", "float16", "float32",
                                   "complex128"])
def test_numpy_from_dlpack_is_zero_copy(dtype):
    a = acc.full((3, 4), 1, dtype=dtype, device="cpu:0")
    assert a.__dlpack_device__() == (_dlpack.kDLCPU, 0)
    v = np.from_dlpack(a)
    assert v.dtype == np.dtype(dtype) and v.shape == (3, 4)
    assert v.ctypes.data == a.data_ptr()
    assert np.shares_memory(v, a.numpy())
    a.fill_(0)
    acc.synchronize("cpu:0")
    assert not v.any()


def test_dlpack_export_keeps_memory_alive():
    dev = "cpu:0"
    base = acc.memory.memory_allocated(dev)
    a = acc.full(1 << 16, 5, dtype="int32", device=dev)
    v = np.from_dlpack(a)
    del a
    gc.collect()
    assert acc.memory.memory_allocated(dev) > base and (v == 5).all()
    del v
    gc.collect()
    assert acc.memory.memory_allocated(dev) == base


def test_dlpack_legacy_and_versioned_capsules():
    a = acc.full(4, 2.0, device="cpu")
    legacy = a.__dlpack__()
    versioned = a.__dlpack__(max_version=(1, 0))
    assert _api.PyCapsule_GetName(legacy) == b"dltensor"
    assert _api.PyCapsule_GetName(versioned) == b"dltensor_versioned"
    copied = np.from_dlpack(Wrap(a.__dlpack__(max_version=(1, 0), copy=True)))
    assert copied.ctypes.data != a.data_ptr() and copied.tolist() == [2.0] * 4


def test_dlpack_arguments():
    a = acc.full(2, 1, dtype="int16", device="cpu")
    assert np.from_dlpack(Wrap(a.__dlpack__(dl_device=(1, 0)))).tolist() == [1, 1]
    np.from_dlpack(Wrap(a.__dlpack__(stream=-1)))
    with pytest.raises(BufferError, match="stream must be None"):
        a.__dlpack__(stream=5)
    with pytest.raises(BufferError, match=r"cannot export.*go to \(1, 0\) \(the host\)$"):
        a.__dlpack__(dl_device=(_dlpack.kDLCUDA, 0))
    with pytest.raises(TypeError):
        a.__dlpack__(5)   # keyword-only
    assert np.from_dlpack(a, copy=True).ctypes.data != a.data_ptr()


def test_no_cuda_array_interface_off_cuda():
    a = acc.empty(2, device="cpu")
    assert not hasattr(a, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match="only for cuda arrays"):
        _ = a.__cuda_array_interface__


def test_empty_array_export():
    v = np.from_dlpack(acc.empty((0, 2), device="cpu"))
    assert v.shape == (0, 2)


# ---------------------------------------------------------------------- device (ctypes) export

@pytest.mark.parametrize("max_version", [None, (1, 0)])
def test_device_capsule_layout_and_release(max_version):
    a = acc.full((2, 3), 7, dtype="int32", device="cpudlhidden:1")
    assert a.__dlpack_device__() == (_dlpack.kDLExtDev, 1)
    owner = weakref.ref(a._mem)
    cap = a.__dlpack__(max_version=max_version)
    name, managed, t = consume(cap)
    assert name == (b"dltensor" if max_version is None else b"dltensor_versioned")
    if max_version is not None:
        assert (managed.major, managed.minor) == _dlpack.DLPACK_VERSION
        assert managed.flags == 0
    assert t.data == a.data_ptr() and (t.device_type, t.device_id) == (_dlpack.kDLExtDev, 1)
    assert t.ndim == 2 and [t.shape[0], t.shape[1]] == [2, 3]
    assert [t.strides[0], t.strides[1]] == [3, 1] and t.byte_offset == 0
    assert (t.code, t.bits, t.lanes) == (0, 32, 1)
    del a
    gc.collect()
    assert owner() is not None          # the consumer holds it until it calls the deleter
    del cap
    gc.collect()
    assert owner() is not None          # a consumed capsule never frees by itself
    managed.deleter(ctypes.addressof(managed))
    gc.collect()
    assert owner() is None


def test_unconsumed_device_capsule_frees_its_owner():
    a = acc.full(3, 1.0, device="cpudlhidden:0")
    owner = weakref.ref(a._mem)
    before = _dlpack.live_capsules()
    cap = a.__dlpack__()
    assert _dlpack.live_capsules() == before + 1
    del a, cap
    gc.collect()
    assert owner() is None and _dlpack.live_capsules() == before


def test_device_capsule_copy_flag_and_host_request():
    a = acc.full(3, 4.5, dtype="float64", device="cpudlhidden:0")
    _name, managed, t = consume(a.__dlpack__(max_version=(1, 0), copy=True))
    assert managed.flags & 2 and t.data != a.data_ptr()
    assert np.ctypeslib.as_array(ctypes.cast(t.data, ctypes.POINTER(ctypes.c_double)),
                                 (3,)).tolist() == [4.5] * 3
    managed.deleter(ctypes.addressof(managed))
    host = np.from_dlpack(a, device="cpu")          # dl_device=(kDLCPU, 0): a host copy
    assert host.tolist() == [4.5] * 3
    with pytest.raises(BufferError, match="needs a copy"):
        a.__dlpack__(dl_device=(1, 0), copy=False)
    with pytest.raises(TypeError, match="stream"):
        a.__dlpack__(stream="s")
    with pytest.raises((RuntimeError, BufferError)):   # numpy >= 2.5 raises BufferError
        np.from_dlpack(a)                           # numpy cannot read device memory


def test_make_capsule_with_cpu_array_consumed_by_numpy():
    a = acc.asarray(np.arange(12, dtype=np.float32).reshape(3, 4), device="cpu:0", copy=True)
    for versioned in (False, True):
        cap = _dlpack.make_capsule(a.data_ptr(), a.shape, a.dtype, (_dlpack.kDLCPU, 0),
                                   owner=a, versioned=versioned)
        v = np.from_dlpack(Wrap(cap))
        assert v.ctypes.data == a.data_ptr() and np.shares_memory(v, a.numpy())
        assert v.tolist() == np.arange(12).reshape(3, 4).tolist()
    ro = np.from_dlpack(Wrap(_dlpack.make_capsule(a.data_ptr(), a.shape, a.dtype, (1, 0),
                                                  owner=a, versioned=True, read_only=True)))
    assert not ro.flags.writeable


def test_make_capsule_bad_inputs():
    with pytest.raises(TypeError, match="DLPack"):
        _dlpack.make_capsule(0, (1,), "U3", (1, 0), owner=None)
    with pytest.raises(ValueError, match="negative"):
        _dlpack.make_capsule(0, (-1,), "f4", (1, 0), owner=None)
    with pytest.raises(ValueError, match="versioned"):
        _dlpack.make_capsule(0, (1,), "f4", (1, 0), owner=None, read_only=True)


def test_dtype_and_device_type_tables():
    assert _dlpack.dtype_to_dlpack("complex64") == (_dlpack.kDLComplex, 64, 1)
    assert _dlpack.dtype_to_dlpack(np.uint16) == (_dlpack.kDLUInt, 16, 1)
    # a backend that does not declare its DLPack device type gets its family's by name
    from types import SimpleNamespace
    from accelrt._backend import Backend
    for name, code in (("cuda", _dlpack.kDLCUDA), ("rocm", _dlpack.kDLROCM),
                       ("mystery", _dlpack.kDLExtDev)):
        caps = Backend.capabilities(SimpleNamespace(name=name), 0)  # type: ignore[arg-type]
        assert caps.dlpack_device_type == code and not caps.host_accessible


# ---------------------------------------------------------------------- import

def test_asarray_from_dlpack_producer_shares_host_memory():
    a = acc.full(5, 3, dtype="int64", device="cpu:0")
    cap_owner = np.arange(5, dtype=np.int64)
    b = acc.asarray(Wrap(cap_owner.__dlpack__()), device="cpu:0")
    assert b.data_ptr() == cap_owner.ctypes.data
    b.copy_(a)
    assert cap_owner.tolist() == [3] * 5


def test_asarray_from_device_producer_copies_through_host():
    a = acc.full(4, 6, dtype="uint8", device="cpudlhidden:1")
    b = acc.asarray(_Foreign(a), device="cpu:0")
    assert b.tolist() == [6] * 4 and b.data_ptr() != a.data_ptr()
    with pytest.raises(ValueError, match="copy=False"):
        acc.asarray(_Foreign(a), device="cpu:0", copy=False)

    class Stubborn(_Foreign):
        def __dlpack__(self, **kwargs: object) -> object:
            raise BufferError("no copies here")
    with pytest.raises(BufferError, match="cannot import DLPack data"):
        acc.asarray(Stubborn(a), device="cpu:0")


class _Foreign:
    """A non-accelrt producer around an array (hides the Array type from asarray)."""

    def __init__(self, a: acc.Array) -> None:
        self.a = a

    def __dlpack__(self, **kwargs: object) -> object:
        return self.a.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self.a.__dlpack_device__()
