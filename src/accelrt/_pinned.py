"""Pinned host arrays: :func:`pin_memory`, :func:`is_pinned` and the factories'
``pin_memory=True`` (PyTorch's ``Tensor.pin_memory()``, ``Tensor.is_pinned()`` and
``torch.empty(..., pin_memory=True)``).

accelrt has no host tensors: host data are numpy arrays, and an :class:`accelrt.Array` always
lives on an accelerator device. So a pinned host array is a numpy ``ndarray`` whose memory is a
block of a backend's pinned host pool (:mod:`accelrt.memory._host`, PyTorch's
``CachingHostAllocator``): the current accelerator's unless ``device=`` names another backend.

* The block goes back to the pool when the last numpy view of it dies; the pool reuses it only
  after the work that the streams which used it had queued at that moment has completed (a
  non-blocking copy from the array records its stream on the block, as PyTorch's copies do).
* ``host_memory_stats()`` counts pinned arrays like every other pinned block, and
  ``empty_host_cache()`` frees the blocks no array uses any more.
* A non-blocking copy from a pinned array into an :class:`accelrt.Array` is enqueued directly
  from the pinned memory: no staging block, no private copy. It reads the array when the
  stream runs it, so writing the array before the stream is done changes what is copied, as
  in PyTorch.
* A backend whose host memory cannot be page-locked (capability
  ``page_locked_host_memory`` False: OpenCL) cannot pin, as PyTorch cannot on a machine
  without a pinned memory allocator: pinning raises :class:`accelrt.AcceleratorError` and
  :func:`is_pinned` is False.

Example::

    >>> import numpy as np
    >>> import accelrt as acc
    >>> p = acc.pin_memory(np.arange(4.0), device="cpu")
    >>> acc.is_pinned(p), acc.is_pinned(p[1:]), acc.is_pinned(np.arange(4.0))
    (True, True, False)
    >>> a = acc.empty(4, dtype="float64", device="cpu:0").copy_(p, non_blocking=True)
    >>> a.tolist()
    [0.0, 1.0, 2.0, 3.0]
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from ._device import _factory_device, _get_device
from ._errors import AcceleratorError, AcceleratorValueError, type_shown
from ._size import storage_nbytes
from .memory._host import HostCachingAllocator, get_host_allocator, host_allocators

if TYPE_CHECKING:
    from ._backend import Backend
    from ._typing import DeviceLike

#: the scalar type of :func:`pin_memory`'s argument, which its result keeps
_ScalarT = TypeVar("_ScalarT", bound="np.generic[object]")

__all__ = ["factory_backend", "is_pinned", "new_pinned", "pin_flag", "pin_memory",
           "pinned_pool_of"]

_is_finalizing = sys.is_finalizing


class _PinnedBuffer:
    """Owns one block of a pinned host pool and exposes it to numpy as bytes; the block goes
    back to the pool when the last numpy view of it is collected."""

    __slots__ = ("__array_interface__", "_pool", "_ptr")

    def __init__(self, pool: HostCachingAllocator, ptr: int, nbytes: int) -> None:
        self._pool = pool
        self._ptr = ptr
        self.__array_interface__ = {"version": 3, "shape": (nbytes,), "typestr": "|u1",
                                    "data": (ptr, False), "strides": None}

    def __del__(self) -> None:
        if _is_finalizing is None or _is_finalizing():
            return          # shutdown: the backend may be gone; the process releases it all
        # never blocks: the collector may run this inside the pool's own critical section
        self._pool.free(self._ptr, nonblocking=True)


def _span(a: np.ndarray) -> tuple[int, int]:
    """``(lowest address, bytes spanned)`` of a non-empty array, any strides."""
    lo = sum(min(0, (n - 1) * s) for n, s in zip(a.shape, a.strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(a.shape, a.strides)) + a.itemsize
    return a.ctypes.data + lo, hi - lo


def pinned_pool_of(b: Backend, a: np.ndarray) -> HostCachingAllocator | None:
    """The pinned host pool of ``b`` if every byte of ``a`` lies in one of its live blocks
    (``a`` is pinned for ``b``), else None. Never makes a pool."""
    if not a.size:
        return None
    for pool in host_allocators():
        if pool._b is b:
            lo, n = _span(a)
            return pool if pool.contains(lo, n) else None
    return None


def _check_host_array(a: object, what: str) -> np.ndarray:
    from ._array import Array
    if isinstance(a, Array):
        raise TypeError(f"cannot pin 'accelrt.Array' (memory of {a.device}): only host (numpy) "
                        "arrays can be pinned; an Array's memory already is device memory "
                        "(copy it to the host with .numpy() first if you need a pinned copy)")
    if not isinstance(a, np.ndarray):
        raise TypeError(f"{what}() takes a numpy.ndarray (a host array), got "
                        f"{type_shown(a)}; convert it with numpy.asarray first")
    return a


def is_pinned(a: object, device: DeviceLike = None) -> bool:
    """True if the host array ``a`` resides in pinned memory (``Tensor.is_pinned()``).

    An array made by :func:`pin_memory` or by a factory with ``pin_memory=True``, and every
    numpy view of one (slices, reshapes, transposes), is pinned; ordinary numpy arrays are
    not, and neither is an :class:`accelrt.Array` (device memory, as a CUDA tensor's
    ``is_pinned()`` is False in PyTorch).

    Args:
        a: a ``numpy.ndarray`` (or an :class:`accelrt.Array`: always False).
        device: ``None``: pinned by any backend's pool; else only pinned memory of that
            device's backend counts (``"cuda"``, ``"cpu:0"``, an :class:`accelrt.device`).

    Raises:
        TypeError: ``a`` is neither a numpy array nor an :class:`accelrt.Array`.

    Example::

        >>> import numpy as np
        >>> import accelrt as acc
        >>> p = acc.pin_memory(np.ones((2, 3)), device="cpu")
        >>> acc.is_pinned(p.T), acc.is_pinned(p.copy())
        (True, False)
    """
    from ._array import Array
    if isinstance(a, Array):
        return False
    if not isinstance(a, np.ndarray):
        raise TypeError(f"is_pinned() takes a numpy.ndarray (a host array) or an "
                        f"accelrt.Array, got {type_shown(a)}")
    if not a.size:
        return False
    if device is not None:
        return pinned_pool_of(_get_device(device)[0], a) is not None
    lo, n = _span(a)
    return any(pool.contains(lo, n) for pool in host_allocators())


def _pinning_pool(b: Backend) -> HostCachingAllocator:
    caps = b.capabilities(0)          # host memory belongs to no device: device 0 answers
    if not (caps.pinned_host_memory and caps.page_locked_host_memory):
        raise AcceleratorError(
            f"pinned memory requires an accelerator backend with a pinned memory allocator, "
            f"and the {b.name} backend has none (its host memory is ordinary pageable "
            "memory); no pinned memory allocator is available for it: leave out "
            "pin_memory/pin_memory=True (non-blocking copies from ordinary numpy arrays "
            "still work), or pin for a backend that can (device='cuda' or 'cpu')")
    return get_host_allocator(b)


def new_pinned(b: Backend, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised numpy array of ``shape`` and ``dtype`` in a block of ``b``'s pinned
    host pool (an empty array has no memory to pin: it is an ordinary one).

    Raises:
        AcceleratorError: ``b`` cannot pin host memory.
        OutOfMemoryError: the pool cannot pin that much, even after emptying its cache.
    """
    pool = _pinning_pool(b)
    nbytes = storage_nbytes(shape, dtype.itemsize)
    if not nbytes:
        return np.empty(shape, dtype)
    buf = _PinnedBuffer(pool, pool.malloc(nbytes), nbytes)
    return np.asarray(buf).view(dtype).reshape(shape)


