"""Stream-ordered byte copies between devices, the host, and other backends.

The copy engine behind :mod:`accelrt.comm`. A *place* is where memory lives: a
``(backend, index)`` pair, or :data:`HOST` for plain host memory (numpy buffers).

Ordering follows PyTorch's cross-device ``copy_``: a copy between two devices of one backend
runs on the *source* device's current stream, after a two-way barrier: the copy waits for the
work already queued on the destination's stream (so nobody is still using the destination
memory), and the destination's stream waits for the copy (so later work there sees the data).
Each barrier is an event recorded on one stream and waited on by the other. Copies that touch
plain host memory or cross backends are synchronous with respect to the host (the host buffer
must be valid when the call returns, as with pageable memory in CUDA). Between host memory and
device memory the host cannot read, they go through pinned blocks of the backend's host pool
(:mod:`accelrt._staging`, as ``Array`` copies do): the pool reuses a block only once the copy
that used it has completed; without pinned memory they copy directly.

Example::

    >>> import accelrt as acc
    >>> from accelrt.comm import _transfer
    >>> a = acc.full((4,), 3.0, device="cpu:0")
    >>> out = acc.empty((4,), device="cpu:0")
    >>> here = _transfer.place_of(a)
    >>> _transfer.copy_bytes(here, out.data_ptr(), here, a.data_ptr(), a.nbytes)
    >>> out.numpy().tolist()
    [3.0, 3.0, 3.0, 3.0]
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _staging
from .._device import _get_device, _lazy_init
from .._stream import Stream, _current, _wait_raw

if TYPE_CHECKING:
    from .._backend import Backend

__all__ = ["HOST", "Place", "copy_bytes", "copy_runs", "host_view", "place_of",
           "run_on_stream", "stream_of"]


@dataclass(frozen=True, slots=True)
class Place:
    """Where memory lives: ``backend`` is ``None`` for plain host memory."""

    backend: Backend | None
    index: int

    @property
    def is_host(self) -> bool:
        return self.backend is None

    def host_readable(self) -> bool:
        """True if the host can read and write this memory at its address."""
        b = self.backend
        return b is None or b.capabilities(self.index).host_accessible

    def __str__(self) -> str:
        b = self.backend
        return "host" if b is None else f"{b.name}:{self.index}"


#: Plain host memory (numpy arrays).
HOST = Place(None, -1)


def place_of(array: Any) -> Place:
    """The :class:`Place` of an accelrt array (or :data:`HOST` for a numpy array)."""
    if isinstance(array, np.ndarray):
        return HOST
    b, index = _get_device(array.device)
    return Place(b, index)


def stream_of(place: Place, override: Stream | None = None) -> Stream:
    """The stream work on ``place`` is ordered on: ``override`` when it belongs to that
    device, else the calling thread's current stream of the device."""
    b = place.backend
    assert b is not None
    if override is not None and override._b is b and override._index == place.index:
        return override
    return _current(b, place.index)




def barrier(src: Stream, dst: Stream) -> None:
    """Make future work on ``dst`` wait for the work queued so far on ``src`` (same backend;
    a no-op when they are the same stream)."""
    if src == dst:
        return
    _lazy_init(src._b, src._index)
    _lazy_init(dst._b, dst._index)
    _wait_raw(src._b, dst._index, dst._handle, src._index, src._handle)


def run_on_stream(stream: Stream, fn: Callable[[], None]) -> None:
    """Run ``fn()`` on the host in stream order on ``stream`` (``launch_host_func``), or, if
    the backend cannot, after synchronising the stream."""
    b = stream._b
    if b.capabilities(stream._index).host_functions:
        b.launch_host_func(stream._index, fn, stream._handle)
    else:
        b.stream_synchronize(stream._index, stream._handle)
        fn()


