"""Live allocations by address, the one table the backends check pointers against.

A bad device pointer would fault a whole CUDA context, and an OpenCL buffer is reached only
through the object that owns it, so a backend records every allocation it hands out as a range
``[base, base+size)`` with its owning object, and answers "which allocation holds this
address?" before any copy, fill or free reaches the driver. The cuda backend keeps one table
per kind of memory (``cuMemAlloc``'d, reserved, mapped, IPC-opened, pool, pinned host), the
opencl backend one per device (the object is the ``cl_mem`` buffer or the SVM allocation), the
cpu backend's stream-ordered pool one for its live blocks.

Example::

    >>> from accelrt.backends._ranges import Ranges
    >>> r: Ranges[str] = Ranges()
    >>> r.add(4096, 256, "buffer")
    >>> r.find(4100), r.find(8192), r.locate(4100, 16, "fill", "opencl:0")
    ((4096, 256), None, ('buffer', 4))
"""

from __future__ import annotations

import bisect
import threading
from typing import Generic, TypeVar

from .._fork import reinit_after_fork

__all__ = ["Ranges"]

T = TypeVar("T")


class Ranges(Generic[T]):
    """Known allocations ``[base, base+size)``, each with the object that owns it (``None``
    where the backend needs none); thread-safe. Ranges never overlap (each comes from one
    allocation).

    Example::

        >>> from accelrt.backends._ranges import Ranges
        >>> r: Ranges[None] = Ranges()
        >>> r.add(100, 50, None)
        >>> r.find(120), r.find(150), r.contains(110, 40), r.contains(110, 41)
        ((100, 50), None, True, False)
        >>> r.overlaps(140, 100), r.overlaps(150, 10), r.overlaps(0, 101)
        (True, False, True)
        >>> r.take(100, "free: {ptr:#x} is not live on {where}", where="cpu:0")
        (50, None)
        >>> r.take(100, "free: {ptr:#x} is not live on {where}", where="cpu:0")
        Traceback (most recent call last):
        ValueError: free: 0x64 is not live on cpu:0
    """

    __slots__ = ("_bases", "_lock", "_spans")

    def __init__(self) -> None:
        self._bases: list[int] = []                    # sorted; guarded by _lock
        self._spans: dict[int, tuple[int, T]] = {}     # base -> (size, obj); guarded by _lock
        self._lock = reinit_after_fork(threading.Lock())

    def add(self, base: int, size: int, obj: T) -> None:
        """Record the allocation ``[base, base+size)`` owned by ``obj``."""
        with self._lock:
            bisect.insort(self._bases, base)
            self._spans[base] = (size, obj)

    def pop(self, base: int) -> tuple[int, T] | None:
        """Forget the allocation starting at ``base``: its ``(size, obj)``, or None if there
        is none."""
        with self._lock:
            got = self._spans.pop(base, None)
            if got is not None:
                del self._bases[bisect.bisect_left(self._bases, base)]
            return got

    def take(self, base: int, error: str, **fields: object) -> tuple[int, T]:
        """:meth:`pop` of an allocation that must be there (a free).

        Raises:
            ValueError: none starts at ``base``; the message is ``error`` formatted with
                ``ptr=base`` and ``fields``.
        """
        got = self.pop(base)
        if got is None:
            raise ValueError(error.format(ptr=base, **fields))
        return got

    def size_of(self, base: int) -> int | None:
        """The size of the allocation starting at ``base`` (None: none starts there)."""
        got = self._spans.get(base)
        return None if got is None else got[0]

    def _hit(self, ptr: int) -> tuple[int, int, T] | None:
        """``(base, size, obj)`` of the allocation containing ``ptr``, or None."""
        with self._lock:
            i = bisect.bisect_right(self._bases, ptr) - 1
            if i < 0:
                return None
            base = self._bases[i]
            size, obj = self._spans[base]
        return (base, size, obj) if ptr < base + size else None

    def find(self, ptr: int) -> tuple[int, int] | None:
        """``(base, size)`` of the allocation containing ``ptr``, or None."""
        hit = self._hit(ptr)
        return None if hit is None else (hit[0], hit[1])

    def contains(self, ptr: int, nbytes: int) -> bool:
        """True if ``[ptr, ptr+nbytes)`` lies inside one allocation (``ptr`` itself at
        least)."""
        hit = self._hit(ptr)
        return hit is not None and ptr + nbytes <= hit[0] + hit[1]

    def locate(self, ptr: int, nbytes: int, what: str, where: str) -> tuple[T, int]:
        """``(obj, offset)`` of the allocation holding ``[ptr, ptr+nbytes)``.

        Raises:
            ValueError: the range is not inside one allocation; ``what`` names the operation
                and ``where`` the device in the message.
        """
        hit = self._hit(ptr)
        if hit is None or ptr + nbytes > hit[0] + hit[1]:
            raise ValueError(f"{what}: [{ptr:#x}, {ptr + nbytes:#x}) is not inside memory "
                             f"allocated on {where}; pass a pointer from malloc of that "
                             "device and a byte count within its size")
        return hit[2], ptr - hit[0]

    def overlaps(self, ptr: int, nbytes: int) -> bool:
        """True if ``[ptr, ptr+nbytes)`` (at least one byte) meets an allocation."""
        end = ptr + max(nbytes, 1)
        with self._lock:
            i = bisect.bisect_left(self._bases, end) - 1
            if i < 0:
                return False
            base = self._bases[i]
            return base + self._spans[base][0] > ptr

    def spans(self) -> list[tuple[int, int]]:
        """``(base, size)`` of every allocation, sorted by address."""
        with self._lock:
            return [(b, self._spans[b][0]) for b in self._bases]

    def __len__(self) -> int:
        return len(self._spans)
