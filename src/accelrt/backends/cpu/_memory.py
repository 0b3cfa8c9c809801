"""Raw memory of the cpu backend: aligned host buffers and Linux virtual-memory reservations.

Device memory of a simulated cpu device is ordinary host memory at a real address, so numpy
views and DLPack work on it. :class:`DeviceMemory` keeps one device's allocations (numpy
buffers) and address-space reservations (``mmap(PROT_NONE)`` pages made read/write on
:meth:`DeviceMemory.vm_map`), charges both against the device's budget, and checks that
pointers handed to copies lie inside memory of that device.

Example::

    >>> from accelrt.backends.cpu._memory import DeviceMemory
    >>> mem = DeviceMemory(index=0, budget=1 << 20)
    >>> ptr = mem.malloc(4096)
    >>> ptr % 256 == 0, mem.used
    (True, 4096)
    >>> mem.free(ptr); mem.used
    0
"""

from __future__ import annotations

import bisect
import ctypes
import ctypes.util
import errno
import os
import struct
import sys
import threading
from typing import Any

import numpy as np

from ..._fork import reinit_after_fork
from ..._errors import type_shown

__all__ = ["ALIGNMENT", "VM_GRANULARITY", "DeviceMemory", "HostMemory", "SharedSegment",
           "host_view", "open_shared", "vm_available"]

#: Alignment of every pointer :meth:`DeviceMemory.malloc` returns (as cudaMalloc's 256 bytes).
ALIGNMENT = 256
#: Mapping granularity of the virtual-memory operations (2 MiB, as CUDA's).
VM_GRANULARITY = 2 << 20

_PROT_NONE, _PROT_READ, _PROT_WRITE = 0, 1, 2
_MAP_SHARED = 0x01
_MAP_PRIVATE, _MAP_ANONYMOUS, _MAP_NORESERVE = 0x02, 0x20, 0x4000
_MADV_DONTNEED = 4
_MAP_FAILED = ctypes.c_void_p(-1).value


def host_view(ptr: int, nbytes: int) -> np.ndarray:
    """A writable numpy ``uint8`` view of ``nbytes`` bytes at address ``ptr`` (no copy).

    Example::

        >>> import numpy as np
        >>> from accelrt.backends.cpu._memory import host_view
        >>> a = np.arange(4, dtype=np.uint8)
        >>> host_view(a.ctypes.data, 4).tolist()
        [0, 1, 2, 3]
    """
    buf: Any = (ctypes.c_char * nbytes).from_address(ptr)
    return np.frombuffer(buf, dtype=np.uint8)


def _aligned_buffer(size: int) -> tuple[int, np.ndarray] | None:
    """Allocate ``size`` bytes aligned to :data:`ALIGNMENT`; ``None`` when out of memory."""
    try:
        raw = np.empty(size + ALIGNMENT, dtype=np.uint8)
    except (MemoryError, ValueError):
        return None
    base = raw.ctypes.data
    ptr = (base + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    return ptr, raw


# ---------------------------------------------------------------------- libc virtual memory

_libc: Any = None
_libc_lock = reinit_after_fork(threading.Lock())


def _get_libc() -> Any:
    global _libc
    with _libc_lock:
        if _libc is None:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                  ctypes.c_int, ctypes.c_long]
            libc.munmap.restype = ctypes.c_int
            libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            libc.mprotect.restype = ctypes.c_int
            libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            libc.madvise.restype = ctypes.c_int
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _libc = libc
        return _libc


def vm_available() -> bool:
    """True on Linux, where address space can be reserved with ``mmap(PROT_NONE)``.

    Example::

        >>> import sys
        >>> from accelrt.backends.cpu._memory import vm_available
        >>> vm_available() == sys.platform.startswith("linux")
        True
    """
    return sys.platform.startswith("linux")


def _os_error(call: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, f"{call} failed: {os.strerror(err)}")


# ---------------------------------------------------------------------- shared memory segments

#: Prefix of the memfd names of shared segments (``/proc/<pid>/fd/<fd>`` links to
#: ``/memfd:accelrt-seg-<token> (deleted)``).
_MEMFD_PREFIX = "accelrt-seg-"
_HANDLE_MAGIC = b"ACCPUSHM"
_HANDLE = struct.Struct("<8sIIQ16s")   # magic, pid, fd, size, token


