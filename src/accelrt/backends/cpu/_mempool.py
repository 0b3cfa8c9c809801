"""The stream-ordered memory pool of a simulated cpu device (CUDA's default mempool).

One :class:`StreamOrderedPool` per device serves the backend's ``mempool_*`` operations, the
raw operations of the allocator option ``backend:cudaMallocAsync``. It models what the CUDA
driver's pool guarantees: memory is reserved from the device (charged to its budget) in
blocks and kept after a free; a block freed in stream order on a stream is reused at once by
a later allocation on that same stream (stream order makes it safe) and by any other stream
only once the free has completed (the stream's work queued before the free is done, CUDA's
"opportunistic" reuse); :meth:`StreamOrderedPool.trim_to` gives completed free blocks back to
the device. The pool keeps the four usage counters CUDA's pool attributes report.

Example::

    >>> from accelrt.backends.cpu._memory import DeviceMemory
    >>> from accelrt.backends.cpu._mempool import StreamOrderedPool
    >>> from accelrt.backends.cpu._streams import CpuStream
    >>> pool, s = StreamOrderedPool(DeviceMemory(0, 1 << 20)), CpuStream(0, 0, 0)
    >>> p = pool.alloc(1000, s)
    >>> pool.attribute("used_mem_current"), pool.attribute("reserved_mem_current")
    (1024, 1024)
    >>> pool.free(p, s, None); pool.alloc(1000, s) == p     # reused in stream order
    True
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from ..._fork import reinit_after_fork
from .._ranges import Ranges

if TYPE_CHECKING:
    from ._memory import DeviceMemory
    from ._streams import CpuStream, Record

__all__ = ["ATTRIBUTES", "StreamOrderedPool", "check_attribute"]

#: Pool blocks are multiples of this many bytes (cudaMalloc's alignment granule is 256; the
#: pool hands out 512-byte multiples, as PyTorch's smallest block).
BLOCK = 512
#: The attribute names of ``mempool_get_attribute`` (CUDA's ``CU_MEMPOOL_ATTR_*``, lower case).
ATTRIBUTES = ("release_threshold", "reserved_mem_current", "reserved_mem_high",
              "used_mem_current", "used_mem_high")


def check_attribute(attr: object) -> str:
    """``attr`` if it names a pool attribute (:data:`ATTRIBUTES`); ``ValueError`` if not."""
    if not isinstance(attr, str) or attr not in ATTRIBUTES:
        raise ValueError(f"unknown memory pool attribute {attr!r}; use one of "
                         f"{', '.join(ATTRIBUTES)}")
    return attr


class _FreeBlock:
    __slots__ = ("ptr", "record", "size", "stream")

    def __init__(self, ptr: int, size: int, stream: CpuStream, record: Record | None) -> None:
        self.ptr = ptr
        self.size = size
        self.stream = stream      # the stream the free was ordered on
        self.record = record      # where the free happens on it (None: already happened)

    def completed(self) -> bool:
        rec = self.record
        if rec is None or rec.done():
            self.record = None
            return True
        return False


class StreamOrderedPool:
    """The default memory pool of one simulated device (thread-safe).

    Args:
        mem: the device's memory, which blocks are reserved from and released to.
    """

    def __init__(self, mem: DeviceMemory) -> None:
        self._mem = mem
        self._lock = reinit_after_fork(threading.Lock())
        self._live: Ranges[None] = Ranges()       # the allocated blocks
        self._free: list[_FreeBlock] = []         # guarded by _lock: blocks freed, kept
        self._reserved = 0                        # guarded by _lock (the counters below too)
        self._reserved_high = 0
        self._used = 0
        self._used_high = 0
        self._threshold = 0                       # CUDA's default release threshold

    def alloc(self, size: int, stream: CpuStream) -> int:
        """A block of at least ``size`` bytes for use on ``stream``; 0 when the device's
        budget cannot hold a new one (after releasing every completed free block)."""
        rounded = -(-size // BLOCK) * BLOCK
        with self._lock:
            blk = self._reusable(rounded, stream)
            if blk is not None:
                self._free.remove(blk)
                ptr, got = blk.ptr, blk.size
            else:
                ptr = self._mem.malloc(rounded)
                if not ptr:   # as the driver: give back what is safely unused, then retry
                    self._trim_locked(0)
                    ptr = self._mem.malloc(rounded)
                    if not ptr:
                        return 0
                got = rounded
                self._reserved += got
                self._reserved_high = max(self._reserved_high, self._reserved)
            self._live.add(ptr, got, None)
            self._used += got
            self._used_high = max(self._used_high, self._used)
            return ptr

    def _reusable(self, rounded: int, stream: CpuStream) -> _FreeBlock | None:
        """The smallest free block that fits ``rounded`` (less than twice as large) and that
        ``stream`` may use now: freed on ``stream`` itself, or freed and completed."""
        best: _FreeBlock | None = None
        for blk in self._free:
            if rounded <= blk.size < 2 * rounded and (best is None or blk.size < best.size) \
                    and (blk.stream is stream or blk.completed()):
                best = blk
        return best

    def free(self, ptr: int, stream: CpuStream, record: Record | None) -> None:
        """Free ``ptr`` in stream order: at ``record`` of ``stream`` (``None``: now).

        Raises:
            ValueError: ``ptr`` is not a live block of this pool.
        """
        with self._lock:
            size, _ = self._live.take(ptr, "mempool_free_async: {ptr:#x} is not memory "
                                      "allocated from the pool of cpu:{index} (or was "
                                      "already freed)", index=self._mem.index)
            self._used -= size
            self._free.append(_FreeBlock(ptr, size, stream, record))

    def trim_to(self, keep: int) -> None:
        """Release completed free blocks, largest first, until at most ``keep`` bytes are
        reserved (blocks whose free has not completed stay)."""
        with self._lock:
            self._trim_locked(keep)

    def _trim_locked(self, keep: int) -> None:
        if self._reserved <= keep:
            return
        for blk in sorted(self._free, key=lambda b: -b.size):
            if self._reserved <= keep:
                break
            if blk.completed():
                self._free.remove(blk)
                self._mem.free(blk.ptr)
                self._reserved -= blk.size

    def after_sync(self) -> None:
        """A synchronization happened: keep at most the release threshold of unused memory,
        as CUDA's pool does at stream, event and device synchronizations."""
        if self._reserved > self._threshold and self._free:
            self.trim_to(self._threshold)

    def attribute(self, name: str) -> int:
        """One of :data:`ATTRIBUTES`, in bytes."""
        with self._lock:
            if name == "release_threshold":
                return self._threshold
            if name == "reserved_mem_current":
                return self._reserved
            if name == "reserved_mem_high":
                return self._reserved_high
            if name == "used_mem_current":
                return self._used
            if name == "used_mem_high":
                return self._used_high
        raise ValueError(f"unknown memory pool attribute {name!r}; use one of "
                         f"{', '.join(ATTRIBUTES)}")

    def set_attribute(self, name: str, value: int) -> None:
        """Set the release threshold, or reset a high-water mark to its current value
        (``value`` 0, the only value CUDA accepts for them)."""
        with self._lock:
            if name == "release_threshold":
                self._threshold = value
                return
            if name in ("reserved_mem_high", "used_mem_high"):
                if value != 0:
                    raise ValueError(f"{name} can only be reset, with the value 0 (it becomes "
                                     f"the current value); got {value}")
                if name == "reserved_mem_high":
                    self._reserved_high = self._reserved
                else:
                    self._used_high = self._used
                return
        raise ValueError(f"memory pool attribute {name!r} cannot be set; set "
                         "release_threshold, or reset reserved_mem_high / used_mem_high with 0")

    def live(self, ptr: int) -> bool:
        """True while ``ptr`` is an allocated block of this pool."""
        return self._live.size_of(ptr) is not None
