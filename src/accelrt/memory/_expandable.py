"""Expandable segments: one virtual reservation per (stream, pool) backed page by page.

The reservation is sized from the device's total memory (1.125 x total, in pages) and holds
no memory until pages are mapped. Pages are ``2 MiB`` (small pool) or ``large_segment_size``
(large pool), rounded up to the backend's ``vm_granularity``. Each page is mapped with its own
``vm_map`` call so that any page can later be unmapped on its own.

Guarded by the owning allocator's lock.

Example::

    >>> from accelrt.memory._expandable import page_count
    >>> page_count(total=16 * 2**30, page=20 * 2**20)
    922
"""

from __future__ import annotations

from typing import Any

__all__ = ["ExpandableSegment", "page_count"]


def page_count(total: int, page: int) -> int:
    """Pages in a reservation for a device of ``total`` bytes: ceil(1.125 * total / page)."""
    size = total + total // 8
    return max(1, -(-size // page))


class ExpandableSegment:
    """A virtual address reservation mapped lazily page by page.

    Attributes:
        base: first address; ``size``: reservation bytes; ``page``: bytes per page.
        stream, pool: the owner (blocks of this reservation belong to that stream and pool).
        mapped: one flag per page.
        frames: stack of the first mapping (history recording), or ``None``.
    """

    __slots__ = (
        "backend",
        "base",
        "frames",
        "index",
        "mapped",
        "page",
        "pool",
        "size",
        "stream",
    )

    def __init__(self, backend: Any, index: int, stream: int, pool: Any, page: int,
                 total: int) -> None:
        n = page_count(total, page)
        self.backend = backend
        self.index = index
        self.page: int = page
        self.size = n * page
        self.base: int = int(backend.vm_reserve(index, self.size))
        self.stream = stream
        self.pool = pool
        self.mapped = bytearray(n)
        self.frames: list[dict[str, Any]] | None = None

    def map(self, ptr: int, size: int) -> int:
        """Map the pages covering ``[ptr, ptr+size)`` (all unmapped); return bytes mapped from
        ``ptr`` (a multiple of the page), or 0 when the device is out of memory (nothing
        stays mapped then)."""
        page = self.page
        begin = (ptr - self.base) // page
        end = -(-(ptr + size - self.base) // page)
        done: list[int] = []
        for p in range(begin, end):
            if not self.backend.vm_map(self.index, self.base + p * page, page):
                for q in done:
                    self.backend.vm_unmap(self.index, self.base + q * page, page)
                    self.mapped[q] = 0
                return 0
            self.mapped[p] = 1
            done.append(p)
        return (end - begin) * page

    def unmap(self, ptr: int, size: int) -> tuple[int, int]:
        """Unmap the whole pages inside ``[ptr, ptr+size)``; return the unmapped range
        ``(start, nbytes)`` (``nbytes`` 0 when no whole page fits)."""
        page = self.page
        begin = -(-(ptr - self.base) // page)
        end = (ptr + size - self.base) // page
        if begin >= end:
            return ptr, 0
        for p in range(begin, end):
            self.backend.vm_unmap(self.index, self.base + p * page, page)
            self.mapped[p] = 0
        return self.base + begin * page, (end - begin) * page

    def release(self) -> None:
        """Give the (fully unmapped) address range back to the backend."""
        self.backend.vm_release(self.index, self.base, self.size)
