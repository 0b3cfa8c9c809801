"""Device memory of the opencl backend as integer "pointers", in two representations.

The caching allocator splits segments into blocks and hands out ``base + offset`` addresses,
so every raw operation must accept any address inside an allocation.

* :class:`SvmMemory` (devices with coarse-grained buffer SVM, OpenCL >= 2.0): allocations are
  ``clSVMAlloc`` memory, addresses are real virtual addresses, and copies/fills go through
  ``clEnqueueSVMMemcpy``/``clEnqueueSVMMemFill`` on the exact sub-range.
* :class:`BufferMemory` (every device): allocations are ``cl_mem`` buffers placed at made-up,
  non-overlapping addresses in a per-device range; an address resolves to ``(buffer, offset)``
  and copies/fills use ``clEnqueueCopyBuffer``/``ReadBuffer``/``WriteBuffer``/``FillBuffer``
  at that offset.

Neither is host-accessible (coarse-grained SVM needs map/unmap before the host touches it).
Both are thread-safe.

Example::

    >>> from accelrt.backends.opencl._memory import host_view
    >>> import numpy as np
    >>> a = np.arange(4, dtype=np.uint8)
    >>> host_view(a.ctypes.data, 4).tolist()
    [0, 1, 2, 3]
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from ..._fork import reinit_after_fork
from .._ranges import Ranges

__all__ = ["ALIGNMENT", "BufferMemory", "SvmMemory", "host_view", "svm_view"]

#: Alignment of every address :meth:`SvmMemory.alloc` / :meth:`BufferMemory.alloc` return.
ALIGNMENT = 256
#: The message of a free of an address that does not start a live allocation.
_NOT_LIVE = ("free: pointer {ptr:#x} was not returned by malloc on {where} or was already "
             "freed")
_FAKE_SPAN = 1 << 46        # made-up address range per device (64 TiB)
_PAGE = 4096


def host_view(ptr: int, nbytes: int) -> np.ndarray:
    """A uint8 numpy view of ``nbytes`` at host address ``ptr`` (nothing is read)."""
    buf: Any = (ctypes.c_char * nbytes).from_address(ptr)
    return np.frombuffer(buf, dtype=np.uint8)


def svm_view(cl: Any, ptr: int, nbytes: int) -> Any:
    """``cl.SVM`` over the address range ``[ptr, ptr+nbytes)`` (SVM or host memory)."""
    return cl.SVM(host_view(ptr, nbytes))


def _is_oom(cl: Any, exc: Exception) -> bool:
    codes = {cl.status_code.MEM_OBJECT_ALLOCATION_FAILURE, cl.status_code.OUT_OF_RESOURCES,
             cl.status_code.OUT_OF_HOST_MEMORY, cl.status_code.INVALID_BUFFER_SIZE}
    return isinstance(exc, cl.MemoryError) or getattr(exc, "code", None) in codes


class _Allocations:
    """What both representations share: the allocations of one device by address, each
    held by a pyopencl object with a ``release()`` method.

    Args:
        cl: the pyopencl module.
        ctx: the device's context.
        index: device index (names the device in messages).
    """

    svm = False

    def __init__(self, cl: Any, ctx: Any, index: int) -> None:
        self.cl = cl
        self.ctx = ctx
        self.where = f"opencl:{index}"
        self.table: Ranges[Any] = Ranges()

    def require(self, ptr: int) -> None:
        """Check that a live allocation of this device starts at ``ptr``.

        Raises:
            ValueError: none does.
        """
        if self.table.size_of(ptr) is None:
            raise ValueError(_NOT_LIVE.format(ptr=ptr, where=self.where))

    def free(self, ptr: int) -> int:
        """Release the allocation at ``ptr``; return its size. A buffer stays alive for its
        queued work (OpenCL keeps it); for SVM the caller has finished the device's queues."""
        size, obj = self.table.take(ptr, _NOT_LIVE, where=self.where)
        obj.release()
        return size

    def find(self, ptr: int, nbytes: int, what: str) -> tuple[Any, int]:
        """The object owning ``[ptr, ptr+nbytes)`` and the offset of ``ptr`` in it.

        Raises:
            ValueError: the range is not inside one allocation of this device.
        """
        return self.table.locate(ptr, nbytes, what, self.where)

    def check_range(self, ptr: int, nbytes: int, what: str) -> None:
        """ValueError unless ``[ptr, ptr+nbytes)`` lies inside one allocation."""
        self.find(ptr, nbytes, what)


