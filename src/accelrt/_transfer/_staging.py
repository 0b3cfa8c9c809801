"""Pinned host staging for copies between host memory and device memory the host cannot read.

PyTorch copies between pageable host memory and a GPU through page-locked ("pinned") host
buffers, and its ``CachingHostAllocator`` recycles those buffers only once the copies that use
them have completed (``record_event``). accelrt does the same with the backend's host pool
(:func:`accelrt.memory._host.get_host_allocator`) for every copy between a numpy array and
memory of a backend whose device memory is not host-accessible (CUDA, OpenCL in buffer mode):

* an upload (:func:`stage` with ``kind="h2d"``) copies the host data into a pinned block on the calling thread (a plain
  memcpy, so the caller may reuse or change its numpy array as soon as the call returns, as
  after PyTorch's ``copy_(non_blocking=True)`` from pageable memory), enqueues the host-to-device
  copy from the block on the stream, marks the block as used by that stream and frees it to the
  pool: the pool reuses it only after an event recorded on the stream at free time has
  completed. ``non_blocking=False`` takes the same path and then synchronizes the stream, so the
  block is reusable at once.
* a download (``kind="d2h"``) synchronizes the stream, then enqueues the device-to-host copy into a
  pinned block, synchronizes the stream again and copies the block into the caller's host
  memory. Waiting for the stream *before* taking the block (the download blocks anyway) makes
  the blocks of every copy queued earlier on the stream reusable, so how many blocks a
  download needs never depends on how far the stream has got (the pool grows only when
  copies really overlap).

A numpy array that is itself pinned (:func:`accelrt.pin_memory`, a block of this pool) is not
staged: the upload plan copies straight from it and records the stream on its block.

Staging is an optimisation, so :func:`stage` returns False (and the caller copies directly between the
numpy memory and the device, as before) when it does not apply: the backend has no pinned host
memory (``host_malloc`` not implemented), the pool cannot pin that much memory
(:class:`~accelrt.OutOfMemoryError`), or the stream is capturing a graph (a captured copy
would read a block the pool recycles before the graph replays). Blocks stay cached in the pool
until ``accelrt.memory.empty_host_cache()`` (or the backend's ``empty_host_cache()``); sizes
above ``pinned_max_cached_size_mb`` are never cached. ``host_memory_stats()`` counts them.

This module is the executor of the :class:`~accelrt._transfer.Stage` step of a transfer plan.

Example::

    >>> import numpy as np
    >>> from accelrt import backends
    >>> from accelrt._transfer._staging import stage
    >>> from accelrt._stream import _current
    >>> b = backends.get_backend("cpu")
    >>> s = _current(b, 0)
    >>> dev = b.malloc(0, 64)
    >>> src = np.arange(8, dtype=np.int64)
    >>> stage(b, s, "h2d", dev, src.ctypes.data, src.nbytes, non_blocking=True)
    True
    >>> out = np.empty(8, np.int64)
    >>> stage(b, s, "d2h", out.ctypes.data, dev, out.nbytes, non_blocking=False)
    True
    >>> out.tolist()
    [0, 1, 2, 3, 4, 5, 6, 7]
    >>> b.free(0, dev)
"""

from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Literal

from .._backend import Backend
from .._errors import OutOfMemoryError
from ..memory._host import HostCachingAllocator, get_host_allocator

if TYPE_CHECKING:
    from .._stream import Stream

__all__ = ["pinned_pool", "stage"]


def pinned_pool(b: Backend) -> HostCachingAllocator | None:
    """The pinned host pool of ``b``, or None if ``b`` has no pinned host memory
    (capability ``pinned_host_memory``; host memory belongs to no device: device 0 answers).

    Example::

        >>> from accelrt import backends
        >>> from accelrt._transfer import pinned_pool
        >>> pinned_pool(backends.get_backend("cpu")) is not None
        True
    """
    if not b.capabilities(0).pinned_host_memory:
        return None
    return get_host_allocator(b)


def _take_block(b: Backend, stream: Stream, nbytes: int,
                wait: bool) -> tuple[HostCachingAllocator, int] | None:
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


def stage(b: Backend, stream: Stream, kind: Literal["h2d", "d2h"], dst: int, src: int,
          nbytes: int, non_blocking: bool) -> bool:
    """Copy ``nbytes`` from ``src`` to ``dst`` on ``stream`` through a pinned block of ``b``'s
    host pool: ``kind="h2d"`` from host memory (which may change as soon as this returns) to
    device memory, ``"d2h"`` from device memory to host memory after the work queued on
    ``stream`` (synchronizing; ``non_blocking`` is ignored).

    Args:
        b: the backend of the device memory.
        stream: the :class:`accelrt.Stream` (of ``b``) the copy is ordered on.
        kind: the direction.
        dst, src: addresses.
        nbytes: byte count.
        non_blocking: an upload returns once the copy is enqueued; otherwise it synchronizes
            ``stream``.

    Returns:
        True if the copy was made (or enqueued); False if staging does not apply and nothing
        was done (the caller copies directly).
    """
    upload = kind == "h2d"
    got = _take_block(b, stream, nbytes, wait=not upload)
    if got is None:
        return False
    pool, ptr = got
    index, handle = stream._index, stream._handle
    pending = False
    try:
        if upload:
            ctypes.memmove(ptr, src, nbytes)
            b.memcpy(index, dst, ptr, nbytes, "h2d", handle)
        else:
            b.memcpy(index, ptr, src, nbytes, "d2h", handle)
        pending = True
        if not (upload and non_blocking):
            b.stream_synchronize(index, handle)
            pending = False
        if not upload:
            ctypes.memmove(dst, ptr, nbytes)
    finally:
        # while a copy that uses the block may still be queued, the pool reuses it only
        # after the work on the stream so far has completed
        try:
            if pending:
                pool.record_event(ptr, stream)
        finally:
            pool.free(ptr)
    return True
