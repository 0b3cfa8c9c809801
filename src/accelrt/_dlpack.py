"""DLPack constants and a pure-Python (ctypes) DLPack capsule builder.

Arrays of host-accessible backends (the CPU backend) export DLPack through a numpy view of
their memory, so numpy does the capsule work. Backends whose memory the host cannot read
(CUDA, OpenCL) need a capsule that describes device memory; :func:`make_capsule` builds one
with :mod:`ctypes` only (no compiler, no extra dependency): a ``DLManagedTensor`` (capsule name
``"dltensor"``) or, when the consumer asks for DLPack >= 1.0, a ``DLManagedTensorVersioned``
(``"dltensor_versioned"``). The capsule keeps a Python ``owner`` object alive until the
consumer calls the deleter; a capsule that is dropped unconsumed releases its owner at the
next garbage collection or the next :func:`make_capsule` call.

The layouts follow ``dlpack.h`` (DLPack 1.1):

``DLDevice {int32 device_type; int32 device_id}``,
``DLDataType {uint8 code; uint8 bits; uint16 lanes}``,
``DLTensor {void* data; DLDevice device; int32 ndim; DLDataType dtype; int64* shape;
int64* strides; uint64 byte_offset}``.

Example::

    >>> import numpy as np
    >>> from accelrt import _dlpack
    >>> host = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> class Producer:  # exports ``host``'s memory through a ctypes-built capsule
    ...     def __dlpack__(self, **kw):
    ...         return _dlpack.make_capsule(host.ctypes.data, host.shape, host.dtype,
    ...                                     (_dlpack.kDLCPU, 0), owner=host)
    ...     def __dlpack_device__(self):
    ...         return (_dlpack.kDLCPU, 0)
    >>> view = np.from_dlpack(Producer())
    >>> bool(np.shares_memory(view, host)), view.tolist()
    (True, [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]])
"""

from __future__ import annotations

import ctypes
import gc
import sys
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._fork import reinit_after_fork

__all__ = [
    "DLPACK_VERSION",
    "capsule_producer",
    "dlpack_to_dtype",
    "dtype_to_dlpack",
    "host_view",
    "kDLCPU",
    "kDLCUDA",
    "kDLCUDAHost",
    "kDLCUDAManaged",
    "kDLExtDev",
    "kDLMetal",
    "kDLOneAPI",
    "kDLOpenCL",
    "kDLROCM",
    "kDLVulkan",
    "make_capsule",
    "producer_device",
    "producer_of",
    "unused_capsule",
]

# DLDeviceType values (dlpack.h).
kDLCPU = 1
kDLCUDA = 2
kDLCUDAHost = 3
kDLOpenCL = 4
kDLVulkan = 7
kDLMetal = 8
kDLVPI = 9
kDLROCM = 10
kDLROCMHost = 11
kDLExtDev = 12
kDLCUDAManaged = 13
kDLOneAPI = 14
kDLWebGPU = 15
kDLHexagon = 16

# DLDataTypeCode values.
kDLInt = 0
kDLUInt = 1
kDLFloat = 2
kDLBfloat = 4
kDLComplex = 5
kDLBool = 6

# DLManagedTensorVersioned.flags bits.
DLPACK_FLAG_BITMASK_READ_ONLY = 1 << 0
DLPACK_FLAG_BITMASK_IS_COPIED = 1 << 1

#: The DLPack version this module produces for versioned capsules.
DLPACK_VERSION: tuple[int, int] = (1, 1)

_KIND_CODES = {"b": kDLBool, "i": kDLInt, "u": kDLUInt, "f": kDLFloat, "c": kDLComplex}


def dtype_to_dlpack(dtype: Any) -> tuple[int, int, int]:
    """``(code, bits, lanes)`` of a numpy dtype.

    Raises:
        TypeError: the dtype has no DLPack equivalent (object, strings, structured).

    Example::

        >>> from accelrt._dlpack import dtype_to_dlpack
        >>> dtype_to_dlpack("float32"), dtype_to_dlpack("bool")
        ((2, 32, 1), (6, 8, 1))
    """
    dt = np.dtype(dtype)
    code = _KIND_CODES.get(dt.kind)
    if code is None or dt.fields is not None or dt.subdtype is not None:
        raise TypeError(f"dtype {dt} has no DLPack equivalent; use a bool, integer, "
                        "floating or complex dtype")
    return code, dt.itemsize * 8, 1