def host_view(ptr: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A writable numpy view of host-readable memory at ``ptr`` (no copy, no ownership)."""
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype)
    buf = memoryview((ctypes.c_char * nbytes).from_address(ptr)).cast("B")
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def copy_bytes(dst: Place, dst_ptr: int, src: Place, src_ptr: int, nbytes: int, *,
               stream: Stream | None = None) -> None:
    """Copy ``nbytes`` from ``src_ptr`` on ``src`` to ``dst_ptr`` on ``dst``.

    Args:
        dst, src: places of the two buffers.
        dst_ptr, src_ptr: addresses.
        nbytes: byte count (``0`` is a no-op).
        stream: stands in for the current stream of its device (``scatter``'s ``streams``).
    """
    copy_runs(dst, dst_ptr, src, src_ptr, nbytes, 1, 0, 0, stream=stream)


def copy_runs(dst: Place, dst_ptr: int, src: Place, src_ptr: int, run: int, count: int,
              dst_pitch: int, src_pitch: int, *, stream: Stream | None = None) -> None:
    """Copy ``count`` runs of ``run`` bytes; run ``k`` starts at ``ptr + k * pitch`` on each
    side. One ordering barrier covers all the runs (a strided region in one call)."""
    if run <= 0 or count <= 0:
        return
    db, sb = dst.backend, src.backend
    if db is None and sb is None:
        for k in range(count):
            ctypes.memmove(dst_ptr + k * dst_pitch, src_ptr + k * src_pitch, run)
        return
    if db is not None:
        _lazy_init(db, dst.index)
    if sb is not None:
        _lazy_init(sb, src.index)
    if count > _INLINE_RUNS and dst.host_readable() and src.host_readable():
        _strided_host_copy(dst, dst_ptr, src, src_ptr, run, count, dst_pitch, src_pitch, stream)
        return

    if sb is not None and db is sb:
        dst_stream = stream_of(dst, stream)
        if src.index == dst.index:
            # a stream given for this device also waits for the device's current stream, where
            # the source's pending work is
            barrier(_current(sb, src.index), dst_stream)
            for k in range(count):
                sb.memcpy(src.index, dst_ptr + k * dst_pitch, src_ptr + k * src_pitch, run,
                          "d2d", dst_stream._handle)
            return
        copy_stream = stream_of(src, stream)
        if sb.capabilities(src.index).peer_copies:
            barrier(dst_stream, copy_stream)
            for k in range(count):
                sb.memcpy_peer(dst.index, dst_ptr + k * dst_pitch, src.index,
                               src_ptr + k * src_pitch, run, copy_stream._handle)
            barrier(copy_stream, dst_stream)
            return
        # no peer copies: stage through host memory
        _staged(dst, dst_ptr, src, src_ptr, run, count, dst_pitch, src_pitch, stream)
        return

    # host <-> device, or across two backends: synchronous with respect to the host
    if db is not None and sb is not None:
        stream_of(dst, stream).synchronize()   # nothing may still use the destination
        if dst.host_readable():
            _d2h(src, dst_ptr, src_ptr, run, count, dst_pitch, src_pitch, stream)
        elif src.host_readable():
            stream_of(src, stream).synchronize()
            _h2d(dst, dst_ptr, src_ptr, run, count, dst_pitch, src_pitch, stream)
        else:
            _staged(dst, dst_ptr, src, src_ptr, run, count, dst_pitch, src_pitch, stream)
    elif db is None:
        _d2h(src, dst_ptr, src_ptr, run, count, dst_pitch, src_pitch, stream)
    else:
        _h2d(dst, dst_ptr, src_ptr, run, count, dst_pitch, src_pitch, stream)


#: Above this many runs, a strided copy between host-readable places is one numpy copy (in
#: stream order) instead of one backend memcpy per run.
_INLINE_RUNS = 16


def _strided_view(ptr: int, run: int, count: int, pitch: int) -> np.ndarray:
    extent = (count - 1) * pitch + run
    base = np.frombuffer(memoryview((ctypes.c_char * extent).from_address(ptr)).cast("B"),
                         dtype=np.uint8)
    return np.lib.stride_tricks.as_strided(base, shape=(count, run), strides=(pitch, 1))


def _strided_copy(dst_ptr: int, src_ptr: int, run: int, count: int, dst_pitch: int,
                  src_pitch: int) -> None:
    np.copyto(_strided_view(dst_ptr, run, count, dst_pitch),
              _strided_view(src_ptr, run, count, src_pitch))


def _strided_host_copy(dst: Place, dst_ptr: int, src: Place, src_ptr: int, run: int,
                       count: int, dst_pitch: int, src_pitch: int,
                       stream: Stream | None) -> None:
    fn = partial(_strided_copy, dst_ptr, src_ptr, run, count, dst_pitch, src_pitch)
    db, sb = dst.backend, src.backend
    if sb is not None and db is sb:
        dst_stream = stream_of(dst, stream)
        copy_stream = dst_stream if src.index == dst.index else stream_of(src, stream)
        if src.index == dst.index:
            barrier(_current(sb, src.index), dst_stream)
        barrier(dst_stream, copy_stream)
        run_on_stream(copy_stream, fn)
        barrier(copy_stream, dst_stream)
        return
    for p in (dst, src):
        if p.backend is not None:
            stream_of(p, stream).synchronize()
    fn()


def _contiguous(run: int, count: int, pitch: int) -> bool:
    return count == 1 or pitch == run


def _d2h(src: Place, dst_ptr: int, src_ptr: int, run: int, count: int, dst_pitch: int,
         src_pitch: int, stream: Stream | None) -> None:
    """Device (or host-readable memory of a backend) to host-readable memory; returns with
    the copy complete. Memory the host cannot read goes through the backend's pinned host
    pool (:func:`accelrt._staging.download`) where it can."""
    b = src.backend
    assert b is not None
    s = stream_of(src, stream)
    if not src.host_readable() and _download_staged(b, s, dst_ptr, src_ptr, run, count,
                                                    dst_pitch, src_pitch):
        return
    for k in range(count):
        b.memcpy(src.index, dst_ptr + k * dst_pitch, src_ptr + k * src_pitch, run, "d2h", s._handle)
    s.synchronize()


def _download_staged(b: Backend, s: Stream, dst_ptr: int, src_ptr: int, run: int, count: int,
                     dst_pitch: int, src_pitch: int) -> bool:
    """Download through pinned blocks; False (nothing copied) when staging does not apply."""
    total = run * count
    if _contiguous(run, count, src_pitch):
        if _contiguous(run, count, dst_pitch):
            return _staging.download(b, s, dst_ptr, src_ptr, total)
        tmp = np.empty(total, dtype=np.uint8)      # one staged copy, then scatter the runs
        if not _staging.download(b, s, tmp.ctypes.data, src_ptr, total):
            return False
        _strided_copy(dst_ptr, tmp.ctypes.data, run, count, dst_pitch, run)
        return True
    # strided device memory: one staged copy per run (each falls back on its own)
    for k in range(count):
        d, sp = dst_ptr + k * dst_pitch, src_ptr + k * src_pitch
        if not _staging.download(b, s, d, sp, run):
            b.memcpy(s._index, d, sp, run, "d2h", s._handle)
            s.synchronize()
    return True


def _h2d(dst: Place, dst_ptr: int, src_ptr: int, run: int, count: int, dst_pitch: int,
         src_pitch: int, stream: Stream | None) -> None:
    """Host-readable memory to a device (or host-readable memory of a backend); returns with
    the copy complete. Memory the host cannot read is filled from the backend's pinned host
    pool (:func:`accelrt._staging.upload`) where it can."""
    b = dst.backend
    assert b is not None
    s = stream_of(dst, stream)
    if not dst.host_readable() and _upload_staged(b, s, dst_ptr, src_ptr, run, count,
                                                  dst_pitch, src_pitch):
        return
    for k in range(count):
        b.memcpy(dst.index, dst_ptr + k * dst_pitch, src_ptr + k * src_pitch, run, "h2d", s._handle)
    s.synchronize()


def _upload_staged(b: Backend, s: Stream, dst_ptr: int, src_ptr: int, run: int, count: int,
                   dst_pitch: int, src_pitch: int) -> bool:
    """Upload through pinned blocks and synchronize ``s``; False (nothing copied) when
    staging does not apply."""
    if _contiguous(run, count, dst_pitch):
        if _contiguous(run, count, src_pitch):
            host = host_view(src_ptr, (run * count,), np.dtype(np.uint8))
        else:                                      # pack the runs; upload copies them again
            host = np.ascontiguousarray(_strided_view(src_ptr, run, count, src_pitch))
        return _staging.upload(b, s, dst_ptr, host, non_blocking=False)
    # strided device memory: one staged copy per run, enqueued (the pool reuses a block once
    # its copy has run), each falling back on its own, then one synchronize
    for k in range(count):
        d, sp = dst_ptr + k * dst_pitch, src_ptr + k * src_pitch
        if not _staging.upload(b, s, d, host_view(sp, (run,), np.dtype(np.uint8)),
                               non_blocking=True):
            b.memcpy(s._index, d, sp, run, "h2d", s._handle)
    s.synchronize()
    return True


def _staged(dst: Place, dst_ptr: int, src: Place, src_ptr: int, run: int, count: int,
            dst_pitch: int, src_pitch: int, stream: Stream | None) -> None:
    tmp = np.empty(run * count, dtype=np.uint8)
    tp = tmp.ctypes.data
    stream_of(dst, stream).synchronize()
    _d2h(src, tp, src_ptr, run, count, run, src_pitch, stream)
    _h2d(dst, dst_ptr, tp, run, count, dst_pitch, run, stream)
