"""Zero-copy import of a DLPack producer's device memory as an :class:`accelrt.Array`.

:func:`acc.asarray <accelrt.asarray>` shares a DLPack producer's *host* memory and copies
device memory through the host. :func:`from_dlpack` shares device memory too: it passes the
consumer's stream (accelrt's current stream of the device) to ``__dlpack__(stream=...)`` so the
producer orders its pending work before it, reads the ``DLManagedTensor`` (or the versioned
one) with :mod:`ctypes`, takes the capsule over (renaming it ``used_dltensor...`` as the
protocol asks) and calls the producer's deleter when the array's memory is collected: the
producer's memory stays alive as long as the accelrt array (or a view of it) does.

Example::

    >>> import numpy as np
    >>> from accelrt.interop._dlpack_in import from_dlpack
    >>> host = np.arange(4, dtype=np.float32)
    >>> a = from_dlpack(host)              # host memory: a cpu-backend array sharing it
    >>> a.device, a.data_ptr() == host.ctypes.data
    (device(type='cpu', index=0), True)
"""

from __future__ import annotations

import ctypes
import math
import weakref
from typing import TYPE_CHECKING, Any, cast

from .. import _dlpack
from .._typing import DeviceLike
from .._errors import type_shown

if TYPE_CHECKING:
    from .._array import Array

__all__ = ["from_dlpack"]

_HOST = (_dlpack.kDLCPU, _dlpack.kDLCUDAHost, _dlpack.kDLROCMHost)
_USED = {b"dltensor": b"used_dltensor", b"dltensor_versioned": b"used_dltensor_versioned"}

_SetName = _dlpack._PyCapsule_SetName


def _call_deleter(deleter: Any, managed: int) -> None:
    if deleter:
        deleter(managed)


class _Producer:
    """Owns a consumed DLPack tensor: calls the producer's deleter once, when collected."""

    __slots__ = ("__weakref__", "_fin")

    def __init__(self, deleter: Any, managed: int) -> None:
        self._fin = weakref.finalize(self, _call_deleter, deleter, managed)


def _backend_of(dev: tuple[int, int], device: DeviceLike) -> tuple[Any, int]:
    from .. import _backend
    from .._device import _get_device
    if device is None:
        names = [n for n, t in _backend._DLPACK_DEVICE_TYPES.items() if t == dev[0]]
        for name in names:
            if name in _backend.available():
                return _backend.get_backend(name), dev[1]
        raise BufferError(f"from_dlpack(): the producer's memory is on DLPack device {dev}, "
                          f"which no available accelrt backend serves; pass device= naming "
                          f"the accelrt device that holds it")
    b, index = _get_device(device)
    caps = b.capabilities(index)
    if caps.host_accessible or caps.dlpack_device_type != dev[0] or index != dev[1]:
        raise BufferError(f"from_dlpack(): the producer's memory is on DLPack device {dev}, "
                          f"not on {b.name}:{index}; pass that device (or device=None), or "
                          f"copy with acc.asarray(obj, device=...)")
    return b, index


def from_dlpack(obj: Any, device: DeviceLike = None) -> Array:
    """An :class:`accelrt.Array` sharing a DLPack producer's memory (``torch.from_dlpack``).

    Args:
        obj: an object with ``__dlpack__`` and ``__dlpack_device__`` (a tensor of PyTorch,
            JAX, CuPy, an accelrt array...), or a DLPack capsule (as ``torch.from_dlpack``).
        device: the accelrt device holding the memory; ``None`` picks it from the producer's
            DLPack device (host memory: ``cpu:0``; CUDA memory: the ``cuda`` backend).

    Returns:
        An array on that device, sharing the producer's memory (no copy); the producer's
        memory stays alive while the array does.

    Raises:
        TypeError: ``obj`` is not a DLPack producer.
        BufferError: the memory is on another device than ``device`` (host memory: a device
            the host cannot read), no accelrt backend serves its device, ``__dlpack__``
            returned no unused capsule (one consumed already) or a broken one (a negative
            or overflowing shape), it is not
            C-contiguous (negative strides included), read-only, or of a dtype with lanes;
            a PyTorch tensor with its negative bit set (:func:`accelrt._dlpack.producer_of`).
    """
    from .._array import Array, _Memory
    from .._device import _lazy_init
    from .._stream import _current
    obj = _dlpack.capsule_producer(obj, "from_dlpack()")
    if not (hasattr(obj, "__dlpack__") and hasattr(obj, "__dlpack_device__")):
        raise TypeError(f"from_dlpack() takes a DLPack producer (__dlpack__ and "
                        f"__dlpack_device__), got {type_shown(obj)}")
    obj = _dlpack.producer_of(obj)
    dev = _dlpack.producer_device(obj)
    if dev[0] in _HOST:
        return cast("Array", _share_host(obj, device))
    b, index = _backend_of(dev, device)
    _lazy_init(b, index)
    stream = int(_current(b, index)._handle)
    if stream == 0 and dev[0] == _dlpack.kDLCUDA:
        stream = 1   # CUDA's legacy default stream: DLPack reserves 0
    try:
        capsule = obj.__dlpack__(stream=stream, max_version=_dlpack.DLPACK_VERSION)
    except TypeError:   # a producer older than DLPack 1.0
        capsule = obj.__dlpack__(stream=stream)
    return cast("Array", _consume(capsule, b, index, dev, Array, _Memory))