def dlpack_to_dtype(code: int, bits: int, lanes: int) -> np.dtype:
    """The numpy dtype of a DLPack ``(code, bits, lanes)`` (:func:`dtype_to_dlpack` reversed).

    Raises:
        TypeError: no numpy dtype matches (bfloat16, float8, vector lanes...).

    Example::

        >>> from accelrt._dlpack import dlpack_to_dtype
        >>> dlpack_to_dtype(2, 16, 1)
        dtype('float16')
    """
    kind = next((k for k, c in _KIND_CODES.items() if c == code), None)
    dt = None
    if kind is not None and lanes == 1 and bits % 8 == 0:
        try:
            dt = np.dtype(f"{kind}{bits // 8}")
        except TypeError:
            dt = None
    if dt is None or dt.itemsize * 8 != bits:
        raise TypeError(f"DLPack dtype (code {code}, {bits} bits, {lanes} lanes) has no numpy "
                        f"or accelrt dtype (bfloat16, float8 and vector types have none); "
                        f"convert the data first, e.g. tensor.float()")
    return dt


# ---------------------------------------------------------------------- ctypes layouts

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


_Deleter = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _Deleter)]


class _DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class _DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", _DLPackVersion), ("manager_ctx", ctypes.c_void_p),
                ("deleter", _Deleter), ("flags", ctypes.c_uint64), ("dl_tensor", _DLTensor)]


_NAME = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"

_PyCapsule_New = ctypes.pythonapi.PyCapsule_New
_PyCapsule_New.restype = ctypes.py_object
_PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_PyCapsule_GetName = ctypes.pythonapi.PyCapsule_GetName
_PyCapsule_GetName.restype = ctypes.c_char_p
_PyCapsule_GetName.argtypes = [ctypes.py_object]
# a consumer's view of a producer's capsule (accelrt.interop._dlpack_in, host_view)
_PyCapsule_IsValid = ctypes.pythonapi.PyCapsule_IsValid
_PyCapsule_IsValid.restype = ctypes.c_int
_PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_PyCapsule_GetPointer.restype = ctypes.c_void_p
_PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_PyCapsule_SetName = ctypes.pythonapi.PyCapsule_SetName
_PyCapsule_SetName.restype = ctypes.c_int
_PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

# numpy reads versioned (DLPack >= 1.0) capsules, and their read-only flag, from 2.1 on
_NUMPY_VERSIONED = np.lib.NumpyVersion(np.__version__) >= "2.1.0"

# Lifetime of the C structures (and the owner) behind each capsule made here, keyed by the
# address of its DLManagedTensor[Versioned]; entry = [managed, c_shape, c_strides, owner,
# capsule or None].
#
# * The consumer's call of the deleter drops the entry. The deleter only does dict operations
#   (no C calls), so it is safe in any interpreter state.
# * The capsules have no C destructor: a Python-level (ctypes) destructor would run inside
#   capsule deallocation, possibly with the consumer's exception pending, and clobber it.
#   Instead the entry holds the capsule and :func:`_sweep` (run on every new capsule, by
#   :func:`live_capsules` and after each garbage collection) releases entries whose capsule
#   nobody else references: unconsumed ones completely, consumed ones (renamed by the
#   consumer) only their capsule reference, leaving the rest to the deleter.
_live: dict[int, list[Any]] = {}         # mutated with single dict operations (atomic)
_sweep_lock = reinit_after_fork(threading.Lock())  # serialises _sweep
_gc_hooked = False                       # guarded by _sweep_lock


def _deleter_impl(managed_ptr: int | None) -> None:
    if managed_ptr is not None:
        _live.pop(managed_ptr, None)


_deleter = _Deleter(_deleter_impl)


def _capsule_refs(entry: list[Any]) -> int:
    return sys.getrefcount(entry[4])


def _baseline_refs() -> int:
    probe: list[Any] = [None, None, None, None, object()]
    return _capsule_refs(probe)


_BASE_REFS = _baseline_refs()


def _sweep() -> None:
    """Release capsules that can no longer be consumed (see the comment above ``_live``)."""
    dropped: list[Any] = []   # released after the lock, as dropping owners runs finalizers
    with _sweep_lock:
        for key, entry in list(_live.items()):
            if entry[4] is None or _capsule_refs(entry) > _BASE_REFS:
                continue
            if _PyCapsule_GetName(entry[4]) in (_NAME, _NAME_VERSIONED):
                dropped.append(_live.pop(key, None))   # never consumed, never can be
            else:
                dropped.append(entry[4])                # consumed: the deleter frees the rest
                entry[4] = None
    dropped.clear()