def pin_memory(a: np.ndarray[tuple[int, ...], np.dtype[_ScalarT]], device: DeviceLike = None
               ) -> np.ndarray[tuple[int, ...], np.dtype[_ScalarT]]:
    """A copy of the host array ``a`` in pinned memory, or ``a`` itself if it already is
    pinned (``Tensor.pin_memory()``).

    The result is a C-contiguous numpy array with ``a``'s shape, dtype and contents, in a
    block of the pinned host pool of ``device``'s backend (``None``: the current
    accelerator). The block returns to the pool when the last view of the result dies, and
    is reused only once the copies queued from it have run. Non-blocking copies from it into
    an :class:`accelrt.Array` are asynchronous and read it when they run.

    Args:
        a: a ``numpy.ndarray``.
        device: the backend whose pool pins the memory: ``None`` (the current accelerator),
            a backend name or a device of it.

    Raises:
        TypeError: ``a`` is not a numpy array (an :class:`accelrt.Array` cannot be pinned:
            it is device memory), or holds Python objects.
        AcceleratorError: the backend cannot pin host memory (OpenCL).
        OutOfMemoryError: the pool cannot pin that much memory.

    Example::

        >>> import numpy as np
        >>> import accelrt as acc
        >>> x = np.arange(6, dtype=np.int32).reshape(2, 3)
        >>> p = acc.pin_memory(x, device="cpu")
        >>> p.tolist() == x.tolist(), acc.pin_memory(p, device="cpu") is p
        (True, True)
    """
    a = _check_host_array(a, "pin_memory")
    if a.dtype.hasobject:
        raise TypeError(f"cannot pin an array of dtype {a.dtype}: it holds Python objects; "
                        "pin numeric data")
    b = _get_device(device)[0]
    if pinned_pool_of(b, a) is not None:
        return a
    out = new_pinned(b, a.shape, a.dtype)
    np.copyto(out, a, casting="no")
    return out


def pin_flag(pin_memory: object) -> bool:
    """A factory's ``pin_memory`` argument as a bool: ``None`` is ``False``, as PyTorch's
    ``Optional[bool]`` (the factories, :func:`accelrt.random.rand` and ``randn``).

    Raises:
        TypeError: neither a bool nor None (PyTorch refuses ints and numpy bools too).

    Example::

        >>> from accelrt._pinned import pin_flag
        >>> pin_flag(None), pin_flag(True)
        (False, True)
    """
    if pin_memory is None or pin_memory is False:
        return False
    if pin_memory is True:
        return True
    raise TypeError(f"pin_memory must be a bool or None, got {type_shown(pin_memory)}")


def factory_backend(device: DeviceLike, fname: str) -> tuple[Backend, int]:
    """The backend (and its current device index) whose pool pins the result of a factory
    called with ``pin_memory=True``; such a result is a host array, so the factory must not
    be placing it on a device.

    Raises:
        AcceleratorValueError: ``device=``, a ``with acc.device(...)`` block or
            :func:`accelrt.set_default_device` places the array on a device (PyTorch's
            "Only dense CPU tensors can be pinned").
    """
    dev = _factory_device(device)
    if dev is not None:
        where = "device=" if device is not None else (
            "the default device (a `with acc.device(...)` block or acc.set_default_device)")
        raise AcceleratorValueError(
            f"Only dense CPU tensors can be pinned: {fname}(..., pin_memory=True) makes a "
            f"pinned host (numpy) array, but {where} places it on the accelerator device "
            f"{dev!s}; leave the device out for a pinned host array (it is pinned for the "
            f"current accelerator), or drop pin_memory=True for an accelrt.Array on {dev!s}")
    return _get_device(None)
