"""Where an operation's arrays live, and the memory an engine call gets: a collective's
arrays are numpy arrays (host memory) or :class:`accelrt.Array` s of one device.

Example::

    >>> import numpy as np
    >>> from accelrt.distributed._locations import _buf, _locate
    >>> a = np.zeros(4, "float32")
    >>> _locate([a], "all_reduce").host, _buf(a).count
    (True, 4)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._array import Array
from .._errors import AcceleratorValueError, type_shown
from ._engine import Buf

__all__ = ["_Loc", "_buf", "_locate", "_span"]


class _Loc:
    __slots__ = ("b", "host", "index", "type")

    def __init__(self, b: Any, index: int, host: bool) -> None:
        self.b, self.index, self.host = b, index, host
        self.type = "cpu" if b is None else b.name


def _locate(arrays: Sequence[Any], what: str) -> _Loc:
    first = arrays[0]
    if isinstance(first, np.ndarray):
        for a in arrays:
            if not isinstance(a, np.ndarray):
                raise TypeError(f"{what}: mix of numpy arrays and {type_shown(a)}; pass "
                                "arrays of one device")
            if not a.flags.c_contiguous:
                raise AcceleratorValueError(f"{what}: Tensors must be contiguous")
        return _Loc(None, -1, True)
    if not isinstance(first, Array):
        raise TypeError(f"{what}: expected an accelrt.Array or numpy.ndarray, got "
                        f"{type_shown(first)}")
    b, index = first._b, first._index
    for a in arrays:
        if not isinstance(a, Array):
            raise TypeError(f"{what}: expected accelrt.Array, got {type_shown(a)}")
        if a._b is not b or a._index != index:
            raise AcceleratorValueError(
                f"{what}: all arrays must be on one device, got {first.device} and "
                f"{a.device}")
    return _Loc(b, index, False)


def _span(a: Any) -> tuple[int, int]:
    """(address, bytes) of an array's memory."""
    if isinstance(a, np.ndarray):
        return (a.ctypes.data if a.size else 0), a.nbytes
    return a._mem.ptr, a.nbytes


def _buf(a: Any) -> Buf:
    if isinstance(a, np.ndarray):
        return Buf(a.ctypes.data if a.size else 0, a.size, a.dtype)
    return Buf(a._mem.ptr, a.size, a._dtype, a._index)