def _gc_callback(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and _live:
        _sweep()


def live_capsules() -> int:
    """Number of capsules made by :func:`make_capsule` whose memory is still referenced
    (after releasing those that can no longer be consumed).

    Example::

        >>> from accelrt._dlpack import live_capsules
        >>> live_capsules() >= 0
        True
    """
    _sweep()
    return len(_live)


def make_capsule(ptr: int, shape: Sequence[int], dtype: Any, device: tuple[int, int], *,
                 owner: object, versioned: bool = False, read_only: bool = False,
                 copied: bool = False) -> object:
    """Build a DLPack capsule for C-contiguous memory at ``ptr``.

    Args:
        ptr: address of the first element (device or host address).
        shape: the array shape.
        dtype: a numpy dtype (bool, integer, floating or complex).
        device: ``(device_type, device_id)``, e.g. ``(kDLCUDA, 0)``.
        owner: any object; it is kept alive until the consumer releases the tensor.
        versioned: build a DLPack 1.x ``"dltensor_versioned"`` capsule instead of the legacy
            ``"dltensor"`` one.
        read_only: set the read-only flag (versioned capsules only).
        copied: set the is-copied flag (versioned capsules only).

    Returns:
        A ``PyCapsule`` ready to be returned from ``__dlpack__``.

    Raises:
        TypeError: the dtype has no DLPack equivalent.
        ValueError: a negative dimension, or flags asked of a legacy capsule.

    Example::

        >>> import numpy as np
        >>> from accelrt._dlpack import make_capsule, kDLCPU
        >>> a = np.zeros(3, dtype=np.int32)
        >>> cap = make_capsule(a.ctypes.data, a.shape, a.dtype, (kDLCPU, 0), owner=a)
        >>> type(cap).__name__
        'PyCapsule'
    """
    shape = tuple(int(s) for s in shape)
    if any(s < 0 for s in shape):
        raise ValueError(f"shape {shape} has a negative dimension")
    if (read_only or copied) and not versioned:
        raise ValueError("read_only and copied flags need a versioned (DLPack >= 1.0) capsule")
    code, bits, lanes = dtype_to_dlpack(dtype)
    ndim = len(shape)
    c_shape = (ctypes.c_int64 * max(ndim, 1))(*shape)
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    c_strides = (ctypes.c_int64 * max(ndim, 1))(*reversed(strides))
    global _gc_hooked
    if _live:
        _sweep()
    if not _gc_hooked:
        with _sweep_lock:
            if not _gc_hooked:
                gc.callbacks.append(_gc_callback)
                _gc_hooked = True
    if versioned:
        managed: Any = _DLManagedTensorVersioned()
        managed.version.major, managed.version.minor = DLPACK_VERSION
        managed.flags = ((DLPACK_FLAG_BITMASK_READ_ONLY if read_only else 0)
                         | (DLPACK_FLAG_BITMASK_IS_COPIED if copied else 0))
        name = _NAME_VERSIONED
    else:
        managed = _DLManagedTensor()
        name = _NAME
    managed.deleter = _deleter
    t = managed.dl_tensor
    t.data = ptr or None
    t.device.device_type, t.device.device_id = int(device[0]), int(device[1])
    t.ndim = ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = code, bits, lanes
    t.shape = ctypes.cast(c_shape, ctypes.POINTER(ctypes.c_int64))
    t.strides = ctypes.cast(c_strides, ctypes.POINTER(ctypes.c_int64))
    t.byte_offset = 0
    key = ctypes.addressof(managed)
    capsule = _PyCapsule_New(key, name, None)
    _live[key] = [managed, c_shape, c_strides, owner, capsule]
    return capsule


def producer_of(obj: Any) -> Any:
    """The object to take ``obj``'s DLPack export from: ``obj`` itself, except for a PyTorch
    tensor (only when PyTorch is already imported; this never imports it), whose export is
    taken from ``tensor.detach()``, an alias of its memory. A tensor's own capsule holds the
    tensor, so ``tensor.set_(...)`` or ``tensor.data = ...`` would free the memory under the
    consumer; the alias keeps it. A tensor that requires grad is returned as it is (PyTorch
    refuses its export, saying to detach it).

    Raises:
        BufferError: a tensor with its negative bit set (a lazily negated view, e.g.
            ``x.conj().imag``): PyTorch exports its memory without the negation.

    Example::

        >>> import numpy as np
        >>> from accelrt._dlpack import producer_of
        >>> host = np.arange(3)
        >>> producer_of(host) is host
        True
    """
    torch = sys.modules.get("torch")
    tensor_type = getattr(torch, "Tensor", None)
    if not isinstance(tensor_type, type) or not isinstance(obj, tensor_type):
        return obj
    tensor: Any = obj
    is_neg = getattr(tensor, "is_neg", None)   # PyTorch >= 1.10
    if is_neg is not None and is_neg():
        raise BufferError("Can't export tensors with the negative bit set (a lazily negated "
                          "view, e.g. x.conj().imag); use tensor.resolve_neg()")
    return tensor if tensor.requires_grad else tensor.detach()


class _Exported:
    """Hands a capsule already taken from a producer to ``np.from_dlpack``."""

    __slots__ = ("_capsule", "_device")

    def __init__(self, capsule: object, device: tuple[int, int]) -> None:
        self._capsule, self._device = capsule, device

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._device


def producer_device(obj: Any) -> tuple[int, int]:
    """``obj.__dlpack_device__()`` as ``(device_type, device_id)`` ints.

    Raises:
        TypeError: it returned something else than a pair of ints (or int-convertible
            values, such as PyTorch's ``DLDeviceType`` members).

    Example::

        >>> import numpy as np
        >>> from accelrt._dlpack import producer_device
        >>> producer_device(np.zeros(1))
        (1, 0)
    """
    dev = obj.__dlpack_device__()
    try:
        kind, index = dev
        return int(kind), int(index)
    except (TypeError, ValueError):
        raise TypeError(f"__dlpack_device__() of {type(obj).__name__} returned {dev!r}, not a "
                        f"(device_type, device_id) pair of ints") from None


def unused_capsule(capsule: object, what: str) -> tuple[bytes, Any]:
    """The name of an unconsumed DLPack capsule (``b"dltensor_versioned"`` or
    ``b"dltensor"``) and its ``DLManagedTensorVersioned`` / ``DLManagedTensor``.

    Raises:
        BufferError: ``capsule`` is no DLPack capsule, or one already consumed (renamed
            ``used_dltensor...``); the message starts with ``what``.

    Example::

        >>> import numpy as np
        >>> from accelrt._dlpack import unused_capsule
        >>> unused_capsule(np.zeros(2).__dlpack__(), "demo")[0]
        b'dltensor'
    """
    for name, layout in ((_NAME_VERSIONED, _DLManagedTensorVersioned),
                         (_NAME, _DLManagedTensor)):
        if _PyCapsule_IsValid(capsule, name):
            return name, layout.from_address(_PyCapsule_GetPointer(capsule, name))
    got = (f"a capsule named {_PyCapsule_GetName(capsule)!r}"
           if type(capsule).__name__ == "PyCapsule"
           else f"an object of type {type(capsule).__name__}")
    raise BufferError(f"{what}: got {got}, not an unused DLPack capsule (a capsule can be "
                      f"consumed only once)")


def capsule_producer(obj: Any, what: str) -> Any:
    """``obj`` itself, or, when it is a DLPack capsule, a producer handing that capsule out
    (its device read from the capsule), as ``torch.asarray(capsule)`` and
    ``torch.from_dlpack(capsule)`` take one.

    Raises:
        BufferError: a capsule that is no unused DLPack capsule (:func:`unused_capsule`).

    Example::

        >>> import numpy as np
        >>> from accelrt._dlpack import capsule_producer
        >>> capsule_producer(np.arange(2).__dlpack__(), "demo").__dlpack_device__()
        (1, 0)
    """
    if type(obj).__name__ != "PyCapsule":
        return obj
    _, managed = unused_capsule(obj, what)
    d = managed.dl_tensor.device
    return _Exported(obj, (int(d.device_type), int(d.device_id)))


def host_view(obj: Any, what: str = "from_dlpack()") -> tuple[np.ndarray, bool]:
    """A numpy view of a host-memory DLPack producer's data, and whether the producer lets
    the consumer write to it: ``False`` only for a DLPack >= 1.0 capsule with the read-only
    flag (numpy marks every legacy capsule's view read-only, as legacy capsules carry no flag;
    their memory counts as writable, as PyTorch's ``from_dlpack`` treats it).

    Raises:
        TypeError: the data has no numpy dtype (:func:`dlpack_to_dtype`).
        BufferError: ``__dlpack__`` returned no unused DLPack capsule (:func:`unused_capsule`;
            the message starts with ``what``, the caller's name).

    Example::

        >>> import numpy as np
        >>> from accelrt._dlpack import host_view
        >>> ro = np.arange(3.0)
        >>> ro.flags.writeable = False
        >>> host_view(np.arange(3.0))[1], host_view(ro)[1]
        (True, False)
    """
    device = producer_device(obj)
    if _NUMPY_VERSIONED:
        try:
            capsule = obj.__dlpack__(max_version=DLPACK_VERSION)
        except TypeError:   # a producer older than DLPack 1.0
            capsule = obj.__dlpack__()
    else:
        capsule = obj.__dlpack__()
    name, managed = unused_capsule(capsule, what)
    dt = managed.dl_tensor.dtype
    dlpack_to_dtype(dt.code, dt.bits, dt.lanes)
    writable = name == _NAME or not managed.flags & DLPACK_FLAG_BITMASK_READ_ONLY
    exported: Any = _Exported(capsule, device)
    return np.from_dlpack(exported), writable