class SharedSegment:
    """A segment of POSIX shared memory: an anonymous ``memfd`` mapped ``MAP_SHARED``.

    No file is created anywhere (``/dev/shm`` stays empty): the memory lives while a process
    holds the descriptor or a mapping, so it goes away with the last process, even one that
    crashes. Another process of this machine maps the same memory by opening
    ``/proc/<pid>/fd/<fd>`` of the owner (:func:`open_shared` with :meth:`handle`); the owner
    keeps the descriptor open for that until :meth:`close`.

    Example::

        >>> from accelrt.backends.cpu._memory import SharedSegment, open_shared, host_view
        >>> seg = SharedSegment.create(4096)
        >>> host_view(seg.base, 4)[:] = [1, 2, 3, 4]
        >>> other = open_shared(seg.handle())          # a second mapping of the same memory
        >>> host_view(other.base, 4).tolist()
        [1, 2, 3, 4]
        >>> other.close(); seg.close()
    """

    __slots__ = ("base", "fd", "size", "token")

    def __init__(self, base: int, size: int, fd: int, token: bytes) -> None:
        self.base = base
        self.size = size
        self.fd = fd          # -1 for a mapping opened from another process's handle
        self.token = token

    @classmethod
    def create(cls, size: int) -> SharedSegment | None:
        """A new zero-filled segment of ``size`` bytes; ``None`` when out of memory."""
        _raise_fd_limit()
        token = os.urandom(16)
        try:
            fd = os.memfd_create(_MEMFD_PREFIX + token.hex(), os.MFD_CLOEXEC)
        except OSError:
            return None
        try:
            os.ftruncate(fd, size)
            base = _map_shared(fd, size)
        except OSError:
            os.close(fd)
            return None
        return cls(base, size, fd, token)

    def handle(self) -> bytes:
        """The bytes another process passes to :func:`open_shared` (owner only)."""
        if self.fd < 0:
            raise ValueError("a segment opened from a handle has no handle of its own; share "
                             "the producer's handle")
        return _HANDLE.pack(_HANDLE_MAGIC, os.getpid(), self.fd, self.size, self.token)

    def close(self) -> None:
        """Unmap the memory and close the descriptor (idempotent)."""
        base, self.base = self.base, 0
        if base:
            _get_libc().munmap(base, self.size)
        fd, self.fd = self.fd, -1
        if fd >= 0:
            os.close(fd)


_fd_limit_raised = False


def _raise_fd_limit() -> None:
    """Each live segment keeps a descriptor open (receivers open it through /proc): lift the
    soft descriptor limit to the hard one once, as programs with many descriptors do."""
    global _fd_limit_raised
    if _fd_limit_raised:
        return
    _fd_limit_raised = True
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError):
        pass


def _map_shared(fd: int, size: int) -> int:
    addr: int | None = _get_libc().mmap(None, size, _PROT_READ | _PROT_WRITE, _MAP_SHARED, fd, 0)
    if addr is None or addr == _MAP_FAILED:
        raise _os_error("mmap")
    return addr


