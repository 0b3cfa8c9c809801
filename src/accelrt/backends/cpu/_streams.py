"""Streams, events and capture sessions of the cpu backend.

In asynchronous mode each :class:`CpuStream` owns a daemon worker thread (started on its first
piece of work) that runs the stream's work in FIFO order. Threads do not survive ``fork()``: in
a forked child every stream forgets its worker (and its lock, which a parent thread may have
held) and the parent's queued work, which the parent runs: the child starts with every stream
idle, all its work counted as done. Completion is tracked by sequence
numbers: work number ``n`` of a stream has completed once ``stream.completed >= n``. An event
record is the pair ``(stream, n)`` plus the timestamp taken when the work before it is done.

Example::

    >>> from accelrt.backends.cpu._streams import CpuStream
    >>> s = CpuStream(device=0, handle=1, priority=0)
    >>> seq = s.submit(lambda: None)
    >>> s.wait(seq); s.completed == seq
    True
    >>> s.close()
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ... import _stream_callback
from ..._errors import DeviceError
from .._common import KeptErrors, reset_in_child, stream_failed
from ._live import CpuEvent   # (compiled in the compiled build)

__all__ = ["Capture", "CpuEvent", "CpuStream", "Record", "describe", "stamp", "work_error"]

_STOP = object()


class CpuStream:
    """One stream: a FIFO of callables run by a lazily started worker thread.

    ``submitted``/``completed`` count work items; the first exception raised by work is kept
    in ``kept`` under this stream (the backend layer's rule, see
    :class:`~accelrt.backends._common.KeptErrors`). All fields are guarded by ``cv`` (reads of
    the counters without it are safe: they only grow).

    Args:
        device: device index.
        handle: the stream's handle (0 for a default stream).
        priority: its priority (as CUDA: lower is higher; informational here).
        kept: where the first exception of its work is kept (its backend's; default: a new
            one of its own).
        name: its backend's registered name (the worker thread runs host functions of
            "stream 0x1 of cpu:0": :mod:`accelrt._stream_callback`).
    """

    __slots__ = (
        "__weakref__",
        "closed",
        "completed",
        "cv",
        "device",
        "handle",
        "kept",
        "name",
        "priority",
        "queue",
        "submitted",
        "thread",
    )

    def __init__(self, device: int, handle: int, priority: int,
                 kept: KeptErrors[CpuStream] | None = None, name: str = "cpu") -> None:
        self.device = device
        self.name = name
        self.kept: KeptErrors[CpuStream] = KeptErrors() if kept is None else kept
        self.handle = handle
        self.priority = priority
        self.cv = threading.Condition(threading.Lock())
        self.queue: deque[Any] = deque()           # guarded by cv
        self.submitted = 0                         # guarded by cv
        self.completed = 0                         # guarded by cv
        self.thread: threading.Thread | None = None  # guarded by cv
        self.closed = False                        # guarded by cv
        reset_in_child(self)   # a forked child resets its worker

    def submit(self, fn: Callable[[], object]) -> int:
        """Queue ``fn`` and return its sequence number."""
        with self.cv:
            if self.closed:
                raise ValueError(f"stream {self.handle} of cpu:{self.device} was destroyed")
            self.queue.append(fn)
            self.submitted += 1
            seq = self.submitted
            if self.thread is None:
                self._start()
            else:
                self.cv.notify_all()
            return seq

    def _start(self) -> None:
        """Start the worker thread (the caller holds ``cv``, or no other thread exists)."""
        self.thread = threading.Thread(
            target=self._run, name=f"accelrt-cpu{self.device}-stream{self.handle}",
            daemon=True)
        self.thread.start()

    def _after_fork(self) -> None:
        """In a forked child: drop the parent's worker, lock and queued work.

        That work is the parent's (it runs there): run again here, a host function's side
        effects would happen twice, and one waiting for a parent thread would never return.
        The stream starts idle, its work counted as done (what that work would have written is
        unspecified in the child, as device memory is in a CUDA child).
        """
        self.cv = threading.Condition(threading.Lock())
        self.thread = None
        self.queue.clear()
        self.completed = self.submitted

    def _run(self) -> None:
        queue, cv = self.queue, self.cv
        # every piece of work here runs in stream order: what waits for streams is refused
        _stream_callback.enter(f"stream {self.handle:#x} of {self.name}:{self.device}")
        while True:
            with cv:
                while not queue:
                    cv.wait()
                fn = queue.popleft()
            if fn is _STOP:
                return
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - kept and re-raised on the host
                self.kept.keep(self, exc)
            # Drop the work item now: what a host callback holds must not outlive its run.
            del fn
            with cv:
                self.completed += 1
                cv.notify_all()

    def done(self, seq: int) -> bool:
        """True once work number ``seq`` has completed."""
        return self.completed >= seq

    def wait(self, seq: int) -> None:
        """Block until work number ``seq`` has completed."""
        if self.completed >= seq:
            return
        with self.cv:
            while self.completed < seq:
                self.cv.wait()

    def close(self) -> None:
        """Stop the worker once the queued work is done; later submissions raise."""
        with self.cv:
            if self.closed:
                return
            self.closed = True
            if self.thread is not None:
                self.queue.append(_STOP)
                self.cv.notify_all()


def describe(s: CpuStream, name: str) -> str:
    """How a failure of ``s``'s work begins (kept errors, ``DeviceError``); ``name`` is the
    backend's registered name."""
    return stream_failed(name, s.handle, s.device)


