"""Keep-alives of queued work: the one lifetime rule for everything a stream still uses.

Memory the caching allocator does not own (an array's borrowed memory: numpy, DLPack or
``__cuda_array_interface__`` buffers shared by :func:`accelrt.asarray`, and plain host buffers
such as numpy arrays) is held by the work that touches it, until that work has run.
Caching-allocator memory is not held: its free is stream-ordered (the block is reused only after
the work queued on its stream), so an array may be dropped while work on it is queued, and its
memory counts as freed at once, as in PyTorch. Every enqueue site (copies, fills, random fills,
collectives) passes what it touches to :func:`held` and holds the result with :func:`hold`.

Example::

    >>> import numpy as np
    >>> from accelrt import backends
    >>> from accelrt._stream import _current
    >>> from accelrt._transfer import held, hold
    >>> b = backends.get_backend("cpu")
    >>> host = np.ones(4)
    >>> held(host, None) == (host,)
    True
    >>> hold(b, 0, _current(b, 0)._handle, held(host))
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from .. import _sync_debug as _sd
from .._errors import DeviceError, caused
from .._memory_owner import _Memory

if TYPE_CHECKING:
    from .._backend import Backend
    from .._handles import StreamHandle

__all__ = ["held", "hold", "keep_alive"]

_array_type: Any = None   # accelrt.Array, imported on first use (it imports this)


def _noop(*keep: object) -> None:
    """Host callback whose only job is to hold references until the stream reaches it."""


def held(*items: object) -> tuple[object, ...]:
    """What work queued on ``items`` must keep alive until it has run (the module's rule).

    Args:
        items: :class:`accelrt.Array`, its memory owner, numpy arrays or other host buffer
            owners; ``None`` is skipped.
    """
    global _array_type
    array = _array_type
    if array is None:
        from .._array import Array
        array = _array_type = Array
    out: list[object] = []
    for item in items:
        if isinstance(item, array):
            item = item._mem
        if isinstance(item, _Memory):
            if item.alloc is None and item.ptr:
                out.append(item)
        elif item is not None:
            out.append(item)
    return tuple(out)


def hold(b: Backend, index: int, stream: StreamHandle, keep: tuple[object, ...]) -> None:
    """Keep ``keep`` (from :func:`held`) alive until ``stream`` reaches the work enqueued
    so far, with a host callback; without host callbacks, synchronize the stream."""
    keep_alive(b, index, stream, keep, non_blocking=True)


def keep_alive(b: Backend, index: int, stream: StreamHandle, keep: tuple[object, ...],
               non_blocking: bool) -> None:
    """Finish a copy that touches host memory: wait for the stream (blocking copies), or hold
    ``keep`` (from :func:`held`; empty: nothing to hold) in a host callback enqueued after
    the work so it outlives it."""
    if non_blocking:
        if not keep:
            return
        if not b.capabilities(index).host_functions:   # wait, then report the sync
            b.stream_synchronize(index, stream)
            if _sd.active:
                _sd.check(b.name)
            return
        try:
            b.launch_host_func(index, functools.partial(_noop, keep), stream)
            return
        except DeviceError as exc:
            if b.stream_is_capturing(index, stream):
                raise caused(DeviceError(
                    f"a non_blocking copy touching host memory was captured into a graph on "
                    f"{b.name}:{index}, and this backend cannot keep the host memory alive for "
                    "every replay; copy the data to the device before the capture, or make "
                    "the copy outside it"), exc) from exc
            raise
    b.stream_synchronize(index, stream)
