"""DLPack constants and a pure-Python DLPack capsule builder (numpy and :mod:`ctypes`).

Arrays of host-accessible backends (the CPU backend) export DLPack through a numpy view of
their memory, so numpy does the capsule work. Backends whose memory the host cannot read
(CUDA, OpenCL) need a capsule that describes device memory; :func:`make_capsule` builds one
with numpy and :mod:`ctypes` only (no compiler, no extra dependency): a ``DLManagedTensor``
(capsule name ``"dltensor"``) or, when the consumer asks for DLPack >= 1.0, a
``DLManagedTensorVersioned`` (``"dltensor_versioned"``). The capsule keeps a
Python ``owner`` object alive until the consumer calls the deleter; a capsule dropped
unconsumed calls it at once.

numpy makes the capsule, over a small carrier array holding the owner, and :func:`make_capsule`
rewrites its ``DLTensor`` with ctypes to describe the exported memory: the capsule's destructor
and the deleter are numpy's C functions, which a consumer may call in any state (without the
GIL, or with its own Python error set, as PyTorch does when it refuses a capsule). A deleter
written in Python (a :mod:`ctypes` callback) cannot run while an exception is pending: it
would replace the consumer's error with a ``SystemError``.

The layouts follow ``dlpack.h`` (DLPack 1.1):

``DLDevice {int32 device_type; int32 device_id}``,
``DLDataType {uint8 code; uint8 bits; uint16 lanes}``,
``DLTensor {void* data; DLDevice device; int32 ndim; DLDataType dtype; int64* shape;
int64* strides; uint64 byte_offset}``.

Example::

    >>> import numpy as np
    >>> from accelrt import _dlpack
    >>> host = np.arange(6, dtype=np.float32).reshape(2, 3)
    >>> class Producer:  # exports ``host``'s memory through a capsule of make_capsule
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

import contextlib
import ctypes
import math
import sys
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._fork import reinit_after_fork
from ._errors import type_shown

__all__ = [
    "DLPACK_VERSION",
    "capsule_producer",
    "capsule_shape",
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
    "numpy_capsule",
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

#: The most bytes a DLPack tensor can span (a signed 64-bit size, as PyTorch's storages)
_MAX_BYTES = 2**63 - 1

#: DLPack device types of memory the host reads (numpy imports them)
_HOST_TYPES = (kDLCPU, kDLCUDAHost, kDLROCMHost)

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


class _Carrier(np.ndarray):
    """The numpy array a capsule of :func:`make_capsule` is made from: one byte per dimension,
    holding the exported memory's ``owner`` until numpy's deleter releases the array."""

    owner: object
    made: object   # the shape or strides arrays of _describe, where numpy's do not serve


#: The most dimensions of a numpy array (``NPY_MAXDIMS`` of numpy 2): the carrier of a capsule
#: of more is 1-d, and the capsule's shape and strides are arrays of :func:`_describe`'s.
_CARRIER_MAX_DIMS = 64

# The carriers (by id) of the capsules made here whose memory is still referenced (unconsumed,
# or consumed and not yet released by the consumer's deleter); their count is live_capsules().
_carriers: weakref.WeakValueDictionary[int, _Carrier] = weakref.WeakValueDictionary()
_sweep_lock = reinit_after_fork(threading.Lock())  # serialises updates of _carriers


def live_capsules() -> int:
    """Number of capsules made by :func:`make_capsule` whose memory is still referenced:
    not consumed yet, or consumed and not yet released by the consumer.

    Example::

        >>> from accelrt._dlpack import live_capsules
        >>> live_capsules() >= 0
        True
    """
    with _sweep_lock:
        return len(_carriers)


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
    carrier = np.zeros((1,) * (ndim if ndim <= _CARRIER_MAX_DIMS else 1),
                       np.uint8).view(_Carrier)
    carrier.owner = owner
    if versioned:
        capsule = carrier.__dlpack__(max_version=(1, 0))
        managed: Any = _DLManagedTensorVersioned.from_address(
            _PyCapsule_GetPointer(capsule, _NAME_VERSIONED))
        managed.version.major, managed.version.minor = DLPACK_VERSION
        managed.flags = ((DLPACK_FLAG_BITMASK_READ_ONLY if read_only else 0)
                         | (DLPACK_FLAG_BITMASK_IS_COPIED if copied else 0))
    else:
        capsule = carrier.__dlpack__()
        managed = _DLManagedTensor.from_address(_PyCapsule_GetPointer(capsule, _NAME))
    carrier.made = _describe(managed.dl_tensor, ptr, shape, device, (code, bits, lanes))
    with _sweep_lock:
        _carriers[id(carrier)] = carrier
    return capsule


def _describe(t: Any, ptr: int, shape: tuple[int, ...], device: tuple[int, int],
              dtype: tuple[int, int, int]) -> Any:
    """Rewrite the ``DLTensor`` ``t`` that numpy made for a carrier of ``len(shape)`` dimensions
    (1 beyond :data:`_CARRIER_MAX_DIMS`) to describe the compact row-major memory at ``ptr``;
    return the arrays made here, if any, which the caller keeps alive with the capsule.

    numpy gave ``t`` a shape array of the carrier's dimensions, and a strides array too,
    except that numpy 2.2 and earlier leave the strides of a C-contiguous array NULL
    ("compact, row-major" in DLPack); then the strides are a ctypes array of this function's,
    so that every capsule carries them (DLPack 1.x consumers may rely on them). Beyond
    numpy's dimensions (a carrier cannot have them) the shape is one of this function's too.

    Example::

        >>> import numpy as np
        >>> from accelrt._dlpack import _describe, unused_capsule
        >>> capsule = np.zeros(1, np.uint8).__dlpack__()
        >>> t = unused_capsule(capsule, "demo")[1].dl_tensor
        >>> made = _describe(t, 4096, (1,) * 68 + (2, 3), (1, 0), (2, 32, 1))
        >>> t.ndim, t.shape[68], t.shape[69], t.strides[0], t.strides[69]
        (70, 2, 3, 6, 1)
    """
    ndim = len(shape)
    made: Any = None
    if ndim != t.ndim:
        made = ((ctypes.c_int64 * ndim)(), (ctypes.c_int64 * ndim)())
        t.ndim = ndim
        t.shape = ctypes.cast(made[0], ctypes.POINTER(ctypes.c_int64))
        t.strides = ctypes.cast(made[1], ctypes.POINTER(ctypes.c_int64))
    elif ndim and not t.strides:
        made = (ctypes.c_int64 * ndim)()
        t.strides = ctypes.cast(made, ctypes.POINTER(ctypes.c_int64))
    acc = 1
    for i in reversed(range(ndim)):
        t.shape[i], t.strides[i] = shape[i], acc
        acc *= max(shape[i], 1)
    t.data = ptr or None
    t.device.device_type, t.device.device_id = int(device[0]), int(device[1])
    t.dtype.code, t.dtype.bits, t.dtype.lanes = dtype
    t.byte_offset = 0
    return made


def numpy_capsule(view: np.ndarray, max_version: Any, copy: bool | None,
                  read_only: bool = False, copied: bool = False) -> Any:
    """numpy's capsule of host memory ``view`` (``max_version`` and ``copy`` passed on), with
    the read-only flag when ``read_only``: ``Array.__dlpack__`` of host-accessible memory, and
    of device memory copied to the host for the consumer (``copied``: ``view`` is that copy,
    and a versioned capsule says so with DLPack's is-copied flag).

    Raises:
        BufferError: ``read_only`` with a legacy capsule (``max_version`` None or before
            1.0).

    Example::

        >>> import numpy as np
        >>> from accelrt._dlpack import numpy_capsule, unused_capsule
        >>> unused_capsule(numpy_capsule(np.arange(3.0), None, copy=True), "demo")[0]
        b'dltensor'
    """
    kwargs: dict[str, Any] = {}
    if max_version is not None:
        # numpy reads the major version as a C long (OverflowError beyond it); any version
        # past int32 means the same to it as to PyTorch's __dlpack__, which compares
        # Python ints: "a versioned capsule" (a negative one: a legacy capsule)
        kwargs["max_version"] = tuple(max(-(1 << 31), min(int(v), (1 << 31) - 1))
                                      for v in max_version)
    if copy is not None:
        kwargs["copy"] = copy
    capsule = view.__dlpack__(**kwargs)
    if read_only or copied:
        name, managed = unused_capsule(capsule, "__dlpack__()")
        if name == _NAME_VERSIONED:
            managed.flags |= ((DLPACK_FLAG_BITMASK_READ_ONLY if read_only else 0)
                              | (DLPACK_FLAG_BITMASK_IS_COPIED if copied else 0))
        elif read_only:
            raise BufferError("read_only export requires the versioned DLPack protocol; pass "
                              "max_version=(1, 0) or higher")
    return capsule


def producer_of(obj: Any) -> Any:
    """The object to take ``obj``'s DLPack export from: ``obj`` itself, except for a PyTorch
    tensor (only when PyTorch is already imported; this never imports it), whose export is
    taken from ``tensor.detach()``, an alias of its memory. A tensor's own capsule holds the
    tensor, so ``tensor.set_(...)`` or ``tensor.data = ...`` would free the memory under the
    consumer; the alias keeps it. A tensor that requires grad is returned as it is (PyTorch
    refuses its export, saying to detach it), and so is a tensor subclass with an export of
    its own (``__dlpack__``), which decides what it exports: torch 2.15's
    ``torch.utils.dlpack.ReadOnlyTensorWrapper`` flags its memory read-only (and refuses every
    other torch operation, so the tensor's flags are read with its ``__torch_function__``
    off).

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
    plain = getattr(getattr(torch, "_C", None), "DisableTorchFunctionSubclass", None)
    with plain() if plain is not None else contextlib.nullcontext():   # PyTorch >= 2.0
        is_neg = getattr(tensor, "is_neg", None)   # PyTorch >= 1.10
        if is_neg is not None and is_neg():
            raise BufferError("Can't export tensors with the negative bit set (a lazily "
                              "negated view, e.g. x.conj().imag); use tensor.resolve_neg()")
        requires_grad = tensor.requires_grad
    if requires_grad or type(tensor).__dlpack__ is not getattr(tensor_type, "__dlpack__", None):
        return tensor
    return tensor.detach()


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
        raise TypeError(f"__dlpack_device__() of {type_shown(obj)} returned {dev!r}, not a "
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
           else f"an object of type {type_shown(capsule)}")
    raise BufferError(f"{what}: got {got}, not an unused DLPack capsule (a capsule can be "
                      f"consumed only once)")


def capsule_shape(tensor: Any, itemsize: int, what: str) -> tuple[int, ...]:
    """The shape of a producer's ``DLTensor`` (``tensor``) of ``itemsize``-byte elements.

    Raises:
        BufferError: a negative dimension, or more bytes than a 64-bit address reaches (a
            broken producer); the message starts with ``what``.

    Example::

        >>> import numpy as np
        >>> from accelrt._dlpack import capsule_shape, unused_capsule
        >>> managed = unused_capsule(np.zeros((2, 3)).__dlpack__(), "demo")[1]
        >>> capsule_shape(managed.dl_tensor, 8, "demo")
        (2, 3)
    """
    shape = tuple(int(tensor.shape[i]) for i in range(int(tensor.ndim)))
    if any(n < 0 for n in shape):
        raise BufferError(f"{what}: the capsule's shape {shape} has a negative dimension")
    if math.prod(shape) * itemsize > _MAX_BYTES:
        raise BufferError(f"{what}: the capsule's shape {shape} holds more bytes than an "
                          f"address can reach ({itemsize}-byte elements)")
    return shape


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
        BufferError: ``__dlpack__`` returned no unused DLPack capsule (:func:`unused_capsule`),
            one describing memory the host cannot read (``__dlpack_device__`` said it could),
            or a broken shape (:func:`capsule_shape`); the message starts with ``what``, the
            caller's name.

    Example::

        >>> import numpy as np
        >>> from accelrt._dlpack import host_view
        >>> ro = np.arange(3.0)
        >>> ro.flags.writeable = False
        >>> host_view(np.arange(3.0))[1], host_view(ro)[1]
        (True, False)
    """
    device = producer_device(obj)
    try:
        capsule = obj.__dlpack__(max_version=DLPACK_VERSION)
    except TypeError:   # a producer older than DLPack 1.0
        capsule = obj.__dlpack__()
    name, managed = unused_capsule(capsule, what)
    d = managed.dl_tensor.device
    if d.device_type not in _HOST_TYPES:
        raise BufferError(f"{what}: the capsule describes device "
                          f"{(int(d.device_type), int(d.device_id))}, the producer said {device}")
    dt = managed.dl_tensor.dtype
    capsule_shape(managed.dl_tensor, dlpack_to_dtype(dt.code, dt.bits, dt.lanes).itemsize, what)
    writable = name == _NAME or not managed.flags & DLPACK_FLAG_BITMASK_READ_ONLY
    exported: Any = _Exported(capsule, device)
    return np.from_dlpack(exported), writable