class BufferMemory(_Allocations):
    """``cl_mem`` buffers at made-up addresses (any OpenCL device); the index also chooses
    the address range."""

    def __init__(self, cl: Any, ctx: Any, index: int) -> None:
        super().__init__(cl, ctx, index)
        self._start = (index + 1) * _FAKE_SPAN
        self._lock = reinit_after_fork(threading.Lock())
        self._next = self._start                      # guarded by _lock

    def _place(self, size: int) -> int:
        """Pick an unused, aligned address range of ``size`` bytes (with a guard page)."""
        need = -(-size // _PAGE) * _PAGE + _PAGE
        with self._lock:
            if not len(self.table):
                self._next = self._start
            if self._next + need <= self._start + _FAKE_SPAN:
                addr = self._next
                self._next += need
                return addr
            prev_end = self._start                    # first fit between live allocations
            for base, bsize in self.table.spans():
                if base - prev_end >= need:
                    return prev_end
                prev_end = base + -(-bsize // _PAGE) * _PAGE + _PAGE
            raise MemoryError("no address range left")

    def alloc(self, size: int) -> int:
        """A new buffer of ``size`` bytes; 0 when the device is out of memory."""
        cl = self.cl
        try:
            buf = cl.Buffer(self.ctx, cl.mem_flags.READ_WRITE, size)
        except cl.Error as exc:
            if _is_oom(cl, exc):
                return 0
            raise
        try:
            addr = self._place(size)
        except MemoryError:
            buf.release()
            return 0
        self.table.add(addr, size, buf)
        return addr

    def h2d(self, q: Any, dst: int, src: int, n: int) -> Any:
        buf, off = self.find(dst, n, "memcpy h2d dst")
        return self.cl.enqueue_copy(q, buf, host_view(src, n), dst_offset=off,
                                    is_blocking=False)

    def d2h(self, q: Any, dst: int, src: int, n: int) -> Any:
        buf, off = self.find(src, n, "memcpy d2h src")
        return self.cl.enqueue_copy(q, host_view(dst, n), buf, src_offset=off,
                                    is_blocking=False)

    def d2d(self, q: Any, dst: int, src: int, n: int) -> Any:
        dbuf, doff = self.find(dst, n, "memcpy d2d dst")
        sbuf, soff = self.find(src, n, "memcpy d2d src")
        return self.cl.enqueue_copy(q, dbuf, sbuf, byte_count=n, src_offset=soff,
                                    dst_offset=doff)

    def fill(self, q: Any, ptr: int, pattern: np.ndarray, nbytes: int) -> Any:
        buf, off = self.find(ptr, nbytes, "fill")
        return self.cl.enqueue_fill_buffer(q, buf, pattern, off, nbytes)


class SvmMemory(_Allocations):
    """Coarse-grained SVM allocations at real addresses (OpenCL >= 2.0 devices)."""

    svm = True

    def alloc(self, size: int) -> int:
        """A new SVM allocation of ``size`` bytes; 0 when the device is out of memory."""
        cl = self.cl
        try:
            # alignment 0: the device's default; the base is aligned here instead, as some
            # drivers reject explicit alignments
            mem = cl.SVMAllocation(self.ctx, size + ALIGNMENT, 0, cl.svm_mem_flags.READ_WRITE)
        except cl.Error as exc:
            if _is_oom(cl, exc):
                return 0
            raise
        addr = -(-int(mem.svm_ptr) // ALIGNMENT) * ALIGNMENT
        self.table.add(addr, size, mem)
        return addr

    def _view(self, ptr: int, n: int, what: str) -> Any:
        self.find(ptr, n, what)
        return svm_view(self.cl, ptr, n)

    def h2d(self, q: Any, dst: int, src: int, n: int) -> Any:
        d = self._view(dst, n, "memcpy h2d dst")
        return self.cl.enqueue_copy(q, d, svm_view(self.cl, src, n), is_blocking=False)

    def d2h(self, q: Any, dst: int, src: int, n: int) -> Any:
        s = self._view(src, n, "memcpy d2h src")
        return self.cl.enqueue_copy(q, svm_view(self.cl, dst, n), s, is_blocking=False)

    def d2d(self, q: Any, dst: int, src: int, n: int) -> Any:
        d = self._view(dst, n, "memcpy d2d dst")
        s = self._view(src, n, "memcpy d2d src")
        return self.cl.enqueue_copy(q, d, s, is_blocking=False)

    def fill(self, q: Any, ptr: int, pattern: np.ndarray, nbytes: int) -> Any:
        d = self._view(ptr, nbytes, "fill")
        return self.cl.enqueue_svm_memfill(q, d, pattern, nbytes)