def _share_host(obj: Any, device: DeviceLike) -> Any:
    """An array sharing a host-memory producer's memory (``cpu:0`` unless ``device`` names
    another host-accessible device), or a ``BufferError`` saying why it cannot."""
    from .._array import _check_dtype
    from .._device import _get_device
    from .._factories import _borrow_host, asarray
    b, index = _get_device("cpu:0" if device is None else device)
    if not b.capabilities(index).host_accessible:
        raise BufferError(f"from_dlpack(): the producer's memory is host memory, which "
                          f"{b.name}:{index} cannot share; pass device=None, or copy with "
                          f"acc.asarray(obj, device=...)")
    try:
        host, writable = _dlpack.host_view(obj)
    except TypeError as exc:   # a dtype numpy has not
        raise BufferError(f"from_dlpack(): {exc}") from None
    if not writable:
        raise BufferError("from_dlpack(): the producer exports read-only memory, which an "
                          "accelrt array cannot honour; copy it first (acc.asarray(obj, "
                          "copy=True))")
    if not host.flags.c_contiguous:
        steps = [st // host.itemsize for st in host.strides]
        raise BufferError(f"from_dlpack(): the producer's {host.shape} array is not "
                          f"C-contiguous (strides {steps} elements); make it contiguous first "
                          f"(.contiguous())")
    dt = _check_dtype(host.dtype, b, index)
    if host.size == 0:   # nothing to share
        return asarray(host, device=f"{b.name}:{index}")
    if not host.flags.aligned:
        raise BufferError(f"from_dlpack(): the producer's data at {host.ctypes.data:#x} is "
                          f"not aligned to its {dt.name} elements; copy it first")
    return _borrow_host(host, dt, b, index)


def _consume(capsule: Any, b: Any, index: int, dev: tuple[int, int], array_cls: Any,
             memory_cls: Any) -> Any:
    name, mv = _dlpack.unused_capsule(capsule, "from_dlpack()")
    managed = ctypes.addressof(mv)
    if name == b"dltensor_versioned":
        if mv.version.major != 1:
            raise BufferError(f"from_dlpack(): DLPack {mv.version.major}.{mv.version.minor} "
                              f"is not supported (1.x is)")
        if mv.flags & _dlpack.DLPACK_FLAG_BITMASK_READ_ONLY:
            raise BufferError("from_dlpack(): the producer exports read-only memory, which "
                              "an accelrt array cannot honour; copy it first")
        t, deleter = mv.dl_tensor, mv.deleter
    else:
        t, deleter = mv.dl_tensor, mv.deleter
    if (t.device.device_type, t.device.device_id) != dev:
        raise BufferError(f"from_dlpack(): the capsule describes device "
                          f"{(t.device.device_type, t.device.device_id)}, the producer said {dev}")
    try:
        dt = _dlpack.dlpack_to_dtype(t.dtype.code, t.dtype.bits, t.dtype.lanes)
    except TypeError as exc:
        raise BufferError(f"from_dlpack(): {exc}") from None
    shape = _dlpack.capsule_shape(t, dt.itemsize, "from_dlpack()")
    if t.strides and math.prod(shape):   # an empty array's strides say nothing (as torch's)
        want = 1
        for i in reversed(range(t.ndim)):
            if shape[i] != 1 and int(t.strides[i]) != want:
                raise BufferError(f"from_dlpack(): the producer's {shape} array is not "
                                  f"C-contiguous (strides {[int(t.strides[j]) for j in range(t.ndim)]} "
                                  f"elements); make it contiguous first (.contiguous())")
            want *= shape[i]
    # from here on the memory is ours to release: the capsule no longer calls the deleter
    if _SetName(capsule, _USED[name]):
        raise BufferError("from_dlpack(): cannot mark the DLPack capsule as used")
    owner = _Producer(deleter, managed)
    ptr = (t.data or 0) + int(t.byte_offset)
    nbytes = math.prod(shape) * dt.itemsize
    return array_cls._wrap(memory_cls(ptr, nbytes, None, base=owner), shape, dt, b, index)