def open_shared(handle: bytes) -> SharedSegment:
    """Map the segment named by another process's :meth:`SharedSegment.handle`.

    Raises:
        TypeError: ``handle`` is not bytes.
        ValueError: the handle is malformed, or names no live accelrt segment (its owner
            exited or freed it, or it was forged); the message says which.

    Example::

        >>> from accelrt.backends.cpu._memory import open_shared
        >>> open_shared(b"junk")
        Traceback (most recent call last):
            ...
        ValueError: not a cpu shared-memory handle: ...
    """
    if not isinstance(handle, (bytes, bytearray)):
        raise TypeError(f"a cpu shared-memory handle is bytes, got {type_shown(handle)}")
    if len(handle) != _HANDLE.size or bytes(handle[:8]) != _HANDLE_MAGIC:
        raise ValueError(f"not a cpu shared-memory handle: {len(handle)} bytes; pass the bytes "
                         "of SharedSegment.handle()")
    _, pid, fd, size, token = _HANDLE.unpack(bytes(handle))
    where = f"/proc/{pid}/fd/{fd}"
    gone = (f"the cpu shared-memory segment {where} (pid {pid}) does not exist any more: its "
            "process exited or freed it, or the handle is forged; keep the producer alive and "
            "its array referenced until consumers have opened it")
    try:
        link = os.readlink(where)
        mine = os.open(where, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        raise ValueError(gone) from None
    try:
        st = os.fstat(mine)
        if (link != f"/memfd:{_MEMFD_PREFIX}{token.hex()} (deleted)" or not size
                or st.st_size != size):
            raise ValueError(gone)
        base = _map_shared(mine, size)
    finally:
        os.close(mine)   # the mapping keeps the memory
    return SharedSegment(base, size, -1, token)


class _Region:
    """One allocation (``buf`` set) or one reservation (``mapped`` = mapped page numbers)."""

    __slots__ = ("base", "buf", "mapped", "size")

    def __init__(self, base: int, size: int, buf: np.ndarray | None) -> None:
        self.base = base
        self.size = size
        self.buf = buf
        self.mapped: set[int] | None = None if buf is not None else set()


#: The ``buf`` of an adopted region (memory allocated elsewhere, see ``DeviceMemory.adopt``).
_ADOPTED = np.empty(0, dtype=np.uint8)
#: The ``buf`` of a shared-memory allocation (``DeviceMemory(shared=True)``) and of a mapping
#: opened from another process's handle (``DeviceMemory.ipc_open``).
_SHARED = np.empty(0, dtype=np.uint8)
_OPENED = np.empty(0, dtype=np.uint8)


class DeviceMemory:
    """Allocations, reservations and the memory budget of one simulated device.

    Thread-safe: every method takes ``self._lock``.

    Args:
        index: the device index (used in messages).
        budget: the device's memory budget in bytes.
        shared: allocate from POSIX shared memory (:class:`SharedSegment`), so that
            :meth:`ipc_handle` can share allocations with other processes.

    Example::

        >>> from accelrt.backends.cpu._memory import DeviceMemory
        >>> mem = DeviceMemory(index=0, budget=1000)
        >>> mem.malloc(2000)   # over budget: 0, no exception
        0
    """

    def __init__(self, index: int, budget: int, shared: bool = False) -> None:
        self.index = index
        self.budget = budget
        if shared and not hasattr(os, "memfd_create"):
            raise ValueError("the cpu backend's shared-memory option (ACCELRT_CPU_SHARED_MEMORY)"
                             " needs Linux (memfd_create); unset it on this platform")
        self.shared = shared
        self._segments: dict[int, SharedSegment] = {}  # guarded by _lock; shared + opened
        self._lock = reinit_after_fork(threading.Lock())
        self.used = 0                              # guarded by _lock
        self._regions: dict[int, _Region] = {}     # guarded by _lock; base -> region
        self._bases: list[int] = []                # guarded by _lock; sorted region bases

    # ------------------------------------------------------------------ helpers
    def _add(self, region: _Region) -> None:
        self._regions[region.base] = region
        bisect.insort(self._bases, region.base)

    def _remove(self, region: _Region) -> None:
        del self._regions[region.base]
        pos = bisect.bisect_left(self._bases, region.base)
        del self._bases[pos]

    def _find(self, ptr: int) -> _Region | None:
        pos = bisect.bisect_right(self._bases, ptr) - 1
        if pos < 0:
            return None
        region = self._regions[self._bases[pos]]
        return region if ptr < region.base + region.size else None

    # ------------------------------------------------------------------ plain allocations
    def malloc(self, size: int) -> int:
        """Allocate ``size`` bytes; return the address or 0 when over budget/out of memory."""
        with self._lock:
            if self.used + size > self.budget:
                return 0
            if self.shared:
                seg = SharedSegment.create(size)
                if seg is None:
                    return 0
                self._segments[seg.base] = seg
                self._add(_Region(seg.base, size, _SHARED))
                self.used += size
                return seg.base
            got = _aligned_buffer(size)
            if got is None:
                return 0
            ptr, raw = got
            self._add(_Region(ptr, size, raw))
            self.used += size
            return ptr

    def free(self, ptr: int) -> None:
        """Release an allocation made by :meth:`malloc`.

        Raises:
            ValueError: ``ptr`` is not the start of a live allocation of this device.
        """
        with self._lock:
            region = self._regions.get(ptr)
            if (region is None or region.buf is None or region.buf is _ADOPTED
                    or region.buf is _OPENED):
                raise ValueError(
                    f"free: pointer {ptr:#x} was not returned by malloc on cpu:{self.index} "
                    "or was already freed")
            self._remove(region)
            self.used -= region.size
            seg = self._segments.pop(ptr, None) if region.buf is _SHARED else None
        if seg is not None:
            seg.close()

    # ------------------------------------------------------------------ interprocess
    def ipc_handle(self, ptr: int) -> bytes:
        """The handle of the shared allocation starting at ``ptr`` (see :func:`open_shared`).

        Raises:
            ValueError: ``ptr`` does not start an allocation, or the allocation cannot be
                shared (not shared memory, an expandable segment, adopted or opened memory);
                the message names the reason and the fix.

        Example::

            >>> from accelrt.backends.cpu._memory import DeviceMemory
            >>> mem = DeviceMemory(index=0, budget=1 << 20, shared=True)
            >>> p = mem.malloc(4096); len(mem.ipc_handle(p)) > 0
            True
            >>> mem.free(p)
        """
        with self._lock:
            region = self._regions.get(ptr)
            seg = self._segments.get(ptr)
            if region is not None and region.buf is _SHARED and seg is not None:
                return seg.handle()
        where = f"cpu:{self.index}"
        if region is None:
            why = (f"{ptr:#x} does not start an allocation of {where}; pass the base of a "
                   "segment from malloc")
        elif region.mapped is not None:
            why = (f"{ptr:#x} is an expandable segment of {where} (private virtual memory), "
                   "which cannot be shared; remove expandable_segments:True from "
                   "ACCELRT_ALLOC_CONF in the producer")
        elif region.buf is _OPENED:
            why = (f"{ptr:#x} was opened from another process's handle; share the "
                   "producer's handle instead")
        elif region.buf is _ADOPTED:
            why = (f"{ptr:#x} is memory of a pluggable allocator's library, which accelrt "
                   "cannot share; use the caching allocator in the producer")
        else:
            why = (f"{ptr:#x} is private memory of {where}: the cpu backend allocates "
                   "shareable memory only with its shared-memory option; set "
                   "ACCELRT_CPU_SHARED_MEMORY=1 in the producer before it allocates (or "
                   "register CpuBackend(shared_memory=True))")
        raise ValueError(f"cannot share memory between processes: {why}")

    def ipc_open(self, handle: bytes) -> tuple[int, int]:
        """Map another process's allocation as memory of this device (not charged to the
        budget) until :meth:`ipc_close`; return ``(base, size)``.

        Raises:
            TypeError, ValueError: see :func:`open_shared`.
        """
        seg = open_shared(handle)
        with self._lock:
            self._segments[seg.base] = seg
            self._add(_Region(seg.base, seg.size, _OPENED))
        return seg.base, seg.size

    def ipc_close(self, ptr: int) -> None:
        """Unmap memory opened by :meth:`ipc_open` at ``ptr``.

        Raises:
            ValueError: ``ptr`` does not start memory opened by :meth:`ipc_open`.
        """
        with self._lock:
            self._remove_marked(ptr, _OPENED, "ipc_close: {ptr:#x} is not memory opened from an "
                                "IPC handle on cpu:{index}")
            seg = self._segments.pop(ptr)
        seg.close()

    def adopt(self, ptr: int, size: int) -> None:
        """Accept ``[ptr, ptr+size)``, host memory allocated elsewhere (by a pluggable
        allocator's library), as memory of this device until :meth:`disown`: copies and fills
        may use it. It is not charged to the budget.

        Raises:
            ValueError: the range runs past the 64-bit address space, or overlaps memory this
                device already has.

        Example::

            >>> import numpy as np
            >>> from accelrt.backends.cpu._memory import DeviceMemory
            >>> mem, buf = DeviceMemory(index=0, budget=0), np.zeros(64, np.uint8)
            >>> mem.adopt(buf.ctypes.data, 64); mem.check_range(buf.ctypes.data, 64, "copy")
            >>> mem.disown(buf.ctypes.data)
        """
        if ptr + size > 1 << 64:
            raise ValueError(f"adopt: [{ptr:#x}, {ptr + size:#x}) runs past the end of the "
                             "64-bit address space; pass host memory")
        with self._lock:
            pos = bisect.bisect_left(self._bases, ptr + size) - 1
            if pos >= 0:
                last = self._regions[self._bases[pos]]
                if last.base + last.size > ptr:
                    raise ValueError(f"adopt: [{ptr:#x}, {ptr + size:#x}) overlaps memory of "
                                     f"cpu:{self.index} at {last.base:#x}")
            self._add(_Region(ptr, size, _ADOPTED))

    def disown(self, ptr: int) -> None:
        """End :meth:`adopt` of the range starting at ``ptr`` (the memory is not freed).

        Raises:
            ValueError: ``ptr`` does not start adopted memory of this device.
        """
        with self._lock:
            self._remove_marked(ptr, _ADOPTED, "disown: pointer {ptr:#x} is not memory adopted "
                                "by cpu:{index}")

    def _remove_marked(self, ptr: int, mark: object, error: str) -> None:
        """Forget the region at ``ptr`` whose buffer is ``mark`` (opened or adopted memory),
        with the lock held; else ValueError ``error`` (a format of ``ptr`` and ``index``)."""
        region = self._regions.get(ptr)
        if region is None or region.buf is not mark:
            raise ValueError(error.format(ptr=ptr, index=self.index))
        self._remove(region)

    def check_range(self, ptr: int, nbytes: int, what: str) -> None:
        """Check that ``[ptr, ptr+nbytes)`` is memory of this device (allocated or mapped).

        Raises:
            ValueError: it is not; the message names ``what`` and the device.
        """
        if nbytes == 0:
            return
        with self._lock:
            region = self._find(ptr)
            ok = region is not None and ptr + nbytes <= region.base + region.size
            if ok and region is not None and region.mapped is not None:
                first = (ptr - region.base) // VM_GRANULARITY
                last = (ptr + nbytes - 1 - region.base) // VM_GRANULARITY
                ok = all(p in region.mapped for p in range(first, last + 1))
        if not ok:
            raise ValueError(
                f"{what}: [{ptr:#x}, {ptr + nbytes:#x}) is not inside memory allocated or "
                f"mapped on cpu:{self.index}; pass a pointer from malloc/vm_map of that device "
                "and a byte count within its size")

    def live_allocations(self) -> int:
        """Number of live allocations and reservations."""
        with self._lock:
            return len(self._regions)

    # ------------------------------------------------------------------ virtual memory
    def _check_aligned(self, ptr: int, size: int, what: str) -> None:
        if ptr % VM_GRANULARITY or size % VM_GRANULARITY:
            raise ValueError(
                f"{what}: pointer {ptr:#x} and size {size} must be multiples of the "
                f"granularity {VM_GRANULARITY} (vm_granularity())")

    def _reservation(self, ptr: int, size: int, what: str) -> _Region:
        region = self._find(ptr)
        if region is None or region.mapped is None or ptr + size > region.base + region.size:
            raise ValueError(
                f"{what}: [{ptr:#x}, {ptr + size:#x}) is not inside an address range reserved "
                f"with vm_reserve on cpu:{self.index}")
        return region

    def vm_reserve(self, size: int) -> int:
        """Reserve ``size`` bytes of address space (PROT_NONE); return its base address."""
        self._check_aligned(0, size, "vm_reserve")
        libc = _get_libc()
        # over-reserve by one granule so the base can be aligned to the granularity
        span = size + VM_GRANULARITY
        addr: int | None = libc.mmap(None, span, _PROT_NONE,
                                     _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE, -1, 0)
        if addr is None or addr == _MAP_FAILED:
            raise _os_error("mmap")
        base = (addr + VM_GRANULARITY - 1) // VM_GRANULARITY * VM_GRANULARITY
        head, tail = base - addr, addr + span - (base + size)
        if head:
            libc.munmap(addr, head)
        if tail:
            libc.munmap(base + size, tail)
        with self._lock:
            self._add(_Region(base, size, None))
        return base

    def vm_release(self, ptr: int, size: int) -> None:
        """Release a whole reservation; every page of it must be unmapped."""
        with self._lock:
            region = self._regions.get(ptr)
            if region is None or region.mapped is None or region.size != size:
                raise ValueError(
                    f"vm_release: ({ptr:#x}, {size}) is not a reservation of cpu:{self.index}; "
                    "pass the exact base and size returned by/given to vm_reserve")
            if region.mapped:
                raise ValueError(
                    f"vm_release: {len(region.mapped)} page(s) of the reservation at {ptr:#x} "
                    "are still mapped; vm_unmap them first")
            self._remove(region)
        if _get_libc().munmap(ptr, size) != 0:
            raise _os_error("munmap")

    def _pages(self, ptr: int, size: int, what: str) -> tuple[set[int], range]:
        """The mapped pages of the reservation holding ``[ptr, ptr+size)`` and the page
        numbers of that range (with the lock held)."""
        region = self._reservation(ptr, size, what)
        first = (ptr - region.base) // VM_GRANULARITY
        assert region.mapped is not None
        return region.mapped, range(first, first + size // VM_GRANULARITY)

    def vm_map(self, ptr: int, size: int) -> bool:
        """Make ``[ptr, ptr+size)`` read/write; False when it would exceed the budget."""
        self._check_aligned(ptr, size, "vm_map")
        with self._lock:
            mapped, pages = self._pages(ptr, size, "vm_map")
            if any(p in mapped for p in pages):
                raise ValueError(f"vm_map: part of [{ptr:#x}, {ptr + size:#x}) is already "
                                 "mapped; vm_unmap it first")
            if self.used + size > self.budget:
                return False
            if _get_libc().mprotect(ptr, size, _PROT_READ | _PROT_WRITE) != 0:
                if ctypes.get_errno() == errno.ENOMEM:   # no memory for the page tables
                    return False
                # (made in the raise: an error in a local of this frame, which its traceback
                # holds, would keep the frame and this memory's books alive until the gc ran)
                raise _os_error("mprotect")
            mapped.update(pages)
            self.used += size
            return True

    def vm_unmap(self, ptr: int, size: int) -> None:
        """Drop the pages of ``[ptr, ptr+size)`` (all mapped) and give their budget back."""
        self._check_aligned(ptr, size, "vm_unmap")
        with self._lock:
            mapped, pages = self._pages(ptr, size, "vm_unmap")
            if not all(p in mapped for p in pages):
                raise ValueError(f"vm_unmap: part of [{ptr:#x}, {ptr + size:#x}) is not "
                                 "mapped; only unmap ranges made by vm_map")
            libc = _get_libc()
            if libc.madvise(ptr, size, _MADV_DONTNEED) != 0:
                raise _os_error("madvise")
            if libc.mprotect(ptr, size, _PROT_NONE) != 0:
                raise _os_error("mprotect")
            mapped.difference_update(pages)
            self.used -= size


class HostMemory:
    """Aligned host buffers for ``host_malloc``/``host_free`` (not charged to any device).

    Example::

        >>> from accelrt.backends.cpu._memory import HostMemory
        >>> host = HostMemory()
        >>> p = host.malloc(100); host.free(p)
    """

    def __init__(self) -> None:
        self._lock = reinit_after_fork(threading.Lock())
        self._bufs: dict[int, np.ndarray] = {}  # guarded by _lock

    def malloc(self, size: int) -> int:
        """Return an aligned address of ``size`` bytes, or 0 when out of memory."""
        got = _aligned_buffer(size)
        if got is None:
            return 0
        ptr, raw = got
        with self._lock:
            self._bufs[ptr] = raw
        return ptr

    def free(self, ptr: int) -> None:
        """Release a buffer from :meth:`malloc`; ValueError for an unknown pointer."""
        with self._lock:
            if self._bufs.pop(ptr, None) is None:
                raise ValueError(f"host_free: pointer {ptr:#x} was not returned by host_malloc "
                                 "or was already freed")
