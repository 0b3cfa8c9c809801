"""The allocator's uncached mode (``torch.cuda.caching_allocator_enable(False)``).

While caching is off, each request is a raw allocation of exactly its size from the backend,
outside the statistics, the snapshot and the history, and its free gives it back at once,
after the work of every stream that used it (its own, and those of ``record_stream``), as
PyTorch's uncached path. :class:`UncachedRequests` holds those allocations for one device;
the allocator asks it first for an address that is none of its blocks.

Example::

    >>> from accelrt.backends import get_backend
    >>> from accelrt.memory._uncached import UncachedRequests
    >>> u = UncachedRequests(get_backend("cpu"), 0, "cpu")
    >>> p = u.malloc(1000, 0)
    >>> len(u), u.free(p), u.free(p)
    (1, True, False)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._handles import DevicePtr, StreamHandle
from ._oom import format_size
from ._pools import backend_malloc, duplicate_address

if TYPE_CHECKING:
    from .._backend import Backend

__all__ = ["UncachedRequests"]


class UncachedRequests:
    """The uncached allocations of one device: address -> the ``(device index, stream)`` pairs
    of the streams that used it (its own first; ``record_stream`` may name a stream of another
    device of the backend). Guarded by the allocator's lock.

    Args:
        backend: the device's backend.
        index: the device index.
        name: the backend's name (for the out-of-memory message).
    """

    def __init__(self, backend: Backend, index: int, name: str) -> None:
        self._b = backend
        self._index = index
        self._name = name
        self._streams: dict[int, list[tuple[int, int]]] = {}

    def __len__(self) -> int:
        return len(self._streams)

    def malloc(self, size: int, stream: int) -> int | tuple[str, int, int, int, int]:
        """A raw allocation of ``size`` bytes for ``stream``: its address, or the arguments
        of :meth:`~._oom.OomReporter.raise_oom` when the device has no memory for it."""
        ptr = backend_malloc(self._b, self._index, size)
        if ptr in self._streams:
            raise duplicate_address(self._b, self._index, size, ptr)
        if not ptr:
            free, total = self._b.get_memory_info(self._index)
            msg = (f"{self._name.upper()} out of memory. Tried to allocate {format_size(size)} "
                   f"on {self._name}:{self._index} with the caching allocator disabled "
                   f"({format_size(free)} of {format_size(total)} free)")
            return msg, size, 0, total, free
        self._streams[ptr] = [(self._index, stream)]
        return ptr

    def free(self, ptr: int) -> bool:
        """Give an uncached allocation back to the backend once the work of the streams that
        used it is done (a stream destroyed since: the work of every stream of its device, as
        the caching path waits); False if ``ptr`` is not one."""
        streams = self._streams.pop(ptr, None)
        if streams is None:
            return False
        b = self._b
        for dev, s in streams:
            if b.stream_is_valid(dev, StreamHandle(s)):
                b.stream_synchronize(dev, StreamHandle(s))
            else:
                b.synchronize(dev)   # destroyed: its queued work still runs, so wait for all
        b.free(self._index, DevicePtr(ptr))
        return True

    def record_stream(self, ptr: object, stream: int, device: int) -> bool:
        """Its free waits for the work of ``stream`` of device ``device`` too; False if ``ptr``
        is not one."""
        streams = self._streams.get(ptr) if type(ptr) is int else None
        if streams is None:
            return False
        use = (device, stream)
        if use not in streams:
            streams.append(use)
        return True
