"""The executors of transfer plans: one small function per step type, and :func:`execute`.

Executors decide nothing: every choice (which stream, staged or direct, which barrier, what to
keep alive) is in the plan. The one run-time branch is :class:`~accelrt._transfer.Stage`'s
fallback, taken when the pinned pool cannot give a block (out of pinned memory).

Example::

    >>> import numpy as np
    >>> from accelrt._transfer import HostCopy, Plan, execute
    >>> a, b = np.arange(4, dtype=np.uint8), np.zeros(4, np.uint8)
    >>> execute(Plan((HostCopy(b.ctypes.data, a.ctypes.data, 2, 2, 2, 2),)))
    >>> b.tolist()
    [0, 1, 2, 3]
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import DeviceError
from .._stream import _wait_raw
from .._stream_core import _StreamCore
from ._lifetime import held, keep_alive
from ._plan import (Barrier, Copy, FreeHost, Hold, HostCopy, Plan, RecordHost, Stage, Step, Sync,
                    Upload)
from ._staging import stage

if TYPE_CHECKING:
    from .._stream import Stream

__all__ = ["execute", "host_view", "run_on_stream", "run_steps"]


def host_view(ptr: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A writable numpy view of host-readable memory at ``ptr`` (no copy, no ownership).

    Example::

        >>> import numpy as np
        >>> from accelrt._transfer import host_view
        >>> a = np.arange(3.0)
        >>> host_view(a.ctypes.data, (3,), a.dtype).tolist()
        [0.0, 1.0, 2.0]
    """
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if nbytes == 0:
        return np.empty(shape, dtype)
    buf = memoryview((ctypes.c_char * nbytes).from_address(ptr)).cast("B")
    return np.frombuffer(buf, dtype=dtype).reshape(shape)


def run_on_stream(stream: Stream, fn: Callable[[], None]) -> None:
    """Run ``fn()`` on the host in stream order on ``stream`` (``launch_host_func``), or, if
    the backend cannot, after synchronising the stream.

    Example::

        >>> import accelrt as acc
        >>> from accelrt._transfer import run_on_stream
        >>> seen = []
        >>> run_on_stream(acc.current_stream("cpu:0"), lambda: seen.append(1))
        >>> acc.current_stream("cpu:0").synchronize(); seen
        [1]
    """
    st: _StreamCore = stream   # the core's type: a native field read when compiled
    b = st._b
    if b.capabilities(st._index).host_functions:
        b.launch_host_func(st._index, fn, st._handle)
    else:
        b.stream_synchronize(st._index, st._handle)
        fn()


def _strided_view(ptr: int, run: int, count: int, pitch: int) -> np.ndarray:
    extent = (count - 1) * pitch + run
    base = np.frombuffer(memoryview((ctypes.c_char * extent).from_address(ptr)).cast("B"),
                         dtype=np.uint8)
    return np.lib.stride_tricks.as_strided(base, shape=(count, run), strides=(pitch, 1))


def _host_runs(dst: int, src: int, run: int, count: int, dst_pitch: int,
               src_pitch: int) -> None:
    if count == 1:
        ctypes.memmove(dst, src, run)
        return
    np.copyto(_strided_view(dst, run, count, dst_pitch), _strided_view(src, run, count, src_pitch))


def _copy(s: Copy) -> None:
    st: _StreamCore = s.stream
    b, index, handle = st._b, st._index, st._handle
    dst, src, run, dp, sp = s.dst, s.src, s.run, s.dst_pitch, s.src_pitch
    if s.kind == "peer":
        for k in range(s.nruns):
            b.memcpy_peer(s.dst_device, dst + k * dp, index, src + k * sp, run, handle)
        return
    kind = s.kind
    for k in range(s.nruns):
        b.memcpy(index, dst + k * dp, src + k * sp, run, kind, handle)


def _host_copy(s: HostCopy) -> None:
    args = (s.dst, s.src, s.run, s.nruns, s.dst_pitch, s.src_pitch)
    if s.stream is None:
        _host_runs(*args)
    else:
        run_on_stream(s.stream, partial(_host_runs, *args))


def _upload(s: Upload) -> None:
    st: _StreamCore = s.stream
    b, index, handle = st._b, st._index, st._handle
    host = s.host.copy() if s.snapshot else s.host
    b.memcpy(index, s.dst, host.ctypes.data, host.nbytes, s.kind, handle)
    keep_alive(b, index, handle, held(host, *s.keep), s.non_blocking)


def _stage(s: Stage) -> None:
    st = s.stream
    if stage(st._b, st, s.kind, s.dst, s.src, s.nbytes, s.non_blocking):
        run_steps(s.then)
    else:
        run_steps(s.fallback)


def _barrier(s: Barrier) -> None:
    a: _StreamCore = s.after
    w: _StreamCore = s.waiter
    _wait_raw(a._b, w._index, w._handle, a._index, a._handle)


def _sync(s: Sync) -> None:
    st = s.stream
    if s.report:
        st.synchronize()
    else:
        st._b.stream_synchronize(st._index, st._handle)


def _hold(s: Hold) -> None:
    st: _StreamCore = s.stream
    keep_alive(st._b, st._index, st._handle, s.keep, s.non_blocking)


def _record_host(s: RecordHost) -> None:
    s.pool.record_event(s.ptr, s.stream)


def _free_host(s: FreeHost) -> None:
    pool = s.pool
    try:
        if s.stream is not None:
            pool.record_event(s.ptr, s.stream)
    finally:
        pool.free(s.ptr)


_EXECUTORS: dict[type, Callable[[Any], None]] = {
    Copy: _copy, HostCopy: _host_copy, Upload: _upload, Stage: _stage, Barrier: _barrier,
    Sync: _sync, Hold: _hold, RecordHost: _record_host, FreeHost: _free_host,
}


def run_steps(steps: Sequence[Step]) -> None:
    """Run ``steps`` in order, each by the executor of its type."""
    run = _EXECUTORS
    for step in steps:
        run[type(step)](step)


def _refuse_blocking_in_capture(steps: Sequence[Step]) -> None:
    """Refuse, before any byte moves, steps that make the host wait for a stream capturing a
    graph: a captured copy only runs at replay, so the wait would fail after the copy was
    recorded, leaving a graph that replays a copy from or to host memory freed by then."""
    for step in steps:
        if isinstance(step, Sync):
            st: _StreamCore = step.stream
        elif isinstance(step, (Upload, Stage, Hold)) and not step.non_blocking:
            st = step.stream
        else:
            continue
        b = st._b
        if b.stream_is_capturing(st._index, st._handle):
            raise DeviceError(
                f"{b.name}: a blocking copy to or from host memory is not permitted while "
                f"stream {int(st._handle)} of {b.name}:{st._index} is capturing a graph (the "
                "host would wait for work that only runs at replay); make the copy before or "
                "after the capture, or copy between device arrays")


def execute(plan: Plan) -> None:
    """Run every step of ``plan`` (its staging buffers live until it returns); a plan whose
    host waits for a capturing stream is refused before its first step."""
    _refuse_blocking_in_capture(plan.steps)
    run = _EXECUTORS
    for step in plan.steps:
        run[type(step)](step)
