"""Streams and events of the opencl backend.

A stream is an in-order command queue. Host functions run in stream order on a worker
thread of that stream: the stream gets a marker (completes when earlier work is done) and
then a barrier on a user event; the worker waits for the marker, runs the function and
completes the user event, so later work waits for the function. An exception raised by a
host function is kept on the stream and raised (as ``DeviceError``) by the next
synchronize or query of that stream, or of an event recorded after it.

Example::

    >>> from accelrt.backends.opencl._streams import ClEvent
    >>> ClEvent(device=0, timing=True).marker is None
    True
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from ... import _stream_callback
from ..._fork import reinit_after_fork
from .._common import KeptErrors

__all__ = ["ClEvent", "ClStream", "HostWorker"]

_STOP = object()


class HostWorker:
    """Runs host functions of one stream in order once their markers complete.

    Args:
        cl: the pyopencl module.
        name: thread name.
        keep: called with an exception raised by a function (or a failed marker).
        where: the stream, as :mod:`accelrt._stream_callback` names it ("stream 0x1 of
            opencl:0"): the thread runs host functions in its order.
    """

    def __init__(self, cl: Any, name: str, keep: Callable[[BaseException], None],
                 where: str = "") -> None:
        self._cl = cl
        self._keep = keep
        self._where = where or name
        self._cv = reinit_after_fork(threading.Condition(threading.Lock()))
        self._items: deque[Any] = deque()             # guarded by _cv
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def submit(self, marker: Any, fn: Callable[[], object], done: Any) -> None:
        """Run ``fn`` after ``marker`` completes, then complete user event ``done``."""
        with self._cv:
            self._items.append((marker, fn, done))
            self._cv.notify()

    def stop(self) -> None:
        """Let the thread exit after the queued functions ran."""
        with self._cv:
            self._items.append(_STOP)
            self._cv.notify()

    def _run(self) -> None:
        complete = self._cl.command_execution_status.COMPLETE
        _stream_callback.enter(self._where)   # what waits for streams is refused here
        while True:
            with self._cv:
                while not self._items:
                    self._cv.wait()
                item = self._items.popleft()
            if item is _STOP:
                return
            marker, fn, done = item
            try:
                marker.wait()
                fn()
            except BaseException as exc:  # noqa: BLE001 - kept and reported by the stream
                self._keep(exc)
            finally:
                done.set_status(complete)


class ClStream:
    """One stream: an in-order queue, its last enqueued event and its host worker.

    Attributes:
        device, handle, priority: identity (the default stream has handle 0).
        queue: the ``pyopencl.CommandQueue``.
        last: the event of the last command enqueued (``None`` before any).
        worker: the host-function worker, started on the first host function.
        kept: where the first exception of a host function is kept under this stream (its
            backend's; the rule of :class:`~accelrt.backends._common.KeptErrors`).
    """

    __slots__ = (
        "__weakref__",
        "device",
        "handle",
        "kept",
        "last",
        "lock",
        "pending",
        "priority",
        "queue",
        "worker",
    )

    def __init__(self, device: int, handle: int, priority: int, queue: Any,
                 kept: KeptErrors[ClStream] | None = None) -> None:
        self.device = device
        self.kept: KeptErrors[ClStream] = KeptErrors() if kept is None else kept
        self.handle = handle
        self.priority = priority
        self.queue = queue
        self.last: Any = None                     # written under lock
        self.worker: HostWorker | None = None     # guarded by lock
        self.lock = reinit_after_fork(threading.Lock())
        # events of host transfers not known to be complete: pyopencl's NannyEvent waits for
        # its transfer when collected, so they must outlive it (see :meth:`track`)
        self.pending: deque[Any] = deque()        # guarded by lock

    def track(self, ev: Any, keep: bool) -> None:
        """Make ``ev`` the stream's last event; with ``keep``, hold it until it completed.

        Completed held events are dropped from the front (in-order queue).
        """
        with self.lock:
            self.last = ev
            p = self.pending
            while p and p[0].command_execution_status == 0:  # CL_COMPLETE
                p.popleft()
            if keep:
                p.append(ev)

    def drop_completed(self) -> None:
        """Forget held events after the queue finished."""
        with self.lock:
            p = self.pending
            while p and p[0].command_execution_status == 0:
                p.popleft()

    def keep(self, exc: BaseException) -> None:
        """Keep ``exc`` unless an earlier exception of this stream is still kept."""
        self.kept.keep(self, exc)

    def close(self) -> None:
        """Stop the worker (after its functions ran) and release the queue."""
        with self.lock:
            worker, self.worker = self.worker, None
        if worker is not None:
            worker.stop()
        self.queue.flush()


class ClEvent:
    """An event: the marker of its last record and the stream it was recorded on."""

    __slots__ = ("device", "marker", "stream", "timing")

    def __init__(self, device: int, timing: bool) -> None:
        self.device = device
        self.timing = timing
        self.marker: Any = None
        self.stream: ClStream | None = None
