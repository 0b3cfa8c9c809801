"""The memory owner of an :class:`accelrt.Array`: one block of memory, returned to the
caching allocator when the last user (the array, a ``numpy()`` view, a DLPack export, queued
work holding borrowed memory) is gone.

Example::

    >>> import accelrt as acc
    >>> a = acc.empty(4, device="cpu:0")
    >>> from accelrt._memory_owner import _Memory
    >>> isinstance(a._mem, _Memory), a._mem.nbytes, a._mem.alloc is not None
    (True, 16, True)
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from ._errors import ClosedError

__all__ = ["_CLOSED", "_SOLE_REFS", "PyMemory", "_ClosedMemory", "_HostView", "_Memory"]

_is_finalizing = sys.is_finalizing
_getrefcount = sys.getrefcount


def _sole_refs() -> int:
    """What ``sys.getrefcount(local)`` returns for an object only a local variable holds (2
    up to Python 3.13; newer interpreters may borrow the argument's reference): measured, not
    assumed, so ``Array.close`` never mistakes shared memory for its own."""
    mine = object()
    return _getrefcount(mine)


_SOLE_REFS = _sole_refs()


# ---------------------------------------------------------------------- memory owner

class _Memory:
    """Owns one block of memory of an array and returns it to the allocator when collected.

    ``alloc`` is the caching allocator the block came from, or ``None`` for memory borrowed
    from another object (``base``, kept alive here). ``host`` is True when the memory is plain
    host memory rather than memory of the device's backend (a zero-copy import from numpy).
    """

    __slots__ = ("__weakref__", "alloc", "base", "host", "nbytes", "ptr")

    def __init__(self, ptr: int, nbytes: int, alloc: Any, base: Any = None,
                 host: bool = False) -> None:
        self.ptr = ptr
        self.nbytes = nbytes
        self.alloc = alloc
        self.base = base
        self.host = host

    def __del__(self) -> None:
        try:
            alloc = self.alloc
        except AttributeError:   # __init__ never ran (or raised): nothing is owned
            return
        if alloc is None or not self.ptr:
            return
        self.alloc = None
        # At interpreter shutdown the allocator and backend may already be torn down; the
        # process is releasing everything anyway.
        if _is_finalizing is None or _is_finalizing():
            return
        # Never blocks: the garbage collector may run this inside the allocator's own
        # critical section on this thread (its lock is not reentrant).
        alloc.free(self.ptr, True)   # free_from_finalizer, one call less

    def __reduce_ex__(self, protocol: Any) -> Any:
        # copy.copy made a second owner of the block, which freed it a second time (possibly
        # inside another array's reuse of it): refused, as by the C type
        raise TypeError(f"cannot copy or pickle {type(self).__name__!r} object: a memory owner "
                        f"frees its block when it is collected, and a copy would free it "
                        f"twice; copy or pickle the accelrt.Array instead (copy.deepcopy, "
                        f"pickle)")

    def __reduce__(self) -> Any:
        return self.__reduce_ex__(0)


#: The Python implementation (the pure build's ``_Memory``).
PyMemory = _Memory

try:   # the compiled build's C type (``_memory_owner_c.c``), where it is built
    from ._memory_owner_c import _Memory  # noqa: F811
except ImportError:
    pass


class _ClosedMemory:
    """The memory owner of a closed array (:meth:`Array.close`): every use of the memory
    (``ptr``, ``nbytes``, ...) raises :class:`ClosedError`, so operations on a closed array
    fail before anything is enqueued, at no cost to open arrays."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        raise ClosedError("this accelrt.Array was closed (close()); its memory is no longer "
                          "its own: use an array that is still open")


_CLOSED: Any = _ClosedMemory()   # typed Any: it stands in for a _Memory


class _HostView:
    """Exposes an array's host-accessible memory to numpy and keeps its owner alive."""

    __slots__ = ("__array_interface__", "_mem")

    def __init__(self, mem: _Memory, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self._mem = mem
        self.__array_interface__ = {
            "version": 3, "shape": shape, "typestr": dtype.str, "descr": dtype.descr,
            "data": (mem.ptr, False), "strides": None,
        }
