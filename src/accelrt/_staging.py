"""Pinned host staging for copies between host memory and device memory the host cannot read.

PyTorch copies between pageable host memory and a GPU through page-locked ("pinned") host
buffers, and its ``CachingHostAllocator`` recycles those buffers only once the copies that use
them have completed (``record_event``). accelrt does the same with the backend's host pool
(:func:`accelrt.memory._host.get_host_allocator`) for every copy between a numpy array and
memory of a backend whose device memory is not host-accessible (CUDA, OpenCL in buffer mode):

* :func:`upload` copies the host data into a pinned block on the calling thread (a plain
  memcpy, so the caller may reuse or change its numpy array as soon as the call returns, as
  after PyTorch's ``copy_(non_blocking=True)`` from pageable memory), enqueues the host-to-device
  copy from the block on the stream, marks the block as used by that stream and frees it to the
  pool: the pool reuses it only after an event recorded on the stream at free time has
  completed. ``non_blocking=False`` takes the same path and then synchronizes the stream, so the
  block is reusable at once.
* :func:`download` synchronizes the stream, then enqueues the device-to-host copy into a
  pinned block, synchronizes the stream again and copies the block into the caller's host
  memory. Waiting for the stream *before* taking the block (the download blocks anyway) makes
  the blocks of every copy queued earlier on the stream reusable, so how many blocks a
  download needs never depends on how far the stream has got (the pool grows only when
  copies really overlap).

A numpy array that is itself pinned (:func:`accelrt.pin_memory`, a block of this pool) is not
staged: ``Array._upload`` copies straight from it and records the stream on its block.

Staging is an optimisation, so both return False (and the caller copies directly between the
numpy memory and the device, as before) when it does not apply: the backend has no pinned host
memory (``host_malloc`` not implemented), the pool cannot pin that much memory
(:class:`~accelrt.OutOfMemoryError`), or the stream is capturing a graph (a captured copy
would read a block the pool recycles before the graph replays). Blocks stay cached in the pool
until ``accelrt.memory.empty_host_cache()`` (or the backend's ``empty_host_cache()``); sizes
above ``pinned_max_cached_size_mb`` are never cached. ``host_memory_stats()`` counts them.

Example::

    >>> import numpy as np
    >>> from accelrt import backends
    >>> from accelrt._staging import download, upload
    >>> from accelrt._stream import _current
    >>> b = backends.get_backend("cpu")
    >>> s = _current(b, 0)
    >>> dev = b.malloc(0, 64)
    >>> upload(b, s, dev, np.arange(8, dtype=np.int64), non_blocking=True)
    True
    >>> out = np.empty(8, np.int64)
    >>> download(b, s, out.ctypes.data, dev, out.nbytes)
    True
    >>> out.tolist()
    [0, 1, 2, 3, 4, 5, 6, 7]
    >>> b.free(0, dev)
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING

import numpy as np

from ._backend import Backend
from ._errors import OutOfMemoryError
from .memory._host import HostCachingAllocator, get_host_allocator

if TYPE_CHECKING:
    from ._stream import Stream

__all__ = ["download", "pinned_pool", "upload"]


def pinned_pool(b: Backend) -> HostCachingAllocator | None:
    """The pinned host pool of ``b``, or None if ``b`` has no pinned host memory
    (capability ``pinned_host_memory``; host memory belongs to no device: device 0 answers).

    Example::

        >>> from accelrt import backends
        >>> from accelrt._staging import pinned_pool
        >>> pinned_pool(backends.get_backend("cpu")) is not None
        True
    """
    if not b.capabilities(0).pinned_host_memory:
        return None
    return get_host_allocator(b)


def _stage(b: Backend, stream: Stream, nbytes: int,
           wait: bool = False) -> tuple[HostCachingAllocator, int] | None:
    """A pinned block of ``nbytes`` for a copy on ``stream``, or None when staging does not
    apply (see the module docstring). ``wait``: synchronize ``stream`` before taking the
    block (a download), so the blocks of copies queued on it earlier can be reused."""
    if nbytes <= 0 or b.stream_is_capturing(stream._index, stream._handle):
        return None
    pool = pinned_pool(b)
    if pool is None:
        return None
    if wait:
        b.stream_synchronize(stream._index, stream._handle)
    try:
        return pool, pool.malloc(nbytes)
    except (NotImplementedError, OutOfMemoryError):
        return None


def _release(pool: HostCachingAllocator, ptr: int, stream: Stream, pending: bool) -> None:
    """Free a staging block; while a copy that uses it may still be queued (``pending``), the
    pool reuses it only after the work on ``stream`` so far has completed."""
    try:
        if pending:
            pool.record_event(ptr, stream)
    finally:
        pool.free(ptr)


def upload(b: Backend, stream: Stream, dst: int, host: np.ndarray, non_blocking: bool) -> bool:
    """Copy the C-contiguous numpy array ``host`` to device address ``dst`` on ``stream``
    through a pinned block of ``b``'s host pool.

    Args:
        b: the backend of the destination memory.
        stream: the :class:`accelrt.Stream` (of ``b``) the copy is ordered on.
        dst: device address of at least ``host.nbytes`` bytes on ``stream``'s device.
        host: the source; it may be changed or freed as soon as this returns.
        non_blocking: return once the copy is enqueued; otherwise synchronize ``stream``.

    Returns:
        True if the copy was made (or enqueued); False if staging does not apply and nothing
        was done (the caller copies directly).

    Example::

        >>> import numpy as np
        >>> from accelrt import backends
        >>> from accelrt._staging import upload
        >>> from accelrt._stream import _current
        >>> b = backends.get_backend("cpu")
        >>> dev = b.malloc(0, 16)
        >>> upload(b, _current(b, 0), dev, np.ones(2), non_blocking=False)
        True
        >>> b.free(0, dev)
    """
    nbytes = host.nbytes
    got = _stage(b, stream, nbytes)
    if got is None:
        return False
    pool, ptr = got
    index, handle = stream._index, stream._handle
    pending = False
    try:
        ctypes.memmove(ptr, host.ctypes.data, nbytes)
        b.memcpy(index, dst, ptr, nbytes, "h2d", handle)
        pending = True
        if not non_blocking:
            b.stream_synchronize(index, handle)
            pending = False
    finally:
        _release(pool, ptr, stream, pending)
    return True


def download(b: Backend, stream: Stream, out: int, src: int, nbytes: int) -> bool:
    """Copy ``nbytes`` from device address ``src`` to host address ``out`` through a pinned
    block of ``b``'s host pool, after the work queued on ``stream`` (synchronizing).

    Returns:
        True if the copy was made; False if staging does not apply and nothing was done.

    Example::

        >>> import numpy as np
        >>> from accelrt import backends
        >>> from accelrt._staging import download
        >>> from accelrt._stream import _current
        >>> b = backends.get_backend("cpu")
        >>> dev = b.malloc(0, 8)
        >>> out = np.empty(8, np.uint8)
        >>> download(b, _current(b, 0), out.ctypes.data, dev, 8)
        True
        >>> b.free(0, dev)
    """
    got = _stage(b, stream, nbytes, wait=True)
    if got is None:
        return False
    pool, ptr = got
    index, handle = stream._index, stream._handle
    pending = False
    try:
        b.memcpy(index, ptr, src, nbytes, "d2h", handle)
        pending = True
        b.stream_synchronize(index, handle)
        pending = False
        ctypes.memmove(out, ptr, nbytes)
    finally:
        _release(pool, ptr, stream, pending)
    return True