def work_error(s: CpuStream, exc: BaseException, name: str) -> DeviceError:
    """The ``DeviceError`` an exception ``exc`` of ``s``'s work surfaces as (``name``: the
    backend's registered name)."""
    err = DeviceError(f"{describe(s, name)}: {type(exc).__name__}: {exc}")
    err.__cause__ = exc
    return err


def stamp(rec: Record) -> None:
    """Queued after an event record's work: take its completion time."""
    rec.ts = time.perf_counter_ns()


class Record:
    """One record of an event: work ``seq`` of ``stream``; ``ts`` set when it completes."""

    __slots__ = ("seq", "stream", "ts")

    def __init__(self, stream: CpuStream, seq: int) -> None:
        self.stream = stream
        self.seq = seq
        self.ts: int | None = None

    def done(self) -> bool:
        """True once the work before the record has completed."""
        return self.stream.completed >= self.seq


class Capture:
    """An open capture: the origin stream and the work recorded, in submission order.

    ``ops`` holds ``("call", fn)``, ``("record", event_handle)`` and ``("wait", event_handle)``
    items that :meth:`~accelrt.backends.cpu.CpuBackend.graph_replay` submits again. ``mode``
    is the capture mode (``"global"``, ``"thread_local"`` or ``"relaxed"``) and ``thread`` the
    ident of the thread that began it: together they decide which threads' device
    synchronizations the capture refuses (:meth:`refuses`).
    """

    __slots__ = ("device", "event_seen", "events", "mode", "nodes", "ops", "origin", "seen",
                 "streams", "thread")

    def __init__(self, device: int, origin: CpuStream, mode: str = "global") -> None:
        self.device = device
        self.origin = origin
        self.mode = mode
        self.thread = threading.get_ident()
        self.ops: list[tuple[str, Any]] = []
        self.events: set[CpuEvent] = set()
        self.streams: set[CpuStream] = {origin}
        # CUDA's fork/join rule, as vector clocks: ``nodes[s]`` counts the nodes stream ``s``
        # added to the capture, ``seen[s][t]`` how many of ``t``'s nodes ``s`` depends on
        # (through waits on events recorded in the capture, ``event_seen[ev]`` at the record)
        self.nodes: dict[CpuStream, int] = {}
        self.seen: dict[CpuStream, dict[CpuStream, int]] = {}
        self.event_seen: dict[CpuEvent, dict[CpuStream, int]] = {}

    def node(self, s: CpuStream) -> None:
        """Stream ``s`` added a node (a call, an external record or wait) to the capture."""
        n = self.nodes.get(s, 0) + 1
        self.nodes[s] = n
        self.seen.setdefault(s, {})[s] = n

    def recorded(self, ev: CpuEvent, s: CpuStream) -> None:
        """``ev`` was recorded on ``s`` in the capture: it stands for ``s``'s nodes so far."""
        self.event_seen[ev] = dict(self.seen.get(s, {}))

    def waited(self, s: CpuStream, ev: CpuEvent) -> None:
        """``s`` waited on ``ev`` (recorded in the capture): it depends on what ``ev`` saw."""
        mine = self.seen.setdefault(s, {})
        for t, n in self.event_seen.get(ev, {}).items():
            if n > mine.get(t, 0):
                mine[t] = n

    def unjoined(self) -> list[CpuStream]:
        """The streams with captured work the origin stream does not depend on (a fork not
        joined back: CUDA's ``cudaErrorStreamCaptureUnjoined`` at the end of the capture)."""
        known = self.seen.get(self.origin, {})
        return [s for s, n in self.nodes.items()
                if s is not self.origin and n > known.get(s, 0)]
