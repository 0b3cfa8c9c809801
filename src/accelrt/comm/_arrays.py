"""Array helpers for :mod:`accelrt.comm`: recognising inputs, describing where their memory
lives, making outputs, and copying rectangular regions along one dimension.

Example::

    >>> import accelrt as acc
    >>> from accelrt.comm import _arrays
    >>> a = acc.zeros((2, 3), device="cpu:0")
    >>> info = _arrays.describe(a, "input", 0)
    >>> info.shape, str(info.place)
    ((2, 3), 'cpu:0')
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from .._array import Array
from .._device import _device_obj
from .._stream import Stream
from .._transfer import HOST, Place, execute, plan_runs
from .._errors import type_shown

__all__ = ["Info", "copy_region", "describe", "is_array", "new_array", "shape_str"]


def is_array(obj: object) -> bool:
    """True for an :class:`accelrt.Array`."""
    return isinstance(obj, Array)


class Info(NamedTuple):
    """What comm needs to know about one array."""

    obj: Any                 # the accelrt.Array or numpy.ndarray itself
    place: Place             # the array's device (HOST for numpy arrays)
    mem: Place               # where its bytes live (HOST for borrowed host memory)
    ptr: int
    shape: tuple[int, ...]
    dtype: np.dtype[Any]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def shape_str(shape: tuple[int, ...]) -> str:
    """``(2, 3)`` -> ``"(2, 3)"`` (tuples print the same everywhere)."""
    return str(tuple(shape))


def describe(obj: Any, what: str, i: int | None = None, *, host_ok: bool = False) -> Info:
    """Check that ``obj`` is an accelrt array (or, with ``host_ok``, a numpy array) and
    describe it.

    Raises:
        TypeError: anything else, naming ``what`` and its position ``i``.
    """
    if is_array(obj):
        place = Place.of(obj)
        mem = place
        m = getattr(obj, "_mem", None)
        if m is not None and getattr(m, "host", False):
            obj._sync_current()   # borrowed host memory: finish the stream's work on it
            mem = HOST
        return Info(obj, place, mem, obj.data_ptr(), tuple(obj.shape), np.dtype(obj.dtype))
    if host_ok and isinstance(obj, np.ndarray):
        host = obj if obj.flags.c_contiguous else np.ascontiguousarray(obj)
        return Info(host, HOST, HOST, host.ctypes.data if host.size else 0, host.shape,
                    host.dtype)
    where = "" if i is None else f" at index {i}"
    kinds = "an accelrt.Array or a numpy.ndarray" if host_ok else "an accelrt.Array"
    raise TypeError(f"Expected {what}{where} to be {kinds}, but got {type_shown(obj)}")


def new_array(place: Place, shape: tuple[int, ...], dtype: np.dtype[Any],
              stream: Stream | None = None) -> Any:
    """A new uninitialised array on ``place`` (a numpy array for :data:`HOST`); allocated on
    ``stream`` when it belongs to that device, else on the device's current stream."""
    if place.backend is None:
        return np.empty(shape, dtype)
    dev = _device_obj(place.backend.name, place.index)
    if stream is not None and stream._b is place.backend and stream._index == place.index:
        with stream:
            return Array(shape, dtype=dtype, device=dev)
    return Array(shape, dtype=dtype, device=dev)


def copy_region(dst: Info, dst_start: int, src: Info, src_start: int, length: int,
                dim: int, *, stream: Stream | None = None) -> None:
    """Copy ``src[..., src_start:src_start+length, ...]`` (slice along ``dim``) into the same
    slice at ``dst_start`` of ``dst``; both are C-contiguous and agree on every other
    dimension."""
    inner = math.prod(src.shape[dim + 1:]) * src.dtype.itemsize
    outer = math.prod(src.shape[:dim])
    run = length * inner
    if run == 0 or outer == 0:
        return
    execute(plan_runs(dst.mem, dst.ptr + dst_start * inner, src.mem, src.ptr + src_start * inner,
                      run, outer, dst.shape[dim] * inner, src.shape[dim] * inner, stream=stream))


def whole(dst: Info, src: Info, *, stream: Stream | None = None) -> None:
    """Copy all of ``src`` into ``dst`` (same number of bytes)."""
    execute(plan_runs(dst.mem, dst.ptr, src.mem, src.ptr, src.nbytes, stream=stream))


def info_of_new(obj: Any) -> Info:
    """:func:`describe` for an array this package just made."""
    return describe(obj, "output", host_ok=True)


def device_str(place: Place) -> str:
    """``"cpu:1"``, or ``"host"``."""
    return str(place)


def device_of(place: Place) -> Any:
    """The :class:`accelrt.device` of a device place."""
    assert place.backend is not None
    return _device_obj(place.backend.name, place.index)
